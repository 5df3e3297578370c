"""The normalization pipeline of paper Section 5 (RULES.md Section 4):
explicit sharing, then let-lifting -> pair elimination -> gen pushout ->
tensor SSA.  ``tl.normalize`` is :func:`normalize`.

Debug mode (``TENSORLANG_DEBUG=1`` in the environment, or
``debug(True)``) makes every pass assert its pre- and post-condition with the
independent checkers of :mod:`.normal_forms`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

from tensorlang.ir import Expr
from tensorlang.sharing import explicit_sharing
from tensorlang.typecheck import check_program

from .gen_pushout import gen_pushout
from .let_lift import let_lift
from .normal_forms import (
    why_not_gen_pushed_out,
    why_not_let_lifted,
    why_not_pair_free,
)
from .pair_elim import pair_elim
from .profile import stage as _timed
from .ssa_form import is_tensor_ssa
from .tensor_ssa import tensor_ssa

_DEBUG = os.environ.get("TENSORLANG_DEBUG", "") not in ("", "0")


def debug(on: bool | None = None) -> bool:
    """Query, or switch, the debug mode; returns the previous setting."""
    global _DEBUG
    prev = _DEBUG
    if on is not None:
        _DEBUG = bool(on)
    return prev


class NormalFormViolation(AssertionError):
    """A pass's pre- or post-condition failed (a bug, reported in debug mode)."""


def _let_lifted(e):
    return why_not_let_lifted(e)


def _pair_pre(e):
    # the struct-of-arrays condition on inputs/output is a user error that
    # the pass itself reports (check_soa_io); here only the structural part
    return why_not_let_lifted(e)


def _ssa_post(e):
    return None if is_tensor_ssa(e) else "not in tensor SSA form (Figure 10)"


def _gen_pre(e):
    return why_not_pair_free(e)


def _ssa_pre(e):
    return why_not_gen_pushed_out(e)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Expr], Expr]
    pre: Callable  # Expr -> message | None
    post: Callable


STAGES = (
    Stage("let_lift", let_lift, lambda e: None, _let_lifted),
    Stage("pair_elim", pair_elim, _pair_pre, why_not_pair_free),
    Stage("gen_pushout", gen_pushout, _gen_pre, why_not_gen_pushed_out),
    Stage("tensor_ssa", tensor_ssa, _ssa_pre, _ssa_post),
)


def run_stage(stage: Stage, e: Expr) -> Expr:
    """One pass; in debug mode its pre- and post-condition are asserted."""
    if _DEBUG:
        msg = stage.pre(e)
        if msg:
            raise NormalFormViolation(f"{stage.name}: precondition violated: {msg}")
    with _timed(stage.name):
        out = stage.run(e)
    if _DEBUG:
        msg = stage.post(out)
        if msg:
            raise NormalFormViolation(f"{stage.name}: postcondition violated: {msg}")
    return out


def normalize(expr: Expr) -> Expr:
    """Signature: normalize : Expr -> S (tensor SSA, Figure 10), with the same
    denotation and no higher cost.  Explicit sharing first (a sub-term used
    twice becomes a let, so it is computed once), then the four passes."""
    if sys.getrecursionlimit() < 20000:  # deep programs recurse structurally
        sys.setrecursionlimit(20000)
    check_program(expr)
    if is_tensor_ssa(expr):  # already normal: the SSA pass is the identity on it
        return run_stage(STAGES[-1], expr)
    with _timed("sharing"):
        e = explicit_sharing(expr)
    for stage in STAGES:
        e = run_stage(stage, e)
    return e


__all__ = ["normalize", "debug", "STAGES", "run_stage", "NormalFormViolation"]
