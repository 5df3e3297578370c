"""Call-time dispatch plans (issue #13 item 7; tensorlang/backend/dispatch.py).

Structure, not time: the full validation runs once per input signature
(counted by wrapping the planning function), a changed shape or dtype
re-plans or is refused as on the first call, and values are checked
against NumPy on every path.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import api as backend_api
from tensorlang.backend import dispatch


def _loss():
    n = tl.size("n")
    x = tl.tensor("x", n)
    w = tl.tensor("w", n)
    return tl.sum(n, lambda i: w[i] * x[i] * x[i]), x


@pytest.fixture
def plan_count(monkeypatch):
    calls = []
    orig = backend_api.Kernel._plan

    def counted(self, *a, **k):
        calls.append(1)
        return orig(self, *a, **k)

    monkeypatch.setattr(backend_api.Kernel, "_plan", counted)
    return calls


def test_plan_built_once_per_signature(plan_count):
    loss, _ = _loss()
    k = tl.compile(loss)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, w = rng.normal(size=7), rng.normal(size=7)
        assert k(x=x, w=w) == pytest.approx(float(np.sum(w * x * x)))
    assert len(plan_count) == 1
    x, w = rng.normal(size=9), rng.normal(size=9)  # new shape: new plan, new size
    assert k(x=x, w=w) == pytest.approx(float(np.sum(w * x * x)))
    assert len(plan_count) == 2
    x32, w32 = x.astype(np.float32), w.astype(np.float32)  # new dtype: float32 kernel
    out = k(x=x32, w=w32)
    assert isinstance(out, np.float32) and out == pytest.approx(float(np.sum(w32 * x32 * x32)), rel=1e-5)
    assert len(plan_count) == 3
    k(x=x32, w=w32)
    assert len(plan_count) == 3


def test_planned_signature_still_refuses_bad_values_and_shapes():
    loss, _ = _loss()
    k = tl.compile(loss)
    x, w = np.ones(4), np.ones(4)
    assert k(x=x, w=w) == 4.0
    bad = x.copy()
    bad[2] = np.nan
    with pytest.raises(tl.TensorLangError, match="input x contains NaN"):
        k(x=bad, w=w)
    bad[2] = np.inf
    with pytest.raises(tl.TensorLangError, match="input w contains NaN"):
        k(x=x, w=bad)
    with pytest.raises(tl.TensorLangError):
        k(x=x, w=np.ones(5))  # inconsistent sizes: refused by the full path
    with pytest.raises(tl.TensorLangError):
        k(x=np.ones((4, 1)), w=w)  # wrong rank
    with pytest.raises(tl.TensorLangError):
        k(x=x)  # missing input
    with pytest.raises(tl.TensorLangError):
        k(x=x, w=w, z=x)  # unknown input
    # a non-contiguous view (same dtype and shape as planned) is read correctly
    big = np.arange(8.0)
    assert k(x=big[::2], w=w) == pytest.approx(float(np.sum(big[::2] ** 2)))
    # integers and lists: converted as before
    assert k(x=np.arange(4), w=w) == pytest.approx(14.0)
    assert k(x=[0.0, 1.0, 2.0, 3.0], w=w) == pytest.approx(14.0)


def test_gradients_plan_once_and_match_numpy(plan_count):
    loss, x = _loss()
    g = tl.grad(loss, wrt=x)
    vg = tl.value_and_grad(loss, wrt=x)
    rng = np.random.default_rng(1)
    n0 = None
    for i in range(4):
        xs, ws = rng.normal(size=100), rng.normal(size=100)  # large enough to compile under 'auto'
        np.testing.assert_allclose(g(x=xs, w=ws), 2 * ws * xs, rtol=1e-12)
        v, d = vg(x=xs, w=ws)
        assert v == pytest.approx(float(np.sum(ws * xs * xs)))
        np.testing.assert_allclose(d, 2 * ws * xs, rtol=1e-12)
        if i == 0:
            n0 = len(plan_count)
    assert len(plan_count) == n0  # no re-planning for repeated signatures
    bad = np.ones(100)
    bad[0] = np.nan
    with pytest.raises(tl.TensorLangError, match="NaN"):
        g(x=xs, w=bad)  # refused by the gradient's own plan, as by the full path
    with pytest.raises(tl.TensorLangError):
        vg(x=xs, w=np.ones(99))


def test_signature_covers_what_decides_validation():
    a = np.zeros(3)
    assert dispatch.signature({"x": a}) == dispatch.signature({"x": np.ones(3)})
    assert dispatch.signature({"x": a}) != dispatch.signature({"x": np.zeros(4)})
    assert dispatch.signature({"x": a}) != dispatch.signature({"x": a.astype(np.float32)})
    assert dispatch.signature({"n": 3}) != dispatch.signature({"n": 4})  # an int may be a size
    assert dispatch.signature({"x": [1.0]}) is None
    assert dispatch.signature({"x": True}) is None
    assert dispatch.signature({"x": (a, 1.0)}) == dispatch.signature({"x": (np.ones(3), 2.0)})


def test_relation_programs_plan_by_shape_and_reconvert_mutated_data(plan_count):
    # relation data is re-prepared (tl.relation_data's cache) on every call;
    # the plan is keyed by its shape, so new or mutated data gives new answers
    n = tl.size("n")
    x = tl.tensor("x", n)
    R = tl.relation("R", n, n)
    prog = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(R(i, j), x[j])))
    k = tl.compile(prog)
    xs = np.arange(3.0)
    m1 = np.eye(3, dtype=bool)
    m2 = np.ones((3, 3), dtype=bool)
    np.testing.assert_allclose(k(x=xs, R=m1), xs)
    np.testing.assert_allclose(k(x=xs, R=m2), np.full(3, xs.sum()))  # same shape, new data
    m2[0, :] = False
    np.testing.assert_allclose(k(x=xs, R=m2), [0.0, 3.0, 3.0])  # mutated in place
    assert len(k._plans) == 1  # one signature: x's and R's shapes
    np.testing.assert_allclose(k(x=np.arange(4.0), R=np.eye(4, dtype=bool)), np.arange(4.0))  # new shape: re-planned
    assert len(k._plans) == 2
