"""The IR (paper Section 4, Figure 3): interning, canonical affine indices,
free variables, capture-avoiding substitution, alpha-equivalence, generic
traversal."""

from __future__ import annotations

import pickle

import pytest

import numpy as np
from hypothesis import HealthCheck, assume, given, settings

import tensorlang as tl
from tensorlang.ir import (
    REAL, TRUE, FALSE, Access, Add, Aff, And, Cmp, Const, Exists, Gen, IndexVar, Iverson, Let, Mul, Pair, PairT,
    SizeVar, Sum, TensorT, Var, access, accesses, alpha_eq, as_aff, canonicalize, children, conj, disj, free_indices,
    free_vars, gens, lets, make_gens, make_lets, make_sums, rebuild, size_vars, subst, sums, sym_aff, walk,
)
from tensorlang.typecheck import iverson

from tests.strategies import Program, assert_close, programs

n, m = tl.sizes("n m")
x = tl.tensor("x", n)


def iv(name="i"):
    return IndexVar(name, tl.ir.fresh_uid())


# -- interning ---------------------------------------------------------------------


def test_structurally_equal_terms_are_one_object():
    i = iv()
    a = Gen(i, sym_aff(SizeVar("n")), Mul(Access(x, sym_aff(i)), Const(2)))
    b = Gen(i, sym_aff(SizeVar("n")), Mul(Access(x, sym_aff(i)), Const(2)))
    assert a is b
    assert Const(2) is Const(2.0)
    assert Const(0.0) is Const(-0.0)
    assert Const(0.5) is not Const(1)
    assert tl.tensor("x", n) is x
    assert TensorT(n, REAL) is tl.tensor_of([n])


def test_distinct_binders_give_distinct_terms():
    assert tl.gen(n, lambda i: x[i]) is not tl.gen(n, lambda i: x[i])


def test_nodes_pickle_back_to_the_interned_object():
    e = tl.sum(n, lambda i: x[i] * 2)
    assert pickle.loads(pickle.dumps(e)) is e


def test_children_and_rebuild():
    e = tl.gen(n, lambda i: tl.iverson(i < 2, x[i] + 1))
    assert rebuild(e, children(e)) is e
    i, ext, body = children(e)
    other = rebuild(e, (i, ext, Const(3)))
    assert isinstance(other, Gen) and other.body is Const(3) and other.var is i


# -- affine indices ------------------------------------------------------------------


def test_affine_expressions_are_canonical():
    i, j = iv("i"), iv("j")
    I, J = sym_aff(i), sym_aff(j)
    assert (I + J) is (J + I)
    assert (2 * I - I) is I
    assert (I + 3 - 3) is I
    assert (I - I) is as_aff(0)
    assert (3 * (I + 1)) is (3 * I + 3)
    assert (n + m - 1).const == -1
    assert (2 * I).coeff(i) == 2 and (2 * I).coeff(j) == 0


def test_affine_evaluation():
    i = iv()
    a = 2 * sym_aff(i) - n + 5
    assert a.evaluate({i: 3, "n": 4}) == 2 * 3 - 4 + 5


def test_comparisons_build_predicates_and_sugar_desugars():
    i, j = iv("i"), iv("j")
    I, J = sym_aff(i), sym_aff(j)
    assert (I < J) is Cmp("<", I, J)
    assert (I > J) is Cmp("<", J, I)
    assert (I >= J) is Cmp("<=", J, I)
    assert (I == 2) is Cmp("==", I, as_aff(2))
    ne = I != J
    assert isinstance(ne, tl.ir.Or) and ne.lhs is Cmp("<", I, J) and ne.rhs is Cmp("<", J, I)


def test_predicate_literals_fold():
    i = iv()
    p = sym_aff(i) < 3
    assert conj(TRUE, p) is p and conj(p, FALSE) is FALSE and conj() is TRUE
    assert disj(FALSE, p) is p and disj(p, TRUE) is TRUE and disj() is FALSE
    assert iverson(TRUE, x) is x
    z = iverson(FALSE, x)
    np.testing.assert_array_equal(tl.evaluate(z, n=3), np.zeros(3))


# -- free variables ----------------------------------------------------------------------


def test_free_variables_and_indices():
    s = tl.scalar("s")
    e = tl.gen(n, lambda i: tl.let(x[i] * s, lambda t: t + tl.exp(s)))
    assert free_vars(e) == {x, s}
    assert free_indices(e) == frozenset()
    body = e.body  # let t = x[i]·s in t + exp(s), with i free
    assert free_indices(body) == {e.var}
    assert size_vars(e) == {SizeVar("n")}
    p = tl.exists(m, lambda k: sym_aff(e.var) == k)
    assert free_indices(p) == {e.var}


