"""How programs run: one entry point shared by tl.compile, tl.grad, tl.vjp, tl.jvp.

``make_callable(expr, mode=...)`` returns a callable taking the program's
inputs by keyword.  It runs a compiled kernel (``tensorlang.backend``,
compiled lazily on the first call that needs it, so building a gradient
stays cheap); a program the backend does not support (``UnsupportedError``,
e.g. a user-registered scalar function) runs on the reference evaluator
instead, which is slower but has the same meaning.

Policy (``TENSORLANG_RUNTIME``): ``auto`` (default) compiles once a call's
sizes make the work worth a Numba compilation (some size >= 64, or the
product of the sizes >= 4096; below that the evaluator is faster than
compiling, and random-program tests stay fast), ``compiled`` always
compiles, ``evaluator`` never does.
"""

from __future__ import annotations

import os
import warnings

from .errors import UnsupportedError
from .evaluator import evaluate
from .ir import Expr


class EvaluatorKernel:
    """A program run by the reference evaluator (the fallback 'kernel')."""

    def __init__(self, expr: Expr, mode: str = "sparse"):
        self.expr = expr
        self.mode = mode
        self.source = None

    def __call__(self, **inputs):
        return evaluate(self.expr, **inputs)


class LazyKernel:
    """Compiles on first use; falls back to the evaluator on UnsupportedError."""

    def __init__(self, expr: Expr, mode: str = "sparse", threads=None):
        self.expr = expr
        self.mode = mode
        self.threads = threads
        self._impl = None

    def _get(self):
        if self._impl is None:
            from .backend.api import compile as _compile

            try:
                self._impl = _compile(self.expr, mode=self.mode, threads=self.threads)
            except UnsupportedError as exc:
                # same meaning, much slower: say so rather than be silently slow
                warnings.warn(
                    f"tensorlang: the backend cannot compile this program ({exc}); "
                    "it runs on the reference evaluator instead",
                    RuntimeWarning,
                    stacklevel=3,
                )
                self._impl = EvaluatorKernel(self.expr, self.mode)
        return self._impl

    @property
    def source(self):
        return self._get().source

    @property
    def compiled(self) -> bool:
        """Have calls run a compiled kernel (False before the first call that compiles)?"""
        return self._impl is not None and not isinstance(self._impl, EvaluatorKernel)

    def __call__(self, **inputs):
        if self._impl is None and _policy() == "auto" and not _worth_compiling(self.expr, inputs):
            return evaluate(self.expr, **inputs)
        return self._get()(**inputs)


COMPILE_MIN_SIZE = 64
COMPILE_MIN_PRODUCT = 4096


def _policy() -> str:
    p = os.environ.get("TENSORLANG_RUNTIME", "auto").lower()
    return p if p in ("auto", "compiled", "evaluator") else "auto"


def _worth_compiling(expr: Expr, inputs: dict) -> bool:
    from .evaluator import prepare_inputs

    try:
        _, sizes, _, _ = prepare_inputs(expr, inputs, exact=False)
    except Exception:
        return True  # let the kernel report the input error
    vals = [v for v in sizes.values() if v > 0]
    prod = 1
    for v in vals:
        prod *= v
    return any(v >= COMPILE_MIN_SIZE for v in vals) or prod >= COMPILE_MIN_PRODUCT


def make_callable(expr: Expr, *, mode: str = "sparse", **options):
    if _policy() == "evaluator":
        return EvaluatorKernel(expr, mode)
    return LazyKernel(expr, mode, options.get("threads"))
