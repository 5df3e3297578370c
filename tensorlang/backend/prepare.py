"""Kernel preparation: the one form the backend lowers (paper Sections 4.3, 5).

``prepare(expr)`` is the single place that decides how a program is brought
into the backend's input grammar (``fusion.py``'s module doc: a let-block of
``gen[...] scalar`` bindings and aliases).  It type-checks the program and
flattens it (``flatten.py``: closed lets lifted, pairs split into struct of
arrays, accesses of generators beta-reduced, brackets pushed into gens, a
tensor let under a loop kept as a per-iteration local array).  The lowering
(``lower.py``) accepts exactly what this returns; there are no other
candidate forms.  A construct outside the grammar is an UnsupportedError
raised here, naming the sub-expression.
"""

from __future__ import annotations

import sys

from ..errors import TensorLangError
from ..ir import Expr
from ..typecheck import check_program

# Programs nested hundreds deep recurse that deep in every pass over them.
RECURSION_LIMIT = 20000


def deep_recursion() -> None:
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)


def prepare(expr: Expr) -> Expr:
    """Signature: prepare : Expr -> Expr (a let-block in the backend grammar).

    Raises TensorLangError for an ill-typed program and UnsupportedError
    (naming the sub-expression) for one the backend cannot lower.
    """
    from .flatten import flatten
    from .fusion import split_program

    if not isinstance(expr, Expr):
        raise TensorLangError(f"tl.compile needs a tensorlang expression, got {type(expr).__name__}")
    deep_recursion()
    check_program(expr)
    prog = flatten(expr)
    split_program(prog)  # the grammar check: names the first right-hand side outside it
    return prog
