"""Kernel preparation: the one form the backend lowers (paper Sections 4.3, 5).

It is the stage ``prepare`` of the one stage list (issue #14 item 1), the
last before lowering.  Its input grammar is the output grammar of the
front stages every route runs before it: the gen-pushout normal form of
Fig. 9 (``tl.compile``'s route ends at gen pushout; the derivative routes'
simplified programs are in it too).  ``prepare`` type-checks the program
and writes it in the backend's grammar (``flatten.py``: eta expansion only;
``fusion.py``'s module doc: a let-block of ``gen[...] scalar`` bindings and
aliases).  It normalizes nothing: a program outside its input grammar is an
UnsupportedError raised here, naming the sub-expression.  The lowering
(``lower.py``) accepts exactly what this returns.

:data:`PREPARE` declares both grammars, which debug mode asserts
(``passes.pipeline.run_stage``); ``tensorlang.driver`` puts it after the
passes, and the lowering takes what it returns.
"""

from __future__ import annotations

from ..errors import TensorLangError
from ..ir import Expr
from ..passes.pipeline import Stage, deep_recursion, run_stage, well_typed
from ..typecheck import check_program

# flatten.py and fusion.py (the grammar and its checker: isl, the fusion rules) are
# imported when a program is prepared, not when this stage is declared: the driver
# declares it in every process, and a warm one prepares nothing (kernels and
# derived programs come from the caches; issue #14 item 6)


def in_backend_grammar(prog) -> str | None:
    """The backend's input grammar: a let-block ``split_program`` accepts."""
    from .fusion import split_program

    try:
        split_program(prog)
    except TensorLangError as err:  # the checker's verdict, reported as the stage's violation
        return f"outside the backend grammar: {err}"
    return None


def normal_input(prog) -> str | None:
    """The stage's input grammar: well typed, in the gen-pushout normal form."""
    from .flatten import not_normal

    return well_typed(prog) or not_normal(prog)


def _flatten_checked(expr: Expr) -> Expr:
    from .flatten import flatten
    from .fusion import split_program

    prog = flatten(expr)  # refuses a program outside the input grammar, naming the sub-term
    split_program(prog)  # the grammar check: names the first right-hand side outside it
    return prog


PREPARE = Stage("prepare", _flatten_checked, normal_input, in_backend_grammar)


def prepare(expr: Expr) -> Expr:
    """Signature: prepare : Expr -> Expr (a let-block in the backend grammar).

    ``expr``: a program in the gen-pushout normal form (what the routes of
    ``tensorlang.driver`` give the backend).  Raises TensorLangError for an
    ill-typed program and UnsupportedError (naming the sub-expression) for
    one outside the input grammar or one the backend cannot lower.
    """
    if not isinstance(expr, Expr):
        raise TensorLangError(f"tl.compile needs a tensorlang expression, got {type(expr).__name__}")
    deep_recursion()
    check_program(expr)
    return run_stage(PREPARE, expr)
