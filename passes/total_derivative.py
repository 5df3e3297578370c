"""The total (forward-mode) derivative ``D⟦e⟧σ``: paper Section 6.2, Figure 13.

``σ`` maps each differentiated variable ``x`` to the expression of its
differential ``dx``; variables outside ``σ`` are constants (6.2).  The
transform is a structural recursion over *any* well-typed expression (not
only tensor SSA).  On tensor SSA, rule 6.16 introduces exactly one
differential binding per binding, which is what Theorem 6.1 counts
(``cost(D e) <= 4 cost(e)``).

Zero folding: the rules build their right-hand sides through smart
constructors that drop *literal* zeros (``0 + e``, ``0·e``, ``[p]·0``, a
``gen``/``sum`` of zero, an access into a zero tensor).  This never changes
the value and only lowers the cost; it keeps ``D`` of constants from
producing dead arithmetic.  Black-box functions use their registered
partial derivatives (``tensorlang.functions``), rule 6.6.
"""

from __future__ import annotations

from tensorlang.errors import TensorLangError, describe
from tensorlang.functions import derivative_def
from tensorlang.ir import (
    Access,
    is_zero,
    Add,
    Call,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    Proj,
    Sum,
    Var,
    free_vars,
    fresh_var,
)
from tensorlang.typecheck import type_of, zero_of

from .env import extend
from .rewrite import Entry, RuleTable
from .rules import rule

# --------------------------------------------------------------------------
# Literal zeros and the folding constructors


def zero_like(e: Expr) -> Expr:
    return zero_of(type_of(e))


def add(a: Expr, b: Expr) -> Expr:
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    return Add(a, b)


def mul(a: Expr, b: Expr) -> Expr:
    if is_zero(a) or is_zero(b):
        return Const(0)
    return Mul(a, b)


def bracket(p, e: Expr) -> Expr:
    from tensorlang.typecheck import iverson

    if is_zero(e):
        return e
    return iverson(p, e)


def gen(i, n, body: Expr) -> Expr:
    return Gen(i, n, body)


def sum_(i, n, body: Expr) -> Expr:
    if is_zero(body):
        return Const(0)
    return Sum(i, n, body)


def access(arr: Expr, a) -> Expr:
    if is_zero(arr):
        return zero_of(type_of(Access(arr, a)))
    return Access(arr, a)


def proj(k: int, e: Expr) -> Expr:
    if isinstance(e, Pair):  # D of a pair is a pair: project it right away (5.11)
        return e.fst if k == 0 else e.snd
    return Proj(k, e)


# --------------------------------------------------------------------------
# Figure 13.  Each rule: (e, sigma, D) -> Expr | None, D the recursion.


@rule("6.1", figure=13)
def d_var_differentiated(e, sigma, D):
    """D⟦x⟧(σ[x ↦ dx])  ==>  dx"""
    if isinstance(e, Var) and e in sigma:
        return sigma[e]
    return None


@rule("6.2", figure=13)
def d_var_constant(e, sigma, D):
    """D⟦x⟧σ  ==>  0,   where x ∉ σ"""
    if isinstance(e, Var) and e not in sigma:
        return zero_like(e)
    return None


@rule("6.3", figure=13)
def d_const(e, sigma, D):
    """D⟦c⟧σ  ==>  0"""
    if isinstance(e, Const):
        return Const(0)
    return None


@rule("6.4", figure=13)
def d_add(e, sigma, D):
    """D⟦e0 + e1⟧σ  ==>  D⟦e0⟧σ + D⟦e1⟧σ"""
    if isinstance(e, Add):
        return add(D(e.lhs, sigma), D(e.rhs, sigma))
    return None


@rule("6.5", figure=13)
def d_mul(e, sigma, D):
    """D⟦e0 · e1⟧σ  ==>  D⟦e0⟧σ · e1 + e0 · D⟦e1⟧σ"""
    if isinstance(e, Mul):
        return add(mul(D(e.lhs, sigma), e.rhs), mul(e.lhs, D(e.rhs, sigma)))
    return None


@rule("6.6", figure=13)
def d_call(e, sigma, D):
    """D⟦f(e0, …)⟧σ  ==>  Df(e0, …; D⟦e0⟧σ, …)

    ``Df`` is the black-box total derivative ``D[f]`` (tensorlang.functions:
    ``Σ_k (∂_k f)(e0, …)·de_k``, derived from f's registered partials): one
    application, costed 1 like any black box (rule 4.26), as Theorem 6.1's
    proof assumes."""
    if not isinstance(e, Call):
        return None
    ds = [D(a, sigma) for a in e.args]
    if all(is_zero(d) for d in ds):
        return Const(0)
    return Call(derivative_def(e.fn).name, tuple(e.args) + tuple(ds))


@rule("6.7", figure=13)
def d_pair(e, sigma, D):
    """D⟦(e0, e1)⟧σ  ==>  (D⟦e0⟧σ, D⟦e1⟧σ)"""
    if isinstance(e, Pair):
        return Pair(D(e.fst, sigma), D(e.snd, sigma))
    return None