def test_size_variables_include_relation_extents_and_types():
    R = tl.relation("R", n, m)
    e = tl.sum(n, lambda i: tl.iverson(R(i, 0), 1.0))
    assert size_vars(e) == {SizeVar("n"), SizeVar("m")}


# -- substitution -------------------------------------------------------------------------


def test_substitution_of_a_value_variable():
    s, t = tl.scalar("s"), tl.scalar("t")
    e = s * s + 1
    assert subst(e, {s: t}) is t * t + 1


def test_substitution_of_an_index_variable():
    i = iv()
    e = Access(x, sym_aff(i) + 1)
    assert subst(e, idx={i: 2 * n}) is Access(x, 2 * n + 1)


def test_substitution_avoids_capturing_an_index():
    """[i ↦ j](sum[j:n] [i + j < n]·x[i + j]) must rename the bound j."""
    i = iv("i")
    e = tl.sum(n, lambda j: tl.iverson(sym_aff(i) + j < n, x[sym_aff(i) + j]))
    j = e.var
    out = subst(e, idx={i: sym_aff(j)})
    assert isinstance(out, Sum) and out.var is not j
    k = out.var
    assert out.body is Iverson(sym_aff(j) + sym_aff(k) < n, Access(x, sym_aff(j) + sym_aff(k)))
    # meaning: gen[j] sum[k] [j + k < n]·x[j + k] are the suffix sums of x
    closed = Gen(j, n, out)
    xv = np.array([1.0, 2.0, 4.0, 8.0])
    np.testing.assert_allclose(tl.evaluate(closed, x=xv), np.cumsum(xv[::-1])[::-1])


def test_substitution_avoids_capturing_a_let_variable():
    s = tl.scalar("s")
    v = Var("t", tl.ir.fresh_uid(), REAL)
    inner = Var("u", tl.ir.fresh_uid(), REAL)
    e = Let(inner, Const(1), Add(inner, v))  # let u = 1 in u + t
    out = subst(e, {v: inner * 2})  # t := u·2, the outer u: must not be captured
    assert isinstance(out, Let) and out.var is not inner
    assert out.body is Add(out.var, Mul(inner, Const(2)))
    assert tl.evaluate(Let(inner, s, out), s=5.0) == 1 + 10
    del s


def test_substitution_stops_at_shadowing_binders():
    i = iv()
    e = Gen(i, n, Access(x, sym_aff(i)))
    assert subst(e, idx={i: 0}) is e


def test_substitution_agrees_with_evaluation_in_an_environment():
    """⟦[x ↦ v]e⟧σ = ⟦e⟧(σ[x ↦ v]) (RULES.md 3.4)."""
    y = tl.tensor("y", n)
    e = tl.sum(n, lambda i: x[i] * tl.exp(x[n - 1 - i]))
    v = tl.gen(n, lambda k: y[k] * 2)
    xv = np.array([0.1, -0.3, 0.7])
    want = tl.evaluate(e, x=2 * xv)
    assert np.isclose(tl.evaluate(subst(e, {x: v}), y=xv), want)


# -- alpha-equivalence ----------------------------------------------------------------------


def test_alpha_equivalence_ignores_bound_names():
    a = tl.gen(n, lambda i: tl.sum(m, lambda j: tl.iverson(tl.exists(n, lambda k: k < i), x[i])))
    b = tl.gen(n, lambda p: tl.sum(m, lambda q: tl.iverson(tl.exists(n, lambda r: r < p), x[p])))
    assert a is not b and alpha_eq(a, b)
    assert canonicalize(a) is canonicalize(b)
    c = tl.gen(n, lambda p: tl.sum(m, lambda q: tl.iverson(tl.exists(n, lambda r: r <= p), x[p])))
    assert not alpha_eq(a, c)


def test_alpha_equivalence_distinguishes_which_binder_is_used():
    A = tl.tensor("A", n, n)
    a = tl.gen([n, n], lambda i, j: A[i, j])
    b = tl.gen([n, n], lambda i, j: A[j, i])
    assert not alpha_eq(a, b)


def test_alpha_equivalence_of_lets():
    a = tl.let(x, lambda t: tl.sum(n, lambda i: t[i]))
    b = tl.let(x, lambda u: tl.sum(n, lambda k: u[k]))
    assert alpha_eq(a, b)
    assert not alpha_eq(a, tl.sum(n, lambda i: x[i]))


