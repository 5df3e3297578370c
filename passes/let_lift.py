"""Let-lifting: paper Section 5.1, Figure 7 (RULES.md Section 4.1), rules 5.1-5.10.

Moves every ``let`` to the outermost level, so a program becomes a block of
statements followed by a let-free result::

    Le ::= e  |  let x = e in Le          (e contains no let)

Precondition: none.  Following the Notes of RULES.md: every rule also covers
its symmetric cases (right operand, any function argument, second pair
component, ``π1``), and 5.10 is used in its corrected form
``let x = (let y = e0 in e1) in e2 ==> let y = e0 in let x = e1 in e2``.

Beyond the printed rules: a binding that does not depend on the index of
the enclosing gen/sum (5.6/5.7) is lifted as it stands, under ``[0 < n]``,
instead of being replicated over the loop (never costlier, and the form the
paper prints for Section 2.3).

The paper assumes no re-use of variable names.  Interning can make one
``let`` node occur twice, so a lifted binder is renamed whenever it would
capture a sibling's free variable, and the rules that change a bound value
(5.6, 5.7, 5.9) bind a fresh variable: two copies of a shared ``let`` then
never bind one name to two different values.
"""

from __future__ import annotations

from tensorlang.ir import (
    Access,
    Add,
    Call,
    Cmp,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    Proj,
    Sum,
    TensorT,
    as_aff,
    free_indices,
    free_vars,
    fresh_var,
    make_lets,
    subst,
    sym_aff,
)

from .rewrite import Entry, ResultCache, RuleTable, bottom_up
from .rules import rule

# --------------------------------------------------------------------------
# Capture avoidance


def _avoiding(l: Let, *others: Expr) -> Let:
    """``l`` with its binder renamed if it occurs free in one of ``others``
    (the side condition ``x ∉ FV(e2)`` of every lifting rule)."""
    x = l.var
    if not any(x in free_vars(o) for o in others):
        return l
    y = fresh_var(x.name, x.type)
    return Let(y, l.value, subst(l.body, {x: y}))


# --------------------------------------------------------------------------
# The rules of Figure 7


@rule("5.1", figure=7)
def lift_add(e: Expr):
    """(let x = e0 in e1) + e2 ==> let x = e0 in e1 + e2
    (symmetric: e2 + (let x = e0 in e1) ==> let x = e0 in e2 + e1)"""
    match e:
        case Add(lhs=Let() as l, rhs=r):
            l = _avoiding(l, r)
            return Let(l.var, l.value, Add(l.body, r))
        case Add(lhs=a, rhs=Let() as l):
            l = _avoiding(l, a)
            return Let(l.var, l.value, Add(a, l.body))
    return None


@rule("5.2", figure=7)
def lift_mul(e: Expr):
    """(let x = e0 in e1) · e2 ==> let x = e0 in e1 · e2
    (symmetric: e2 · (let x = e0 in e1) ==> let x = e0 in e2 · e1)"""
    match e:
        case Mul(lhs=Let() as l, rhs=r):
            l = _avoiding(l, r)
            return Let(l.var, l.value, Mul(l.body, r))
        case Mul(lhs=a, rhs=Let() as l):
            l = _avoiding(l, a)
            return Let(l.var, l.value, Mul(a, l.body))
    return None


@rule("5.3", figure=7)
def lift_call(e: Expr):
    """f(…, let x = e0 in e1, …) ==> let x = e0 in f(…, e1, …)
    (the first let-argument is lifted; the paper prints the first position)"""
    if not isinstance(e, Call):
        return None
    for k, a in enumerate(e.args):
        if isinstance(a, Let):
            l = _avoiding(a, *(b for j, b in enumerate(e.args) if j != k))
            args = e.args[:k] + (l.body,) + e.args[k + 1 :]
            return Let(l.var, l.value, Call(e.fn, args))
    return None


@rule("5.4", figure=7)
def lift_pair(e: Expr):
    """(let x = e0 in e1, e2) ==> let x = e0 in (e1, e2)
    (symmetric: (e2, let x = e0 in e1) ==> let x = e0 in (e2, e1))"""
    match e:
        case Pair(fst=Let() as l, snd=r):
            l = _avoiding(l, r)
            return Let(l.var, l.value, Pair(l.body, r))
        case Pair(fst=a, snd=Let() as l):
            l = _avoiding(l, a)
            return Let(l.var, l.value, Pair(a, l.body))
    return None


@rule("5.5", figure=7)
def lift_proj(e: Expr):
    """π_k (let x = e0 in e1) ==> let x = e0 in π_k e1      (k = 0, 1)"""
    match e:
        case Proj(index=k, arg=Let() as l):
            return Let(l.var, l.value, Proj(k, l.body))
    return None


