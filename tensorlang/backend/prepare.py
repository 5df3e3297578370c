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

It is the stage ``prepare`` of the one stage list (issue #14 item 1):
:data:`PREPARE` declares its input grammar (a well-typed program) and its
output grammar (``fusion.split_program`` accepts it), which debug mode
asserts (``passes.pipeline.run_stage``); ``tensorlang.driver`` puts it after
the passes, and the lowering takes what it returns.
"""

from __future__ import annotations

from ..errors import TensorLangError
from ..ir import Expr
from ..passes.pipeline import Stage, deep_recursion, run_stage, well_typed
from ..typecheck import check_program
from .flatten import flatten
from .fusion import split_program


def in_backend_grammar(prog) -> str | None:
    """The backend's input grammar: a let-block ``split_program`` accepts."""
    try:
        split_program(prog)
    except TensorLangError as err:  # the checker's verdict, reported as the stage's violation
        return f"outside the backend grammar: {err}"
    return None


def _flatten_checked(expr: Expr) -> Expr:
    prog = flatten(expr)
    split_program(prog)  # the grammar check: names the first right-hand side outside it
    return prog


PREPARE = Stage("prepare", _flatten_checked, well_typed, in_backend_grammar)


def prepare(expr: Expr) -> Expr:
    """Signature: prepare : Expr -> Expr (a let-block in the backend grammar).

    Raises TensorLangError for an ill-typed program and UnsupportedError
    (naming the sub-expression) for one the backend cannot lower.
    """
    if not isinstance(expr, Expr):
        raise TensorLangError(f"tl.compile needs a tensorlang expression, got {type(expr).__name__}")
    deep_recursion()
    check_program(expr)
    return run_stage(PREPARE, expr)
