"""Baselines: the workloads of benchmarks/workloads.py restated in each framework's own idiom.

One module per framework (jax_impl, torch_impl, autograd_impl, numba_impl).  Each
exposes ``build(workload, data) -> methods.Impl``; it is imported only inside that
method's own subprocess (benchmarks/worker.py), so a missing package or a crash
stays confined to its row of the table.
"""