def _lift_binder(e: Expr):
    """Shared by 5.6 and 5.7: the let-bound x becomes a tensor x' over the
    binder's range, read back as x'[i].

    When i is not free in e0 the value is loop-invariant, and replicating it
    n times would cost n·$e0 where the cost model (its explicit sharing
    hoists invariant tensors out of loops) and the evaluator compute it once.
    Then the binding is lifted as it stands, under the bracket [0 < n] so an
    empty loop still costs nothing:
        gen[i:n] (let x = e0 in e1) ==> let x = [0 < n]·e0 in gen[i:n] e1."""
    i, n, l = e.var, e.extent, e.body
    x = l.var
    if i not in free_indices(l.value):
        x2 = fresh_var(x.name, x.type)  # a new value: a new name
        positive = n.is_const and n.const > 0
        value = l.value if positive else Iverson(Cmp("<", as_aff(0), n), l.value)
        return Let(x2, value, type(e)(i, n, subst(l.body, {x: x2})))
    x2 = fresh_var(x.name, TensorT(n, x.type))
    body = subst(l.body, {x: Access(x2, sym_aff(i))})
    return Let(x2, Gen(i, n, l.value), type(e)(i, n, body))


@rule("5.6", figure=7)
def lift_gen(e: Expr):
    """gen[i:n] (let x = e0 in e1) ==> let x = (gen[i:n] e0) in gen[i:n] [x ↦ x[i]] e1
    (i not free in e0: let x = [0 < n]·e0 in gen[i:n] e1, see _lift_binder)"""
    if isinstance(e, Gen) and isinstance(e.body, Let):
        return _lift_binder(e)
    return None


@rule("5.7", figure=7)
def lift_sum(e: Expr):
    """sum[i:n] (let x = e0 in e1) ==> let x = (gen[i:n] e0) in sum[i:n] [x ↦ x[i]] e1
    (i not free in e0: let x = [0 < n]·e0 in sum[i:n] e1, see _lift_binder)"""
    if isinstance(e, Sum) and isinstance(e.body, Let):
        return _lift_binder(e)
    return None


@rule("5.8", figure=7)
def lift_access(e: Expr):
    """(let x = e0 in e1)[a] ==> let x = e0 in e1[a]"""
    match e:
        case Access(arr=Let() as l, index=a):
            return Let(l.var, l.value, Access(l.body, a))
    return None


@rule("5.9", figure=7)
def lift_iverson(e: Expr):
    """[p]·(let x = e0 in e1) ==> let x = [p]·e0 in [p]·e1
    (the bracket on e0 is what keeps the rule cost-neutral)"""
    match e:
        case Iverson(pred=p, body=Let() as l):
            x = l.var
            x2 = fresh_var(x.name, x.type)  # a new value: a new name
            return Let(x2, Iverson(p, l.value), Iverson(p, subst(l.body, {x: x2})))
    return None


@rule("5.10", figure=7)
def lift_let(e: Expr):
    """let x = (let y = e0 in e1) in e2 ==> let y = e0 in let x = e1 in e2
    (the corrected form; the printed one leaves y unbound in e1)"""
    match e:
        case Let(var=x, value=Let() as l, body=e2):
            l = _avoiding(l, e2, x)
            return Let(l.var, l.value, Let(x, l.body, e2))
    return None


# The rules of Figure 7 by the kind of node they rewrite.
TABLE = RuleTable("let-lifting", {7: (
    Entry(Add, lift_add),
    Entry(Mul, lift_mul),
    Entry(Call, lift_call),
    Entry(Pair, lift_pair),
    Entry(Proj, lift_proj),
    Entry(Gen, lift_gen),
    Entry(Sum, lift_sum),
    Entry(Access, lift_access),
    Entry(Iverson, lift_iverson),
    Entry(Let, lift_let),
)})


# --------------------------------------------------------------------------
# The pass

_RESULTS = ResultCache()


def let_lift(e: Expr) -> Expr:
    """Signature: let_lift : Expr -> Le, with ⟦let_lift(e)⟧σ = ⟦e⟧σ and
    $⟦let_lift(e)⟧σ ≤ $⟦e⟧σ.

    Structural recursion (:func:`.rewrite.bottom_up`): the children are
    lifted first (each is then a let-block around a let-free core), then the
    rules of Figure 7 fire at the root until none matches; each firing
    exposes one more binding.  The result is kept per input program, so the
    pass is a pure function and ``let_lift(let_lift(e)) is let_lift(e)``.
    """
    got = _RESULTS.get(e)
    if got is None:
        got = bottom_up(_at_root, what="let-lifting", special={Let: _lift_block})(e)
        _RESULTS.put(e, got)
    return got


def _lift_block(go, e: Let) -> Expr:
    """A let chain, iteratively (long blocks must not exhaust the stack):
    lift every value and the result, then re-assemble innermost first."""
    chain = []
    while isinstance(e, Let):
        chain.append(e)
        e = e.body
    out = go(e)
    for l in reversed(chain):
        out = _at_root(Let(l.var, go(l.value), out))
    return out


def _at_root(node: Expr) -> Expr:
    """Apply the rules at the root while one matches.  Every rule returns
    ``let x = v in b`` with ``v`` let-free (children are already lifted), so
    only ``b`` can still be a redex: the statements are collected in order."""
    prefix = []
    while True:
        out = TABLE.rewrite(node)
        if out is None:
            return make_lets(prefix, node)
        prefix.append((out.var, out.value))
        node = out.body
