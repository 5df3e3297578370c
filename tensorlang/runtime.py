"""How programs run: one entry point shared by tl.compile, tl.grad, tl.vjp, tl.jvp.

``make_callable(expr)`` returns a callable taking the program's inputs by
keyword.  Until the backend lands it runs the reference evaluator; the
backend issue replaces the body of ``make_callable`` with compiled kernels
without changing any caller.
"""

from __future__ import annotations

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


def make_callable(expr: Expr, *, mode: str = "sparse", **options):
    return EvaluatorKernel(expr, mode)
