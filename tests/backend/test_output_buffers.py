"""Large outputs written into reused buffers (issue #13: kernel speed).

A kernel whose output arrays reach ``api.OUT_POOL_MIN`` bytes at a call's
sizes runs its output-buffer variant: the caller (``Kernel._out_buffers``)
gives the arrays, taking a buffer of an earlier call only when nothing but
the pool references it.  Checked here with the threshold lowered to 0 (so
small arrays take the path): a result the caller holds, or a view of it, is
never overwritten; a dropped result's buffer is reused; a reused buffer
holding old values gives the right answer where the output is partly zero
(the kernel zeroes what its domain does not cover); loss, value_and_grad and
vjp agree with NumPy.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import api


@pytest.fixture(autouse=True)
def pooled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")
    monkeypatch.setattr(api, "OUT_POOL_MIN", 0)


def _outer():
    """Σ_ij A[i,j] x[i] x[j]: the gradient in A is the n x n outer product."""
    n = tl.size("n")
    A, x = tl.tensor("A", n, n), tl.tensor("x", n)
    return tl.sum(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[i] * x[j])), A, x


def _data(n, seed):
    rng = np.random.default_rng(seed)
    return {"A": rng.normal(size=(n, n)), "x": rng.normal(size=n)}


def test_a_held_result_is_never_written_and_a_dropped_one_is_reused():
    loss, A, x = _outer()
    g = tl.grad(loss, wrt=A)
    assert g.program is not None
    d0, d1, d2 = _data(50, 0), _data(50, 1), _data(50, 2)
    held = g(**d0)
    keep = held.copy()
    view = g(**d1)[3:7]  # only a view of the second result survives
    for d in (d2, d0, d1, d2):
        got = g(**d)
        np.testing.assert_allclose(got, np.outer(d["x"], d["x"]), rtol=1e-14)
    np.testing.assert_array_equal(held, keep)  # never written while held
    np.testing.assert_allclose(view, np.outer(d1["x"], d1["x"])[3:7], rtol=1e-14)
    # dropped results: the next call writes into one of their buffers
    first = g(**d0)
    addr = first.ctypes.data
    del first
    gc.collect()
    blocker = np.empty_like(keep)  # takes the freed block, unless the pool kept it
    again = g(**d1)
    del blocker
    assert again.ctypes.data == addr
    np.testing.assert_allclose(again, np.outer(d1["x"], d1["x"]), rtol=1e-14)


def test_the_output_buffer_variant_is_the_one_that_ran(monkeypatch):
    x = tl.tensor("x", tl.size("n"))
    k = tl.compile(tl.gen(tl.size("n"), lambda i: x[i] * x[i]))
    np.testing.assert_allclose(k(x=np.arange(5.0)), np.arange(5.0) ** 2)
    out = k.out_variant("float64")
    assert out is not None and out.spec["output_buffers"]
    assert [nm for nm, _ in out.spec["output_buffers"]] == [nm for nm, _ in k.spec["output_arrays"]]
    assert [plan.outs for plan in k._plans.values()] == [((out.spec["output_buffers"][0][0], (5,)),)]
    # below the threshold the plain variant runs
    monkeypatch.setattr(api, "OUT_POOL_MIN", 1 << 40)
    k2 = tl.compile(tl.gen(tl.size("n"), lambda i: 2.0 * x[i]))
    np.testing.assert_allclose(k2(x=np.arange(4.0)), 2 * np.arange(4.0))
    assert [plan.outs for plan in k2._plans.values()] == [()]


def test_a_reused_buffer_is_zeroed_where_the_domain_does_not_reach():
    """An output under a bracket covers only part of its box: the kernel must
    clear the rest of a reused buffer, which holds whatever the caller wrote
    into the earlier result before dropping it."""
    n = tl.size("n")
    x = tl.tensor("x", n)
    ii, jj = np.meshgrid(np.arange(40), np.arange(40), indexing="ij")
    cases = [
        # a thin band (zeroed whole), and a box missing a border (only the border zeroed)
        (tl.gen([n, n], lambda i, j: tl.iverson(j <= i + 1, tl.iverson(i <= j + 1, x[i] * x[j]))),
         np.abs(ii - jj) <= 1),
        (tl.gen([n, n], lambda i, j: tl.iverson(i >= 1, tl.iverson(j <= n - 2, x[i] * x[j]))),
         (ii >= 1) & (jj <= 38)),
    ]
    for band, mask in cases:
        f = tl.compile(band)
        rng = np.random.default_rng(3)
        for _ in range(3):
            xs = rng.normal(size=40)
            got = f(x=xs)
            np.testing.assert_array_equal(got, np.outer(xs, xs) * mask)
            assert any(a is got for kept in f._pool.outs.values() for a in kept)  # the pool's, reused next
            got[...] = 7.0  # the caller's own use of the result, then dropped
            del got


def test_value_and_grad_and_vjp_through_the_buffers():
    loss, A, x = _outer()
    vg = tl.value_and_grad(loss, wrt=[A, x])
    n = tl.size("n")
    vj = tl.vjp(tl.gen([n, n], lambda i, j: A[i, j] * x[j]), wrt=[A, x])
    for seed in range(3):
        d = _data(30, seed)
        val, (gA, gx) = vg(**d)
        assert val == pytest.approx(float(d["x"] @ d["A"] @ d["x"]), rel=1e-12)
        np.testing.assert_allclose(gA, np.outer(d["x"], d["x"]), rtol=1e-13)
        np.testing.assert_allclose(gx, (d["A"] + d["A"].T) @ d["x"], rtol=1e-12)
        dy = np.random.default_rng(seed + 10).normal(size=(30, 30))
        cA, cx = vj(**d, dy=dy)
        np.testing.assert_allclose(cA, dy * d["x"][None, :], rtol=1e-13)
        np.testing.assert_allclose(cx, (dy * d["A"]).sum(axis=0), rtol=1e-12)