def test_free_variables_are_not_renamed_by_canonicalization():
    i = iv()
    e = Access(x, sym_aff(i))
    assert canonicalize(e) is e


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_canonicalization_preserves_meaning_and_is_idempotent(prog: Program):
    c = canonicalize(prog.expr)
    assert canonicalize(c) is c
    assert alpha_eq(c, prog.expr)
    got, want = tl.evaluate(c, **prog.inputs, **prog.sizes), prog.evaluate()
    assert_close(got, want, prog.bound)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_generic_traversal_rebuilds_every_node(prog: Program):
    for node in walk(prog.expr):
        assert rebuild(node, children(node)) is node


# -- helpers --------------------------------------------------------------------------------


def test_gens_sums_lets_accesses_split_and_rebuild():
    A = tl.tensor("A", n, m)
    g = tl.gen([n, m], lambda i, j: A[i, j] * 2)
    binds, body = gens(g)
    assert len(binds) == 2 and make_gens(binds, body) is g
    s = tl.sum([n, m], lambda i, j: A[i, j])
    sb, sbody = sums(s)
    assert make_sums(sb, sbody) is s
    base, idx = accesses(sbody)
    assert base is A and access(base, idx) is sbody
    e = tl.let(x, lambda a: tl.let(a, lambda b: b))
    lb, res = lets(e)
    assert len(lb) == 2 and make_lets(lb, res) is e


def test_types():
    p = tl.pair_type(tl.tensor_of([n]), tl.Real)
    assert isinstance(p, PairT) and p.fst is TensorT(n, REAL)
    assert str(tl.tensor_of([n, m + 1])) == "[n][m + 1]ℝ"
    assert str(p) == "([n]ℝ × ℝ)"


_ = (And, Exists, Iverson, Pair, Aff)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(pairs=False))
def test_substituting_an_input_agrees_with_evaluating_in_the_extended_environment(prog: Program):
    """⟦[x ↦ v]e⟧σ = ⟦e⟧(σ[x ↦ ⟦v⟧σ]) with v = gen[..] 2·y[..] (or 2·y for a scalar)."""
    assume(prog.input_types)
    name = sorted(prog.input_types)[0]
    t = prog.input_types[name]
    xvar = tl.var(name, t)
    y = tl.var(name + "_half", t)
    shape = tl.ir.shape_of(t)
    v = tl.gen(list(shape), lambda *ix: 2 * tl.ir.access(y, ix)) if shape else 2 * y
    e2 = subst(prog.expr, {xvar: v})
    assert xvar not in free_vars(e2)
    inputs = {k: val for k, val in prog.inputs.items() if k != name}
    inputs[y.name] = prog.inputs[name] / 2
    assert_close(tl.evaluate(e2, **inputs, **prog.sizes), prog.evaluate(), prog.bound)


def _node_classes():
    from tensorlang.ir.nodes import Node

    todo, out = [Node], []
    while todo:
        c = todo.pop()
        todo.extend(c.__subclasses__())
        # the classes @node made (dataclass(slots=True) replaced the class it
        # was given, which may linger among the subclasses: it has no slots)
        if "__dataclass_fields__" in c.__dict__ and "__slots__" in c.__dict__:
            out.append(c)
    return out


def test_a_new_node_is_made_as_its_dataclass_would_make_it():
    """Interned.__call__ stores a new node's fields through its slots
    (nodes._maker), not the frozen dataclass's __init__: the same fields,
    still frozen, still interned, and the dataclass's error for a wrong
    number of fields."""
    import dataclasses

    from tensorlang.ir import Add, Const, Var
    from tensorlang.ir.expressions import SparseVar

    classes = _node_classes()
    assert Add in classes and SparseVar in classes
    for cls in classes:
        assert cls._make is not None and cls._arity == len(dataclasses.fields(cls)), cls
    from tensorlang.ir import REAL

    x = Var("x_maker", 0, REAL)
    e = Add(x, Const(2.5))
    assert (e.lhs, e.rhs) == (x, Const(2.5)) and Add(x, Const(2.5)) is e
    assert pickle.loads(pickle.dumps(e)) is e
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.lhs = x
    with pytest.raises(TypeError):
        Add(x)
    r = tl.relation("R_maker", n)
    s = SparseVar("s_maker", 0, REAL, r)
    assert (s.name, s.uid, s.type, s.rel) == ("s_maker", 0, REAL, r)
