"""Relation programs on the planned dispatch path (issue 13 items 1 and 7).

Checked against NumPy: repeated gradient calls of a relation program give
the same answers as the first (and as a dense NumPy reference), validate
their inputs through a plan (``prepare_inputs`` is not run again), still
refuse NaN/inf naming the input, and still see a mask mutated in place.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import evaluator
from tensorlang.relation_data import RelationData
from tensorlang.sparse import SparseData


def _program():
    n = tl.size("n")
    S = tl.relation("S", n, n)
    A = tl.tensor("A", n, n)
    x = tl.tensor("x", n)
    b = tl.tensor("b", n)
    Ax = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(S(i, j), A[i, j] * x[j])))
    loss = tl.let(Ax, lambda y: tl.sum(n, lambda i: (y[i] - b[i]) ** 2))
    return loss, x, A


def _data(n, seed):
    rng = np.random.default_rng(seed)
    S = rng.random((n, n)) < 0.3
    return {"S": S, "A": rng.normal(size=(n, n)), "x": rng.normal(size=n), "b": rng.normal(size=n)}


def _ref(d):
    As = np.where(d["S"], d["A"], 0.0)
    r = 2.0 * (As @ d["x"] - d["b"])
    return As.T @ r, np.where(d["S"], np.outer(r, d["x"]), 0.0)


pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = evaluator.prepare_inputs

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(evaluator, "prepare_inputs", spy)
    return calls


def test_repeat_calls_are_planned_and_match_numpy(counted):
    loss, x, A = _program()
    g = tl.grad(loss, wrt=[x, A], threads=1)
    d = _data(12, 0)
    for k in range(3):
        gx, gA = g(**d)
        rx, rA = _ref(d)
        np.testing.assert_allclose(gx, rx, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gA, rA, rtol=1e-12, atol=1e-12)
        assert isinstance(gA, np.ndarray) and gA.shape == (12, 12)
        if k == 0:
            first = len(counted)
            assert first >= 1
    assert len(counted) == first  # later calls: the plan, no full validation


def test_mutated_mask_is_converted_again():
    loss, x, A = _program()
    g = tl.grad(loss, wrt=[x, A], threads=1)
    d = _data(10, 1)
    g(**d)
    g(**d)  # planned
    d["S"][::2, :] = ~d["S"][::2, :]  # in place: same object, same shape
    gx, gA = g(**d)
    rx, rA = _ref(d)
    np.testing.assert_allclose(gx, rx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gA, rA, rtol=1e-12, atol=1e-12)
    d2 = dict(d, S=np.zeros((10, 10), dtype=bool))  # a new mask of the same shape
    gx, gA = g(**d2)
    assert not gx.any() and not gA.any()


@pytest.mark.parametrize("planned", [False, True])
@pytest.mark.parametrize("name", ["A", "x", "b"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_inf_refused_first_call_and_planned(name, bad, planned):
    loss, x, A = _program()
    g = tl.grad(loss, wrt=[x, A], threads=1)
    d = _data(8, 2)
    if planned:
        g(**d)
        g(**d)  # planned
    v = d[name].copy()
    v.flat[3] = bad
    with pytest.raises(tl.InputError, match=rf"input {name} contains NaN or infinity"):
        g(**dict(d, **{name: v}))


def test_dense_grad_first_call_refuses_nan_once_checked():
    # the outer validation leaves the kernel's inputs to the kernel: still refused, naming the input
    n = tl.size("n")
    x = tl.tensor("x", n)
    c = tl.tensor("c", n)
    g = tl.grad(tl.sum(n, lambda i: c[i] * x[i] ** 2), wrt=x)
    with pytest.raises(tl.InputError, match="input c contains NaN"):
        g(x=np.ones(5), c=np.array([1.0, np.nan, 0, 0, 0]))
    with pytest.raises(tl.InputError, match="input x contains NaN"):
        g(x=np.array([1.0, np.inf, 0, 0, 0]), c=np.ones(5))
    np.testing.assert_allclose(g(x=np.arange(5.0), c=np.full(5, 3.0)), 6.0 * np.arange(5.0))


def test_value_and_grad_and_compiled_loss_planned_with_relation():
    loss, x, A = _program()
    vg = tl.value_and_grad(loss, wrt=[x, A], threads=1)
    k = tl.compile(loss)
    d = _data(9, 3)
    As = np.where(d["S"], d["A"], 0.0)
    for _ in range(3):
        val, (gx, gA) = vg(**d)
        rx, rA = _ref(d)
        ref_val = float(((As @ d["x"] - d["b"]) ** 2).sum())
        np.testing.assert_allclose(val, ref_val, rtol=1e-12)
        np.testing.assert_allclose(gA, rA, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(k(**d), ref_val, rtol=1e-12)
    with pytest.raises(tl.InputError, match="input A contains NaN"):
        k(**dict(d, A=np.full((9, 9), np.nan)))


def test_wrong_relation_shape_still_refused_after_planning():
    loss, x, A = _program()
    g = tl.grad(loss, wrt=[x, A], threads=1)
    d = _data(6, 4)
    g(**d)
    g(**d)
    with pytest.raises(tl.InputError):
        g(**dict(d, S=np.ones((6, 5), dtype=bool)))


@pytest.mark.parametrize("shape", [(5, 7), (3, 4, 6), (9,)])
def test_dense_of_packed_values_matches_a_scatter(shape):
    rng = np.random.default_rng(5)
    mask = rng.random(shape) < 0.4
    rd = tl.relation_data(mask)
    vals = rng.normal(size=rd.nnz)
    want = np.zeros(shape)
    want[tuple(np.argwhere(mask).T)] = vals  # np.argwhere is row-major, as the relation's order
    np.testing.assert_array_equal(SparseData(rd, vals).dense(), want)
    assert isinstance(rd, RelationData)
