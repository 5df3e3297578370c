"""Obligations for simplification's named rules (passes/simplify_rules.py; paper §2.1, §2.2, §6).

Simplification belongs to no figure of the paper, but its local rewrites are
registered like the numbered rules (``simplify.<name>``), so each has an
obligation here of the same shape as the Section 5 local rules
(:mod:`proofs.normal_forms`): instances of the left-hand side are built from
:mod:`proofs.terms` under a random context of generators, the registered
rule is applied with that context (the binders it sits under: what
``decide_bracket`` and ``inline_gather`` read), and on the closed programs
``C[lhs]`` and ``C[rhs]`` the check is (a) exact equality over sympy at
several small sizes and (b) ``$(C[rhs]) <= $(C[lhs])`` for all sizes >= 1.
A rule that no instance makes fire is "not exercised", never a pass.
"""

from __future__ import annotations

from tensorlang.ir import (
    REAL,
    Let,
    fresh_var,
    TRUE,
    And,
    Cmp,
    Or,
    as_aff,
    Access,
    Add,
    Const,
    Gen,
    Iverson,
    Mul,
    Pair,
    Proj,
    Sum,
    fresh_index,
    sym_aff,
)

from .framework import NOT_IMPL, Result, Tally, guarded, obligation, same_semantics
from .normal_forms import _cost_check, _index_for
# simplify's gather inlining and bracket pull are rules 5.21 and 5.22 applied
# where they do not raise the cost: the same terms exercise them
from .normal_forms import _m5_21 as _m_inline_gather
from .normal_forms import _m5_22 as _m_access_bracket
from .terms import EXACT_SIZES, N, Terms, X, Y, close

COUNT = {True: 4, False: 12}  # instances per rule: quick / full


def _zero(T, sc):
    """A literal zero of scalar type (0, [p]·0 or a sum of 0)."""
    k = T.rng.randrange(3)
    if k == 0:
        return Const(0)
    if k == 1:
        return Iverson(T.pred(sc), Const(0))
    n, i = T.extent(), fresh_index("k")
    return Sum(i, n, Const(0))


def _either(T, a, b, ctor):
    return ctor(a, b) if T.coin() else ctor(b, a)


def _m_add_zero(T):
    sc = T.context()
    return sc, _either(T, _zero(T, sc), T.scalar(sc, 1), Add)


def _m_mul_zero(T):
    sc = T.context()
    return sc, _either(T, _zero(T, sc), T.scalar(sc, 1), Mul)


def _m_mul_one(T):
    sc = T.context()
    return sc, _either(T, Const(1), T.scalar(sc, 1), Mul)


def _m_gen_zero(T):
    sc = T.context(T.rng.randrange(2))
    n, i = T.extent(), fresh_index("i")
    return sc, Gen(i, n, _zero(T, sc.with_idx(i, n)))


def _m_access_zero(T):
    sc = T.context()
    n, i = T.extent(), fresh_index("i")
    return sc, Access(Gen(i, n, _zero(T, sc.with_idx(i, n))), _index_for(T, sc, n))


def _m_bracket_zero(T):
    sc = T.context()
    return sc, Iverson(T.pred(sc), _zero(T, sc))


def _m_bracket_out_of_product(T):
    sc = T.context()
    return sc, _either(T, Iverson(T.pred(sc), T.scalar(sc, 1)), T.scalar(sc, 1), Mul)


def _m_decide_bracket(T):
    """A bracket whose predicate the enclosing ranges decide in part (a
    conjunct implied by ``0 <= i < n``), in full (empty), not at all, or
    as a smaller gist (the union of shifted supports an adjoint composes,
    ``[0 <= i-1 ∧ i-1 < n ∨ 0 <= i+1 ∧ i+1 < n]``: ``[2 <= n]``)."""
    sc = T.context(1 + T.rng.randrange(2))
    i, n = T.rng.choice(sc.idx)
    ai = sym_aff(i)
    implied = T.rng.choice([Cmp("<=", as_aff(0), ai), Cmp("<", ai, n), Cmp("<=", ai, n - 1)])
    k = T.rng.randrange(4)
    if k == 0:
        p = And(implied, T.pred(sc))
    elif k == 1:
        p = Cmp("<=", n, ai)  # outside the range: the bracket is false
    elif k == 2:
        p = T.pred(sc)
    else:
        s = T.rng.choice([1, 2])
        p = Or(And(Cmp("<=", as_aff(0), ai - s), Cmp("<", ai - s, n)),
               And(Cmp("<=", as_aff(0), ai + s), Cmp("<", ai + s, n)))
    return sc, Iverson(p, T.scalar(sc, 1))


def _m_merge_brackets(T):
    sc = T.context()
    return sc, Iverson(T.pred(sc), Iverson(T.pred(sc), T.scalar(sc, 1)))


def _m_bracket_true(T):
    sc = T.context()
    return sc, Iverson(TRUE, T.scalar(sc, 1))


def _m_gen_eta(T):
    sc = T.context(T.rng.randrange(2))
    if T.coin():
        vec, n = T.vector(sc, 1)
    else:
        n = T.extent()
        vec = X if n is N else Y
    i = fresh_index("i")
    return sc, Gen(i, n, Access(vec, sym_aff(i)))


def _m_project_pair(T):
    sc = T.context()
    k = T.rng.randrange(2)
    if T.coin():  # a component shares a loop-invariant term with the other (the reason for project)
        shared = Add(Const(2), T.leaf(sc))
        n, i = T.extent(), fresh_index("g")
        return sc, Proj(k, Pair(Gen(i, n, Mul(shared, shared)), Add(shared, Const(1))))
    return sc, Proj(k, Pair(T.scalar(sc, 1), T.scalar(sc, 1)))


