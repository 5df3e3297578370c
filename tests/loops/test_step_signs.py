"""Signed cotangent leaves (backend/step_signs.py, issues #13/#17): a reverse
step whose state cotangent has a leaf that is ``±`` another leaf (the wave's
``a <- -b``) returns that leaf's buffer with a sign instead of writing the
array.  Oracles: the kernel's loop IR (no negated copy is stored), the
NumPy hand adjoint (benchmarks/wave.py ``grad_ref``), central finite
differences, the per-step validated calls (which run the adjoint as
derived, unsigned) and the unsigned step programs, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import loop_kernel as LK
from tensorlang.backend import step_signs
from tensorlang.backend.kir import FNeg, Load
from tensorlang.backend.loopir import Store, walk_stmts

POLICIES = ("all", 1, 5, "binomial", ("binomial", 2))


def _wave(ck, T="T"):
    from benchmarks.wave import program

    loss, ins = program(T, ck)
    return loss, [ins["u0"], ins["c2"]]


def _reverse_kernel_ir(vg):
    rev = vg.loop_program
    assert rev._reverse_program() is not None
    part = getattr(rev, "_rpart", rev.body_vjp[0])  # (the adjoint as derived before session 12)
    ir, _ = part.fn.lowered()
    return rev, ir


def test_wave_reverse_step_stores_no_negated_copy():
    """The wave's reverse step writes one array (the new cotangent of u),
    not ``-b`` as well: no store in its kernel is ``-x[idx]``, and the
    output arrays stored to are one."""
    from benchmarks.wave import data

    d = data({"n": 8, "T": 40}, np.random.default_rng(0))
    loss, wrt = _wave("all")
    vg = tl.value_and_grad(loss, wrt=wrt)
    vg(**d)
    rev, ir = _reverse_kernel_ir(vg)
    stores = [s for s in walk_stmts(ir.body) if isinstance(s, Store)]
    assert not [s for s in stores if isinstance(s.value, FNeg) and isinstance(s.value.arg, Load)]
    outputs = {a.name for a in ir.allocs if a.role == "output"}
    assert len({s.array for s in stores} & outputs) == 1
    rp = rev._reverse_program()
    assert (rp.pooled, rp.copied, rp.alias) == ([1], [0], ((0, 1),))


@pytest.mark.parametrize("T", [0, 1, 2, 33])
def test_wave_gradients_equal_unsigned_and_numpy_under_every_policy(T, monkeypatch):
    """Every policy, T = 0, 1, 2, 33 with the step programs (run from T = 1
    here): the signed sweep's gradient is the unsigned one's bit for bit,
    the per-step calls' too, and the NumPy hand adjoint's to rounding."""
    from benchmarks.wave import data, grad_ref, loss_ref

    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 1)
    d = data({"n": 7, "T": T}, np.random.default_rng(T))
    want = grad_ref(d)
    ref = None
    for ck in POLICIES:
        loss, wrt = _wave(ck)
        got = {}
        for on in (False, True):
            monkeypatch.setattr(step_signs, "ENABLED", on)
            vg = tl.value_and_grad(loss, wrt=wrt)
            got[on] = vg(**d)
            if T >= 1:
                assert bool(vg.loop_program._signs) == on
        (v0, (gu0, gc0)), (v1, (gu1, gc1)) = got[False], got[True]
        assert v1 == v0 and gc1 == gc0
        np.testing.assert_array_equal(gu1, gu0)
        assert v1 == pytest.approx(loss_ref(d), rel=1e-12)
        np.testing.assert_allclose(gu1, want["u0"], rtol=1e-11, atol=1e-12)
        assert float(gc1) == pytest.approx(float(want["c2"]), rel=1e-11, abs=1e-12)
        if ref is None:
            ref = got[True]
        np.testing.assert_array_equal(got[True][1][0], ref[1][0])
    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 10**9)  # per-step validated calls: the adjoint as derived
    loss, wrt = _wave("all")
    v2, (gu2, gc2) = tl.value_and_grad(loss, wrt=wrt)(**d)
    assert v2 == ref[0] and gc2 == ref[1][1]
    np.testing.assert_array_equal(gu2, ref[1][0])


n = tl.size("n")


def _chain(ck):
    """State (a, (b, c)) -> (0.3c, (k·L c - a, 0.2 tanh(c) - b)): ``a`` and
    ``b`` each appear once, as ``-a`` and ``-b``, in the next leaf, so the
    cotangents are ``da <- -dB`` and ``db <- -dC`` (``da``'s sign the
    product of two) and the written ``dc`` reads both signed leaves."""
    a0, b0, c0, k = tl.tensor("a0", n), tl.tensor("b0", n), tl.tensor("c0", n), tl.scalar("k")
    P0, P1 = (lambda s: tl.proj(s, 0)), (lambda s: tl.proj(s, 1))

    def step(t, s):
        a, b, c = P0(s), P0(P1(s)), P1(P1(s))
        lap = tl.gen(n, lambda i: tl.iverson(i >= 1, c[i - 1]) + tl.iverson(i + 1 <= n - 1, c[i + 1]) - 2 * c[i])
        A = tl.gen(n, lambda i: 0.3 * c[i])
        B = tl.gen(n, lambda i: k * lap[i] - a[i])
        C = tl.gen(n, lambda i: 0.2 * tl.tanh(c[i]) - b[i])
        return tl.pair(A, tl.pair(B, C))

    L = tl.loop(tl.size("T"), tl.pair(a0, tl.pair(b0, c0)), step, checkpoint=ck)
    loss = tl.sum(n, lambda i: P0(L)[i] * 1.5 + P0(P1(L))[i] ** 2 + P1(P1(L))[i] * P0(L)[i])
    return loss, [a0, b0, c0, k]


@pytest.mark.parametrize("T", [1, 2, 33])
def test_chained_signs_equal_unsigned_and_finite_differences(T, monkeypatch):
    """Two signed leaves, one aliasing the other (its sign a product of
    two), both read by the written leaf's adjoint: bit for bit the unsigned
    sweep's under every policy, and the directional derivative of central
    finite differences of the evaluator."""
    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 1)
    r = np.random.default_rng(T)
    d = {"a0": r.uniform(-0.5, 0.5, 5), "b0": r.uniform(-0.5, 0.5, 5), "c0": r.uniform(-0.5, 0.5, 5), "k": 0.2,
         "T": T}
    ref = None
    for ck in POLICIES:
        loss, wrt = _chain(ck)
        got = {}
        for on in (False, True):
            monkeypatch.setattr(step_signs, "ENABLED", on)
            vg = tl.value_and_grad(loss, wrt=wrt)
            got[on] = vg(**d)
            assert bool(vg.loop_program._signs) == on
            if on:
                rp = vg.loop_program._reverse_program()
                assert sorted(rp.alias) == [(0, 1), (1, 2)] and rp.pooled == [2]
        for x, y in zip(got[False][1], got[True][1]):
            np.testing.assert_array_equal(x, y)
        assert got[False][0] == got[True][0] and np.isfinite(got[True][0])
        if ref is None:
            ref = got[True]
        for x, y in zip(got[True][1], ref[1]):
            np.testing.assert_array_equal(x, y)
    loss, _ = _chain("all")
    v = {k: r.uniform(-1, 1, 5) for k in ("a0", "b0", "c0")}
    h = 1e-6
    plus = {**d, **{k: d[k] + h * v[k] for k in v}}
    minus = {**d, **{k: d[k] - h * v[k] for k in v}}
    fd = (tl.evaluate(loss, **plus) - tl.evaluate(loss, **minus)) / (2 * h)
    dot = sum(float(np.dot(g, v[k])) for g, k in zip(ref[1][:3], ("a0", "b0", "c0")))
    assert dot == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_a_partial_negated_copy_is_not_a_sign():
    """``-b`` over the whole leaf is a sign; on part of it (guarded, or a
    shorter extent) the rest is another value, and ``2·b`` is no sign: the
    leaf is written."""
    from tensorlang.ir import Access, Const, Iverson, Mul, Proj, Var, fresh_index, make_gens
    from tensorlang.ir.indices import sym_aff
    from tensorlang.typecheck import type_of

    u = tl.tensor("u", n)
    t = type_of(u)
    ds = Var("ds", 0, type_of(tl.pair(u, u)))
    i = fresh_index("k")

    def leaf_copy(ext, body):
        return make_gens([(i, ext)], body(Access(Proj(1, ds), sym_aff(i))))

    assert step_signs.copy_of(leaf_copy(n, lambda x: Mul(Const(-1), x)), {}, ds, t) == ((1,), -1)
    assert step_signs.copy_of(leaf_copy(n, lambda x: x), {}, ds, t) == ((1,), 1)
    assert step_signs.copy_of(Proj(0, ds), {}, ds, t) == ((0,), 1)
    assert step_signs.copy_of(leaf_copy(n, lambda x: Iverson(sym_aff(i) >= 1, Mul(Const(-1), x))), {}, ds, t) is None
    assert step_signs.copy_of(leaf_copy(n - 1, lambda x: Mul(Const(-1), x)), {}, ds, t) is None
    assert step_signs.copy_of(leaf_copy(n, lambda x: Mul(Const(2), x)), {}, ds, t) is None


def test_wave_signs_in_the_parallel_step_programs(monkeypatch):
    """``threads=2``: the parallel reverse kernel takes the sign too; every
    point of a gen is the serial expression, so u0's cotangent is the serial
    one bit for bit (c²'s, a reduction in per-thread chunks, to rounding)."""
    from benchmarks.wave import data

    d = data({"n": 9, "T": 36}, np.random.default_rng(5))
    loss, wrt = _wave("all")
    v1, (gu1, gc1) = tl.value_and_grad(loss, wrt=wrt)(**d)
    vg2 = tl.value_and_grad(loss, wrt=wrt, threads=2)
    v2, (gu2, gc2) = vg2(**d)
    rp = vg2.loop_program._reverse_program()
    assert rp.par and vg2.loop_program._signs and rp.alias == ((0, 1),)
    np.testing.assert_array_equal(gu2, gu1)
    assert float(gc2) == pytest.approx(float(gc1), rel=1e-12) and v2 == pytest.approx(v1, rel=1e-13)
