"""How programs run: one entry point shared by tl.compile, tl.grad, tl.vjp, tl.jvp.

``make_callable(expr, mode=...)`` returns a callable taking the program's
inputs by keyword.  It is a compiled kernel (``tensorlang.backend``,
compiled lazily on the first call so building a gradient stays cheap); a
program the backend does not support (``UnsupportedError``, e.g. a
user-registered scalar function) runs on the reference evaluator instead,
which is slower but exact in meaning.  ``TENSORLANG_RUNTIME=evaluator`` in
the environment forces the evaluator everywhere (useful for tests that
only check meaning and would otherwise spend their time in Numba).
"""

from __future__ import annotations

import os

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
            except UnsupportedError:
                self._impl = EvaluatorKernel(self.expr, self.mode)
        return self._impl

    @property
    def source(self):
        return self._get().source

    @property
    def compiled(self) -> bool:
        return not isinstance(self._get(), EvaluatorKernel)

    def __call__(self, **inputs):
        return self._get()(**inputs)


def make_callable(expr: Expr, *, mode: str = "sparse", **options):
    if os.environ.get("TENSORLANG_RUNTIME", "").lower() == "evaluator":
        return EvaluatorKernel(expr, mode)
    return LazyKernel(expr, mode, options.get("threads"))
