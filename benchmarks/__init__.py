"""tensorlang's benchmark suite (issue #8): workloads, baselines, runner, reports.

``python -m benchmarks --quick`` is the CI smoke run; ``benchmarks.runner.main(argv)``
is the entry point the ``tensorlang bench`` command calls.
"""
