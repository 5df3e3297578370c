"""The stages of paper Sections 5 and 6 as data (issue #14 item 1; RULES.md Section 4).

The path from the user's program to the kernel is one stage list; this
module holds the stages that live in the passes layer:

==============  ===============================  ==================================
stage           input grammar (``pre``)          output grammar (``post``)
==============  ===============================  ==================================
hoist_guards    well-typed program               well-typed program
sharing         well-typed program               no shared work outside a let
let_lift        any                              let-lifted (Fig. 7)
pair_elim       let-lifted                       pair-free (Fig. 8)
gen_pushout     pair-free                        gen pushed out (Fig. 9)
tensor_ssa      gen pushed out                   tensor SSA (Fig. 10)
derivative      well-typed (D, Fig. 13)          well-typed
adjoint         tensor SSA (Dᵀ, Figs. 14-16)     well-typed
naive_adjoint   tensor SSA (dense Dᵀ)            well-typed
simplify        well-typed                       well-typed, same type
==============  ===============================  ==================================

Kernel preparation (``tensorlang.backend.prepare.PREPARE``) and the routes
of the entry points (grad, vjp, jvp, compile, cost, audit) are put together
one layer up, in ``tensorlang.driver``; ``tl.normalize`` is
:func:`normalize` (the route sharing -> tensor SSA).

Every stage runs through :func:`run_stage`, which names it in the profile
(``passes.profile``: timing and the ordered trace) and, in debug mode
(``TENSORLANG_DEBUG=1`` in the environment, or ``debug(True)``), asserts
its pre- and post-condition with the independent checkers of
:mod:`.normal_forms` and :mod:`.ssa_form`.  The derivative stages take the
entry point's parameters (``wrt``, the seed or the tangents) as keywords.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

from tensorlang.errors import TensorLangError, describe
from tensorlang.ir import Const, Expr, Let, Pair, free_vars, lets, make_lets, subst
from tensorlang.sharing import explicit_sharing, invariant_tensors, shared_terms
from tensorlang.loops import has_loop
from tensorlang.sparse import hoist_guards
from tensorlang.typecheck import check_program, type_of

from .adjoint import transpose
from .gen_pushout import gen_pushout
from .let_lift import let_lift
from .loop_normalize import normalize_loop_program
from .naive_adjoint import naive_transpose
from .normal_forms import (
    why_not_gen_pushed_out,
    why_not_let_lifted,
    why_not_pair_free,
)
from .pair_elim import pair_elim
from .profile import note as _note, stage as _timed
from .simplify import simplify
from .ssa_form import is_tensor_ssa
from .tensor_ssa import tensor_ssa
from .total_derivative import total_derivative

_DEBUG = os.environ.get("TENSORLANG_DEBUG", "") not in ("", "0")


def debug(on: bool | None = None) -> bool:
    """Query, or switch, the debug mode; returns the previous setting."""
    global _DEBUG
    prev = _DEBUG
    if on is not None:
        _DEBUG = bool(on)
    return prev


class NormalFormViolation(AssertionError):
    """A stage's pre- or post-condition failed (a bug, reported in debug mode)."""


# --------------------------------------------------------------------------
# Grammar checkers: Expr -> message | None


def well_typed(e) -> str | None:
    """A closed, well-typed program (the grammar of Fig. 3 with the rules of Fig. 2)."""
    if not isinstance(e, Expr):
        return f"not an expression: {type(e).__name__}"
    try:
        check_program(e)
    except TensorLangError as err:  # the checker's verdict, reported as the stage's violation
        return f"ill-typed: {err}"
    return None


def sharing_explicit(e) -> str | None:
    """No sub-term that does work has two parents, and no tensor that does work
    is rebuilt by a loop that does not need to (``sharing.explicit_sharing``'s
    output; rule 4.32 charges a DAG-shared term once, the lets say where)."""
    msg = well_typed(e)
    if msg:
        return msg
    left = shared_terms(e) or invariant_tensors(e)
    return f"a shared or loop-invariant sub-term is not let-bound: {describe(left[0])}" if left else None


def let_lifted(e) -> str | None:
    return why_not_let_lifted(e)


def pair_elim_input(e) -> str | None:
    # the struct-of-arrays condition on inputs/output is a user error that
    # the pass itself reports (check_soa_io); here only the structural part
    return why_not_let_lifted(e)


def tensor_ssa_form(e) -> str | None:
    return None if is_tensor_ssa(e) else "not in tensor SSA form (Figure 10)"


def adjoint_input(e) -> str | None:
    # the adjoint rules read the Fig. 10 grammar, canonical index names or not
    return None if is_tensor_ssa(e, canonical=False) else "not in tensor SSA form (Figure 10)"


@dataclass(frozen=True)
class Stage:
    """One stage: ``run(expr, **params) -> expr``; ``pre``/``post``: the input and
    output grammar (``Expr -> message | None``)."""

    name: str
    run: Callable[..., Expr]
    pre: Callable
    post: Callable


def run_stage(stage: Stage, e: Expr, **params) -> Expr:
    """One stage; in debug mode its pre- and post-condition are asserted."""
    _note(stage.name)
    if _DEBUG:
        msg = stage.pre(e)
        if msg:
            raise NormalFormViolation(f"{stage.name}: precondition violated: {msg}")
    with _timed(stage.name):
        out = stage.run(e, **params)
    if _DEBUG:
        msg = stage.post(out)
        if msg:
            raise NormalFormViolation(f"{stage.name}: postcondition violated: {msg}")
    return out


# --------------------------------------------------------------------------
# The derivative stages (Section 6), parameterised by the entry point


