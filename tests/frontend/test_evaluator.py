"""The reference evaluator (Figures 4-5, rules 4.1-4.21) against independent
NumPy computations, construct by construct; exact evaluation over sympy;
size inference; guards; sharing computed once."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import tensorlang as tl
from tensorlang.sharing import explicit_sharing

n, m = tl.sizes("n m")
rng = np.random.default_rng(4)


# -- scalars, arithmetic, functions (4.1-4.5) ------------------------------------


def test_constants_variables_add_mul_sub_neg():
    a, b = tl.scalar("a"), tl.scalar("b")
    assert tl.evaluate(a + b * 3 - 0.5, a=1.5, b=-2.0) == pytest.approx(1.5 + (-2.0) * 3 - 0.5)
    assert tl.evaluate(-a * b, a=2.0, b=4.0) == -8.0
    assert tl.evaluate(2 - a, a=5.0) == -3.0
    assert tl.evaluate(tl.const(2.5) + a, a=0.0) == 2.5


@pytest.mark.parametrize(
    "fn, ref, v",
    [
        (tl.exp, np.exp, 0.3), (tl.log, np.log, 2.5), (tl.sin, np.sin, 1.1), (tl.cos, np.cos, 1.1),
        (tl.tanh, np.tanh, -0.7), (tl.sqrt, np.sqrt, 3.0), (tl.sigmoid, lambda t: 1 / (1 + np.exp(-t)), 0.4),
        (lambda e: e**3, lambda t: t**3, -1.3), (lambda e: e**0.5, np.sqrt, 2.0), (lambda e: e**-2, lambda t: t**-2.0, 1.7),
        (lambda e: 1 / e, lambda t: 1 / t, 4.0), (lambda e: e / 2, lambda t: t / 2, 3.0),
        (lambda e: e**2, lambda t: t * t, -3.0),
    ],
)
def test_builtin_functions(fn, ref, v):
    a = tl.scalar("a")
    assert tl.evaluate(fn(a), a=v) == pytest.approx(float(ref(v)), rel=1e-14)


def test_user_registered_function_with_two_arguments():
    hyp = tl.register_function(
        "test_hypot", 2, numpy=np.hypot, sympy=lambda a, b: sympy.sqrt(a * a + b * b),
        partials=lambda a, b: (a / tl.sqrt(a * a + b * b), b / tl.sqrt(a * a + b * b)), replace=True)
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: hyp(x[i], 1.0))
    xv = rng.normal(size=5)
    assert tl.evaluate(e, x=xv) == pytest.approx(float(np.hypot(xv, 1.0).sum()))


# -- gen, sum, access (4.7, 4.8, 4.11) -------------------------------------------------


def test_gen_sum_access_matrix_vector_and_transpose():
    A, v = tl.tensor("A", n, m), tl.tensor("v", m)
    Av, vv = rng.normal(size=(4, 3)), rng.normal(size=3)
    mv = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * v[j]))
    np.testing.assert_allclose(tl.evaluate(mv, A=Av, v=vv), Av @ vv)
    At = tl.gen([m, n], lambda j, i: A[i, j])
    np.testing.assert_array_equal(tl.evaluate(At, A=Av), Av.T)
    row = A[2]  # partial access: a row
    np.testing.assert_array_equal(tl.evaluate(row, A=Av), Av[2])
    total = tl.sum([n, m], lambda i, j: A[i, j])
    assert tl.evaluate(total, A=Av) == pytest.approx(Av.sum())


def test_three_nested_gens_and_an_outer_product_over_mixed_extents():
    x, y = tl.tensor("x", n), tl.tensor("y", n + m - 1)
    e = tl.gen([n, n + m - 1, 2], lambda i, j, k: x[i] * y[j] + tl.iverson(k == 1, 1.0))
    xv, yv = rng.normal(size=3), rng.normal(size=5)
    want = np.outer(xv, yv)[:, :, None] + np.array([0.0, 1.0])
    got = tl.evaluate(e, x=xv, y=yv)
    assert got.shape == (3, 5, 2)
    np.testing.assert_allclose(got, want)


def test_strided_and_reversed_accesses():
    x = tl.tensor("x", 2 * n)
    evens = tl.gen(n, lambda i: x[2 * i])
    rev = tl.gen(2 * n, lambda i: x[2 * n - 1 - i])
    xv = np.arange(8.0)
    np.testing.assert_array_equal(tl.evaluate(evens, x=xv), xv[::2])
    np.testing.assert_array_equal(tl.evaluate(rev, x=xv), xv[::-1])


def test_indexing_a_generated_tensor_in_place():
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: tl.gen(n, lambda j: x[j] * x[i])[n - 1 - i])
    xv = rng.normal(size=4)
    assert tl.evaluate(e, x=xv) == pytest.approx(float(xv @ xv[::-1]))


def test_empty_extents():
    x = tl.tensor("x", n)
    assert tl.evaluate(tl.sum(n, lambda i: x[i]), x=np.zeros(0)) == 0.0
    assert tl.evaluate(tl.gen(n, lambda i: x[i] * 2), x=np.zeros(0)).shape == (0,)


# -- Iverson brackets and predicates (4.12, 4.18-4.21) -------------------------------------


def indicator(f, N, M):
    return np.array([[1.0 if f(i, j) else 0.0 for j in range(M)] for i in range(N)])


@pytest.mark.parametrize(
    "pred, py",
    [
        (lambda i, j: i < j, lambda i, j: i < j),
        (lambda i, j: i <= j, lambda i, j: i <= j),
        (lambda i, j: i == j, lambda i, j: i == j),
        (lambda i, j: i > j + 1, lambda i, j: i > j + 1),
        (lambda i, j: i >= 2 * j, lambda i, j: i >= 2 * j),
        (lambda i, j: i != j, lambda i, j: i != j),
        (lambda i, j: 2 * i == j, lambda i, j: 2 * i == j),
        (lambda i, j: i == 2, lambda i, j: i == 2),
        (lambda i, j: i + j == n - 1, lambda i, j: i + j == 5 - 1),
        (lambda i, j: (i < j) & (j < i + 2), lambda i, j: i < j < i + 2),
        (lambda i, j: (i == 0) | (j == m - 1), lambda i, j: i == 0 or j == 3 - 1),
        (lambda i, j: tl.exists(m, lambda k: (i == 2 * k) & (k < j)), lambda i, j: any(i == 2 * k and k < j for k in range(3))),
        (lambda i, j: i == n, lambda i, j: False),  # never: empty
    ],
)
def test_predicates_against_python(pred, py):
    e = tl.gen([n, m], lambda i, j: tl.iverson(pred(i, j), 1.0))
    np.testing.assert_array_equal(tl.evaluate(e, n=5, m=3), indicator(py, 5, 3))


def test_iverson_at_tensor_and_pair_type_gives_zeros():
    x = tl.tensor("x", n)
    e = tl.gen(n, lambda i: tl.iverson(i == 1, x))  # [n][n], row 1 is x
    xv = rng.normal(size=3)
    want = np.zeros((3, 3))
    want[1] = xv
    np.testing.assert_array_equal(tl.evaluate(e, x=xv), want)
    s = tl.scalar("s")
    p = tl.sum(n, lambda i: tl.proj(tl.iverson(i < 2, tl.pair(s, x[i])), 1))
    assert tl.evaluate(p, s=1.0, x=xv) == pytest.approx(xv[:2].sum())


def test_guarded_boundary_access_reads_only_where_guarded():
    x = tl.tensor("x", n)
    diff = tl.gen(n, lambda i: x[i] - tl.iverson(i - 1 >= 0, x[i - 1]))
    xv = rng.normal(size=5)
    np.testing.assert_allclose(tl.evaluate(diff, x=xv), np.diff(np.concatenate([[0.0], xv])))
    img = tl.tensor("img", m, n)
    lap = tl.gen([m, n], lambda j, i: tl.iverson((i - 1 >= 0) & (i + 1 < n), img[j, i - 1] + img[j, i + 1] - 2 * img[j, i]))
    iv = rng.normal(size=(3, 6))
    want = np.zeros_like(iv)
    want[:, 1:-1] = iv[:, :-2] + iv[:, 2:] - 2 * iv[:, 1:-1]
    np.testing.assert_allclose(tl.evaluate(lap, img=iv), want)


# -- relations (4.20) --------------------------------------------------------------


def test_relation_as_boolean_array_and_as_coordinate_rows():
    R = tl.relation("R", n, m)
    A = tl.tensor("A", n, m)
    e = tl.sum([n, m], lambda i, j: tl.iverson(R(i, j), A[i, j]))
    Av = rng.normal(size=(4, 3))
    mask = rng.random((4, 3)) < 0.5
    want = float(Av[mask].sum())
    assert tl.evaluate(e, A=Av, R=mask) == pytest.approx(want)
    coords = np.argwhere(mask)
    assert coords.dtype.kind == "i"
    assert tl.evaluate(e, A=Av, R=coords) == pytest.approx(want)
    assert tl.evaluate(e, A=Av, R=np.zeros((0, 2), dtype=np.int64)) == 0.0


def test_relation_under_exists_is_a_row_nonempty_test():
    R = tl.relation("R", n, m)
    e = tl.gen(n, lambda i: tl.iverson(tl.exists(m, lambda k: R(i, k)), 1.0))
    mask = np.array([[0, 0, 0], [0, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(tl.evaluate(e, R=mask), mask.any(axis=1).astype(float))


def test_relation_composition_with_exists():
    """(R ∘ S)(i, j) = exists k. R(i, k) ∧ S(k, j): the boolean matrix product."""
    R, S = tl.relation("R", n, m), tl.relation("S", m, n)
    e = tl.gen([n, n], lambda i, j: tl.iverson(tl.exists(m, lambda k: R(i, k) & S(k, j)), 1.0))
    Rv, Sv = rng.random((4, 3)) < 0.4, rng.random((3, 4)) < 0.4
    want = (Rv.astype(int) @ Sv.astype(int) > 0).astype(float)
    np.testing.assert_array_equal(tl.evaluate(e, R=Rv, S=Sv), want)


def test_sparse_matrix_vector_product_from_coordinate_rows():
    R = tl.relation("R", n, m)
    A, v = tl.tensor("A", n, m), tl.tensor("v", m)
    e = tl.gen(n, lambda i: tl.sum(m, lambda j: tl.iverson(R(i, j), A[i, j] * v[j])))
    coords = np.array([[0, 1], [2, 0], [2, 2], [3, 1]])
    Av, vv = rng.normal(size=(4, 3)), rng.normal(size=3)
    dense = np.zeros((4, 3))
    dense[coords[:, 0], coords[:, 1]] = Av[coords[:, 0], coords[:, 1]]
    np.testing.assert_allclose(tl.evaluate(e, A=Av, v=vv, R=coords), dense @ vv)


# -- lets and pairs (4.6, 4.9, 4.10) -----------------------------------------------------


def test_let_of_scalar_tensor_and_pair():
    x = tl.tensor("x", n)
    xv = rng.normal(size=4)
    e1 = tl.let(tl.sum(n, lambda i: x[i]), lambda s: tl.gen(n, lambda i: x[i] - s * 0.25))
    np.testing.assert_allclose(tl.evaluate(e1, x=xv), xv - xv.sum() / 4)
    e2 = tl.let(tl.pair(tl.sum(n, lambda i: x[i]), tl.gen(n, lambda i: x[i] * x[i])),
                lambda p: tl.proj(p, 0) * tl.sum(n, lambda i: tl.proj(p, 1)[i]))
    assert tl.evaluate(e2, x=xv) == pytest.approx(xv.sum() * (xv @ xv))


def test_pair_output_and_nested_pairs():
    x = tl.tensor("x", n)
    e = tl.pair(tl.sum(n, lambda i: x[i]), tl.pair(tl.gen(n, lambda i: 2 * x[i]), 3.0))
    xv = rng.normal(size=3)
    got = tl.evaluate(e, x=xv)
    assert isinstance(got, tuple) and isinstance(got[1], tuple)
    assert got[0] == pytest.approx(xv.sum())
    np.testing.assert_allclose(got[1][0], 2 * xv)
    assert got[1][1] == 3.0


def test_struct_of_arrays_pair_input():
    t = tl.pair_type(tl.tensor_of([n]), tl.tensor_of([n, m]))
    p = tl.var("p", t)
    e = tl.gen(n, lambda i: tl.proj(p, 0)[i] * tl.sum(m, lambda j: tl.proj(p, 1)[i, j]))
    a, B = rng.normal(size=3), rng.normal(size=(3, 2))
    np.testing.assert_allclose(tl.evaluate(e, p=(a, B)), a * B.sum(axis=1))
    s = tl.var("s", tl.pair_type(tl.Real, tl.Real))
    assert tl.evaluate(tl.proj(s, 0) * tl.proj(s, 1), s=(2.0, 3.5)) == 7.0


def test_generator_of_pairs_is_an_intermediate_array_of_structs():
    x = tl.tensor("x", n)
    g = tl.gen(n, lambda i: tl.pair(x[i], x[i] * x[i]))
    e = tl.sum(n, lambda i: tl.proj(g[i], 0) * tl.proj(g[n - 1 - i], 1))
    xv = rng.normal(size=4)
    assert tl.evaluate(e, x=xv) == pytest.approx(float(xv @ (xv * xv)[::-1]))
    whole = tl.evaluate(g, x=xv)
    assert whole.shape == (4,) and whole[2] == pytest.approx((xv[2], xv[2] ** 2))


# -- sizes ---------------------------------------------------------------------------


def test_sizes_are_inferred_by_solving_extent_equations():
    x, c = tl.tensor("x", n + m - 1), tl.tensor("c", m)
    e = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    assert tl.evaluate(e, x=np.ones(10), c=np.ones(3)).shape == (8,)  # m = 3 from c, then n = 8 from x
    y = tl.tensor("y", 2 * n + 1)
    assert tl.evaluate(tl.gen(n, lambda i: y[2 * i + 1]), y=np.arange(7.0)).tolist() == [1.0, 3.0, 5.0]
    # explicit sizes are accepted and checked
    assert tl.evaluate(tl.sum(n, lambda i: 1.0), n=6) == 6.0


# -- exact evaluation over sympy ------------------------------------------------------------


def test_exact_evaluation_over_sympy_symbols():
    x, c = tl.tensor("x", n), tl.tensor("c", n)
    xs = np.array(sympy.symbols("x0:3", real=True), dtype=object)
    cs = np.array(sympy.symbols("c0:3", real=True), dtype=object)
    e = tl.sum(n, lambda i: tl.exp(x[i]) * c[i] * 0.5 + tl.iverson(i == 1, x[i] ** 2))
    got = tl.evaluate(e, x=xs, c=cs)
    want = sum(sympy.exp(xs[k]) * cs[k] / 2 for k in range(3)) + xs[1] ** 2
    assert sympy.simplify(got - want) == 0
    vec = tl.evaluate(tl.gen(n, lambda i: x[i] * 3 + 1), x=xs)
    assert vec.dtype == object and all(sympy.expand(vec[k] - (3 * xs[k] + 1)) == 0 for k in range(3))


def test_exact_constants_are_rationals():
    s = tl.scalar("s")
    got = tl.evaluate(s * 0.1 + 0.25, s=sympy.Symbol("s"))
    assert got == sympy.Symbol("s") * sympy.Rational(3602879701896397, 36028797018963968) + sympy.Rational(1, 4)


# -- sharing: computed once ---------------------------------------------------------------

CALLS = {"n": 0}


def _counting(v):
    CALLS["n"] += 1
    return v * v


counted = tl.register_function(
    "test_counted_square", 1, numpy=_counting, sympy=lambda v: v * v, partials=lambda v: (2 * v,), replace=True)


def calls_during(f):
    CALLS["n"] = 0
    f()
    return CALLS["n"]


def test_an_intermediate_gen_indexed_twice_is_computed_once():
    x = tl.tensor("x", n)
    y = tl.gen(n, lambda i: counted(x[i]))
    e = tl.sum(n, lambda i: y[i] * y[n - 1 - i])
    xv = rng.normal(size=6)
    assert calls_during(lambda: tl.evaluate(e, x=xv)) == 6
    assert tl.evaluate(e, x=xv) == pytest.approx(float((xv**2) @ (xv**2)[::-1]))
    shared = explicit_sharing(e)
    assert calls_during(lambda: tl.evaluate(shared, x=xv)) == 6


def test_a_let_bound_tensor_is_computed_once_and_a_repeated_scalar_once_per_point():
    x = tl.tensor("x", n)
    e = tl.let(tl.gen(n, lambda i: counted(x[i])), lambda y: tl.sum([n, n], lambda i, j: y[i] * y[j]))
    xv = rng.normal(size=5)
    assert calls_during(lambda: tl.evaluate(e, x=xv)) == 5
    assert tl.evaluate(e, x=xv) == pytest.approx(float((xv**2).sum() ** 2))
    # the same scalar sub-term used twice at each point is one node: one call per point
    e2 = tl.gen(n, lambda i: counted(x[i]) + counted(x[i]) * 2)
    assert calls_during(lambda: tl.evaluate(e2, x=xv)) == 5


def test_a_false_guard_is_never_evaluated_under():
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: tl.iverson(i == 2, counted(x[i])))
    assert calls_during(lambda: tl.evaluate(e, x=np.ones(5))) == 1
    assert calls_during(lambda: tl.evaluate(e, x=np.ones(2))) == 0


def test_output_types():
    x, s = tl.tensor("x", n), tl.scalar("s")
    assert isinstance(tl.evaluate(tl.sum(n, lambda i: x[i]), x=np.ones(2)), float)
    assert isinstance(tl.evaluate(s, s=1.0), float)
    out = tl.evaluate(tl.gen(n, lambda i: x[i]), x=np.ones(2))
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