@rule("6.8", figure=13)
def d_proj(e, sigma, D):
    """D⟦π0 e⟧σ  ==>  π0 D⟦e⟧σ      (π1 symmetric)"""
    if isinstance(e, Proj):
        return proj(e.index, D(e.arg, sigma))
    return None


@rule("6.9", figure=13)
def d_gen(e, sigma, D):
    """D⟦gen[i:n] e⟧σ  ==>  gen[i:n] D⟦e⟧σ"""
    if isinstance(e, Gen):
        return gen(e.var, e.extent, D(e.body, sigma))
    return None


@rule("6.10", figure=13)
def d_sum(e, sigma, D):
    """D⟦sum[i:n] e⟧σ  ==>  sum[i:n] D⟦e⟧σ"""
    if isinstance(e, Sum):
        return sum_(e.var, e.extent, D(e.body, sigma))
    return None


@rule("6.11", figure=13)
def d_access(e, sigma, D):
    """D⟦e[a]⟧σ  ==>  (D⟦e⟧σ)[a]"""
    if isinstance(e, Access):
        return access(D(e.arr, sigma), e.index)
    return None


@rule("6.12", figure=13)
def d_iverson(e, sigma, D):
    """D⟦[p]·e⟧σ  ==>  [p]·D⟦e⟧σ"""
    if isinstance(e, Iverson):
        return bracket(e.pred, D(e.body, sigma))
    return None


@rule("6.16", figure=13)
def d_let(e, sigma, D):
    """D⟦let x = e0 in e1⟧σ  ==>  let x = e0 in let dx = D⟦e0⟧σ in D⟦e1⟧(σ[x ↦ dx])"""
    if not isinstance(e, Let):
        return None
    x = e.var
    dx = fresh_var("d" + x.name, x.type)
    inner = D(e.body, extend(sigma, x, dx))  # persistent: O(1) per binding (issue #14)
    return Let(x, e.value, Let(dx, D(e.value, sigma), inner))


# Figure 13 keyed by node kind: one entry per constructor (two for a
# variable: differentiated or constant).  ``dispatch`` refuses a kind
# without an entry (a Loop: issue 17's stages differentiate it), naming it.
TABLE = RuleTable("total derivative", {13: (
    Entry(Var, d_var_differentiated),
    Entry(Var, d_var_constant),
    Entry(Const, d_const),
    Entry(Add, d_add),
    Entry(Mul, d_mul),
    Entry(Call, d_call),
    Entry(Pair, d_pair),
    Entry(Proj, d_proj),
    Entry(Gen, d_gen),
    Entry(Sum, d_sum),
    Entry(Access, d_access),
    Entry(Iverson, d_iverson),
    Entry(Let, d_let),
)})


# --------------------------------------------------------------------------
# The transform


class _D:
    """Memoized recursion: one memo per environment (DAGs stay DAGs)."""

    def __init__(self):
        self.memo: dict = {}

    def __call__(self, e: Expr, sigma: dict) -> Expr:
        key = (id(e), id(sigma))
        hit = self.memo.get(key)
        if hit is not None and hit[0] is e and hit[1] is sigma:
            return hit[2]
        # A sub-term that mentions no differentiated variable is constant.
        # A compound sub-term that mentions no differentiated variable is
        # constant: its derivative is zero (6.2 and 6.3 by induction).  Lets are
        # exempt: 6.16 gives every binding its differential binding.
        if not isinstance(e, (Let, Var, Const)) and not (free_vars(e) & sigma.keys()):
            out = zero_like(e)
        else:
            out = self._rule(e, sigma)
        self.memo[key] = (e, sigma, out)
        return out

    def _rule(self, e: Expr, sigma: dict) -> Expr:
        return TABLE.dispatch(e, sigma, self)


def total_derivative(e: Expr, sigma: dict) -> Expr:
    """Signature: total_derivative : Expr × (Var -> Expr) -> Expr  (D⟦e⟧σ, Fig. 13).

    ``sigma`` maps the differentiated variables to their differentials (of
    the same type).  Lets follow 6.16: the primal binding is kept and one
    differential binding ``d<name>`` follows it.
    """
    type_of(e)
    for x, dx in sigma.items():
        if type_of(dx) is not x.type:
            raise TensorLangError(f"the differential of {x.name} has type {type_of(dx)}, expected {x.type}")
    # an empty-environment memo is keyed by the dict identity: keep one dict
    return _D()(e, dict(sigma))


def tangent_inputs(e: Expr, wrt) -> dict:
    """``{x: dx}`` with ``dx`` a new program input named ``"d" + x.name``."""
    from tensorlang.ir import input_vars

    names = {v.name for v in input_vars(e)}
    sigma = {}
    for x in wrt:
        if not isinstance(x, Var) or x.uid != 0:
            raise TensorLangError(f"can only differentiate with respect to program inputs, got {describe(x)}")
        name = "d" + x.name
        if name in names:
            raise TensorLangError(
                f"the tangent of {x.name} would be named {name!r}, but the program already has an input of that name"
            )
        sigma[x] = Var(name, 0, x.type)
    return sigma