def with_primal(ssa: Expr, derived: Expr) -> Expr:
    """``let B in (out, res)`` for ``ssa = let P in out`` and ``derived = let B in res``
    where the derivative passes kept the primal bindings ``P`` in ``B`` (the
    adjoint's ``let primal… in let adjoint…``, the total derivative's rule
    6.16): the primal output is read off the derivative's own bindings, so the
    value and the derivative share one program and every residual."""
    binds, res = lets(derived)
    _, out = lets(ssa)
    bound = {v for v, _ in binds}
    stray = [v for v in free_vars(out) if v.uid != 0 and v not in bound]
    if stray:  # the derivative passes dropped a primal binding: never a wrong value
        raise TensorLangError(f"internal: the derivative program does not bind {stray[0].name}, which the output reads")
    return make_lets(binds, Pair(out, res))


def _derivative(e: Expr, *, sigma: dict, value: bool = False) -> Expr:
    """D⟦e⟧σ (Fig. 13); ``value``: ``(e, D⟦e⟧σ)`` sharing the primal (rule 6.16)."""
    out = total_derivative(e, sigma)
    return with_primal(e, out) if value else out


def _transposer(naive: bool):
    def run(ssa: Expr, *, wrt, seed, value: bool = False, seed_value=None) -> Expr:
        """Dᵀ⟦ssa⟧ for the cotangent ``seed``; ``value``: ``(primal, cotangents)``
        from one program; ``seed_value``: the seed fixed to a constant (∇l is
        Dᵀl(x, 1), RULES.md 5.1)."""
        adj = (naive_transpose if naive else transpose)(ssa, list(wrt), seed)
        if value:
            adj = with_primal(ssa, adj)
        if seed_value is None:
            return adj
        if naive:  # no simplify follows the naive adjoint: substitute now
            return subst(adj, vals={seed: Const(seed_value)})
        # as a binding, propagated by simplify's one pass over the let-block: a
        # substitution into the whole block computed the free variables of every
        # suffix of it (quadratic in its length, issue #14)
        return Let(seed, Const(seed_value), adj)

    return run


def _simplify_post(e) -> str | None:
    return well_typed(e)


def _simplify(e: Expr) -> Expr:
    t = type_of(e)
    out = simplify(e)
    if type_of(out) is not t:  # pragma: no cover - every rewrite preserves types
        raise TensorLangError("internal: simplify changed the type of the program")
    return out


def _no_check(e) -> None:
    return None


HOIST_GUARDS = Stage("hoist_guards", hoist_guards, well_typed, well_typed)  # sparse reads' brackets (issue 16)
SHARING = Stage("sharing", explicit_sharing, well_typed, sharing_explicit)
LET_LIFT = Stage("let_lift", let_lift, _no_check, let_lifted)
PAIR_ELIM = Stage("pair_elim", pair_elim, pair_elim_input, why_not_pair_free)
GEN_PUSHOUT = Stage("gen_pushout", gen_pushout, why_not_pair_free, why_not_gen_pushed_out)
TENSOR_SSA = Stage("tensor_ssa", tensor_ssa, why_not_gen_pushed_out, tensor_ssa_form)
DERIVATIVE = Stage("derivative", _derivative, well_typed, well_typed)
ADJOINT = Stage("adjoint", _transposer(False), adjoint_input, well_typed)
NAIVE_ADJOINT = Stage("naive_adjoint", _transposer(True), adjoint_input, well_typed)
SIMPLIFY = Stage("simplify", _simplify, well_typed, _simplify_post)

# the four normal-form passes of Section 5, in order
STAGES = (LET_LIFT, PAIR_ELIM, GEN_PUSHOUT, TENSOR_SSA)
# every stage of this layer, in pipeline order
PASS_STAGES = (HOIST_GUARDS, SHARING, *STAGES, DERIVATIVE, ADJOINT, NAIVE_ADJOINT, SIMPLIFY)


def deep_recursion() -> None:
    if sys.getrecursionlimit() < 20000:  # deep programs recurse structurally
        sys.setrecursionlimit(20000)


def normalize(expr: Expr) -> Expr:
    """Signature: normalize : Expr -> S (tensor SSA, Figure 10), with the same
    denotation and no higher cost.  Explicit sharing first (a sub-term used
    twice becomes a let, so it is computed once), then the four passes."""
    deep_recursion()
    check_program(expr)
    if has_loop(expr):  # each loop-free part and the loop's body on its own (issue #17 item 1)
        return normalize_loop_program(expr, normalize)
    if already_normal(SHARING, expr):
        return run_stage(TENSOR_SSA, expr)
    e = run_stage(SHARING, expr)
    for stage in STAGES:
        e = run_stage(stage, e)
    return e


def already_normal(stage: Stage, e: Expr) -> bool:
    """Does the normal-form block (sharing .. gen pushout), entered at ``stage``,
    leave ``e`` alone?  (Stages compared by name: a reloaded module makes new
    Stage objects.)

    Normalization is the identity on tensor SSA up to canonical index names
    (which the ``tensor_ssa`` stage gives), and the passes are not run on it:
    each is idempotent on its own normal form, but gen pushout on a tensor-SSA
    program re-splits its contractions (``normalize`` is idempotent because of
    this rule, tests/oracles.py checks it)."""
    return stage.name == "sharing" and is_tensor_ssa(e)


__all__ = ["normalize", "debug", "STAGES", "PASS_STAGES", "Stage", "run_stage", "NormalFormViolation",
           "with_primal", "well_typed", "already_normal"]