def _m_sum_single_point(T):
    """``sum[k:m] [k = a ∧ q]·e``: the summed index fixed by an affine
    function of a context index (the shape an adjoint leaves, §2.1)."""
    sc = T.context(1 + T.rng.randrange(2))
    i, n = T.rng.choice(sc.idx)
    m, k = T.extent(), fresh_index("k")
    inner = sc.with_idx(k, m)
    a = T.rng.choice([sym_aff(i), sym_aff(i) + 1, sym_aff(i) - 1, as_aff(0)])
    eq = Cmp("==", sym_aff(k), a) if T.coin() else Cmp("==", a, sym_aff(k))
    p = And(eq, T.pred(inner)) if T.coin(0.4) else eq
    return sc, Sum(k, m, Iverson(p, T.scalar(inner, 1)))


def _m_propagate_copy(T):
    sc = T.context()
    v = fresh_var("v", REAL)
    k = T.rng.randrange(3)
    u = T.leaf(sc) if k == 0 else (Const(T.rng.choice((0, 2, -1))) if k == 1 else _zero(T, sc))
    return sc, Let(v, u, T.uses(sc, v, 1))


def _m_inline_single_use(T):
    sc = T.context(1 + T.rng.randrange(2))
    v = fresh_var("v", REAL)
    i, n = T.rng.choice(sc.idx)
    arr = X if n is N else Y
    g = Iverson(T.pred(sc), Access(arr, sym_aff(i))) if T.coin() else Access(arr, sym_aff(i))
    body = Mul(v, T.scalar(sc, 1)) if T.coin() else Add(T.scalar(sc, 1), v)
    return sc, Let(v, g, body)


def _m_dead_let(T):
    sc = T.context()
    v = fresh_var("v", REAL)
    return sc, Let(v, T.scalar(sc, 2), T.scalar(sc, 1))


def _m_let_result(T):
    sc = T.context()
    v = fresh_var("v", REAL)
    return sc, Let(v, T.scalar(sc, 2), v)


RULES = {
    # name: (title, maker)
    "simplify.add_zero": ("0 + e ==> e", _m_add_zero),
    "simplify.mul_zero": ("0 · e ==> 0", _m_mul_zero),
    "simplify.mul_one": ("1 · e ==> e", _m_mul_one),
    "simplify.gen_zero": ("gen[i:n] 0 ==> 0", _m_gen_zero),
    "simplify.access_zero": ("0[a] ==> 0", _m_access_zero),
    "simplify.bracket_zero": ("[p]·0 ==> 0", _m_bracket_zero),
    "simplify.bracket_out_of_product": ("([p]·a)·b ==> [p]·(a·b)", _m_bracket_out_of_product),
    "simplify.decide_bracket": ("[p]·e ==> [p']·e (p decided under the context; a smaller gist)", _m_decide_bracket),
    "simplify.merge_brackets": ("[p0]·[p1]·e ==> [p0 ∧ p1]·e", _m_merge_brackets),
    "simplify.bracket_true": ("[true]·e ==> e", _m_bracket_true),
    "simplify.gen_eta": ("gen[i:n] a[i] ==> a", _m_gen_eta),
    "simplify.inline_gather": ("(gen[i:n] e)[a] ==> e[i := a] (where it does not raise the cost)", _m_inline_gather),
    "simplify.access_bracket": ("([p]·e)[a] ==> [p]·e[a]", _m_access_bracket),
    "simplify.sum_single_point": ("sum[i:n] [i = a ∧ q]·e ==> [0 <= a < n ∧ q']·e[i := a]", _m_sum_single_point),
    "simplify.propagate_copy": ("let v = u in e ==> e[v := u] (u a variable, constant or zero)", _m_propagate_copy),
    "simplify.inline_single_use": ("let v = g in e ==> e[v := g] (g a gather used once)", _m_inline_single_use),
    "simplify.dead_let": ("let v = e0 in e1 ==> e1 (v not free in e1)", _m_dead_let),
    "simplify.let_result": ("let v = e0 in v ==> e0", _m_let_result),
    "simplify.project_pair": ("π_k (e0, e1) ==> e_k (keeping shared terms bound)", _m_project_pair),
}


def _run(number: str, title: str, maker, quick: bool) -> Result:
    from tensorlang.passes.simplify_preds import Ctx

    from .framework import first_registered

    r = first_registered(number)
    if r is None:
        return Result(number, title, NOT_IMPL, detail="no rule registered under this name")
    tally = Tally(number, title, semantics="exact sympy at (n,m) in {(2,3),(3,1),(1,2)}",
                  cost="$(rhs) <= $(lhs), symbolic")
    sizes = EXACT_SIZES[:1] if quick else EXACT_SIZES
    seed0 = sum(map(ord, number))
    for k in range(COUNT[quick]):
        T = Terms(seed=seed0 * 1000 + 17 * k, lets=False)
        sc, lhs = maker(T)
        tally.instances += 1
        rhs = r.fn(lhs, Ctx(binds=tuple(sc.idx)))
        if rhs is None:
            continue
        tally.fired += 1
        before, after = close(sc, lhs), close(sc, rhs)
        msg = same_semantics(before, after, sizes)
        if msg:
            tally.fail(f"instance {k}: {msg}")
            continue
        _cost_check(tally, k, before, after, sizes)
    return tally.result()


def _register():
    for number, (title, maker) in RULES.items():
        def run(quick, number=number, title=title, maker=maker):
            return guarded(number, title, lambda: _run(number, title, maker, quick))

        obligation(number, figure="simplify", kind="simplify", title=title)(run)


_register()
