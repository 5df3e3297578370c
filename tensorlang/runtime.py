"""How programs run: one entry point shared by tl.compile, tl.grad, tl.vjp, tl.jvp.

``make_callable(expr, loops="sparse"|"box", runtime=None, threads=None)``
returns a callable taking the program's inputs by keyword (``loops``: the
kernel's loops, isl-narrowed or full boxes; ``mode="naive"`` is the older
spelling of ``loops="box"``).  The backend compiles every
program of the language (paper Section 4.3; ``tensorlang.backend``); a
program it cannot lower is an UnsupportedError naming the sub-expression,
never a silent switch to the reference evaluator.

Runtime (the ``runtime=`` argument, else ``$TENSORLANG_RUNTIME``):

* ``"auto"`` (default): compiled kernels, built lazily on the first call
  whose sizes make a Numba compilation worth it (some size >= 64, or the
  product of the sizes >= 4096).  Smaller calls before that are computed by
  the reference evaluator, which gives the same values (it is the
  semantics the kernels are tested against) and is faster than compiling.
  This is a documented size policy, not a fallback: a compile error is
  raised, never hidden.
* ``"compiled"``: always the compiled kernel (compiled on the first call).
* ``"evaluator"``: always the reference evaluator (explicitly asked for:
  slow, exact semantics, accepts exact inputs).

Any other value is a TensorLangError.
"""

from __future__ import annotations

import os

from .errors import TensorLangError
from .evaluator import evaluate
from .ir import Expr

RUNTIMES = ("auto", "compiled", "evaluator")
COMPILE_MIN_SIZE = 64
COMPILE_MIN_PRODUCT = 4096


class EvaluatorKernel:
    """A program run by the reference evaluator (``runtime="evaluator"``)."""

    def __init__(self, expr: Expr, mode: str = "sparse"):
        self.expr = expr
        self.mode = mode
        self.source = None
        self.compiled = False

    def __call__(self, **inputs):
        return evaluate(self.expr, **inputs)


class LazyKernel:
    """A compiled kernel, compiled on first use (see the module doc for ``auto``)."""

    def __init__(self, expr: Expr, mode: str = "sparse", threads=None, runtime: str = "auto"):
        self.expr = expr
        self.mode = mode
        self.threads = threads
        self.runtime = runtime
        self._impl = None

    def _get(self):
        if self._impl is None:
            from .driver import compile as _compile  # the route "compile" (issue 14 item 1)
            from .passes.profile import build, stage

            with build("kernel") as times, stage("backend"):  # prepare, lower, codegen, import
                self._impl = _compile(self.expr, mode=self.mode, threads=self.threads)
            self.profile = times
        return self._impl

    @property
    def source(self):
        return self._get().source

    @property
    def compiled(self) -> bool:
        """Have calls run a compiled kernel (False before the first call that compiles)?"""
        return self._impl is not None

    def planned_entry(self, inputs: dict):
        """``(run, plan)`` when the compiled kernel holds a validated plan for
        this call's signature (``run(plan, inputs, None)`` calls it), else None."""
        if self._impl is None:
            return None
        return self._impl.planned_entry(inputs)

    def __call__(self, **inputs):
        impl = self._impl
        if impl is not None:
            return impl(**inputs)
        if self.runtime == "auto" and not _worth_compiling(self.expr, inputs):
            from .backend.results import as_float32, precision

            out = evaluate(self.expr, **inputs)
            # the evaluator computes in float64; float32 inputs get float32
            # results, as from the kernel (issue 18's precision contract)
            return as_float32(out) if precision(self.expr, inputs) == "float32" else out
        return self._get()(**inputs)


def runtime_choice(runtime: str | None = None) -> str:
    """The runtime asked for: the argument, else ``$TENSORLANG_RUNTIME``, else 'auto'."""
    r = runtime if runtime is not None else os.environ.get("TENSORLANG_RUNTIME", "auto")
    r = r.lower() if isinstance(r, str) else r
    if r not in RUNTIMES:
        raise TensorLangError(f"unknown runtime {r!r} (TENSORLANG_RUNTIME or runtime=); use one of {RUNTIMES}")
    return r


def _worth_compiling(expr: Expr, inputs: dict) -> bool:
    from .evaluator import prepare_inputs

    try:
        _, sizes, _, _ = prepare_inputs(expr, inputs, exact=False, compressed=True)  # sizes only
    except Exception:
        return True  # let the kernel report the input error
    vals = [v for v in sizes.values() if v > 0]
    prod = 1
    for v in vals:
        prod *= v
    return any(v >= COMPILE_MIN_SIZE for v in vals) or prod >= COMPILE_MIN_PRODUCT


def make_callable(expr: Expr, *, mode: str | None = None, loops: str | None = None, runtime: str | None = None,
                  **options):
    """A callable running ``expr`` (see module doc); ``options``: ``threads``."""
    from .backend.api import lowering_mode

    mode = lowering_mode(mode, loops)
    r = runtime_choice(runtime)
    threads = options.get("threads")
    if threads is not None and (type(threads) is not int or threads < 1):
        raise TensorLangError(f"threads must be None or a positive int, got {threads!r}")
    if r == "evaluator":
        return EvaluatorKernel(expr, mode)
    return LazyKernel(expr, mode, options.get("threads"), r)
