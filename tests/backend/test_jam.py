"""Accumulated slabs swept once per two points (issue #13: the deconvolution
primal against the machine's limit; backend/jam.py).

Structure (the serial loop IR: each nest whose slab is fixed gets one
jammed copy, stepping two points, before the nest as it was; the adjoint's
full convolution, whose slab moves with the tap, is left alone), and the
values: bit for bit those of the same kernel compiled without the pass, at
tap counts that leave a remainder and that do not, float64 and float32,
serial and on two threads, and against NumPy.  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import api, codegen
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir
from tensorlang.backend.jam import JAM, jam_slabs
from tensorlang.backend.loopir import Assign, Loop, Store, walk_stmts
from tensorlang.backend.short_slabs import _pattern


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    # the kernel at every size (not the evaluator, which the small sizes here would take)
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


def _deconv():
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["deconv-m16"]
    loss, v = w.program()
    return w, loss, v


def _data(n, m, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    d = {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}
    return {k: a.astype(dtype) for k, a in d.items()}


def _jammed(stmts) -> list:
    return [s for s in walk_stmts(stmts) if isinstance(s, Loop) and s.step == JAM and s.body
            and isinstance(s.body[0], Assign) and s.body[0].value == K.IBin("+", K.Name(s.var), K.Int(1))]


def test_loss_nest_is_jammed_and_kept_for_the_remainder():
    _, loss, _ = _deconv()
    ir = tl.compile(loss, threads=1).loop_ir
    before = [s for s in walk_stmts(ir.body) if _pattern(s) is not None]
    assert len(before) == 1  # y's accumulation over the taps
    (nest,) = before
    run = jam_slabs(ir)
    (pairs,) = _jammed(run.body)
    assert len(_jammed(codegen.serial_passes(ir).body)) == 1  # and in the serial kernel, tile-fused after
    h = pairs.body[1]
    assert isinstance(h, Loop) and (h.lo, h.hi) == (nest.body[0].lo, nest.body[0].hi)  # the same slab
    (st,) = h.body
    old = nest.body[0].body[0]
    assert isinstance(st, Store) and st.array == old.array
    assert len(st.value.terms) == 2 * len(old.value.terms) - 1  # D[h] once, the terms of both points
    assert st.value.terms[: len(old.value.terms)] == old.value.terms  # the first point's terms first
    rest = [s for s in walk_stmts(run.body) if isinstance(s, Loop) and s.body == nest.body and s.step == 1]
    assert len(rest) == 1 and rest[0].lo != nest.lo and rest[0].hi == nest.hi  # the remainder, from q
    assert printed_ir(ir, True) is not None  # the parallel variant prints


def test_moving_slab_is_not_jammed():
    _, loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=1)
    ir = tl.compile(g.program, threads=1).loop_ir
    dx = ir.results[0]
    fixed = [s for s in walk_stmts(ir.body) if _pattern(s) is not None]
    into_dx = [s for s in walk_stmts(ir.body) if isinstance(s, Loop) and isinstance(s.body[0], Loop) if any(
        isinstance(x, Store) and x.array == dx for x in walk_stmts(s.body))]
    assert into_dx and all(_pattern(s) is None for s in into_dx)  # its slab's bounds read the tap
    run = codegen.serial_passes(ir)
    jammed = _jammed(run.body)
    assert len(jammed) == len(fixed)  # y's nest and dc's (behind its gathers), not dx's
    assert not any(isinstance(x, Store) and x.array == dx for j in jammed for x in walk_stmts(j.body))


@pytest.mark.parametrize("n,m", [(1, 1), (7, 2), (50, 3), (1100, 16), (1030, 17), (2100, 64), (300, 1100)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_loss_and_gradient_bitwise_as_without_the_pass(monkeypatch, n, m, dtype):
    w, loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=1)
    d = _data(n, m, 5 * n + m, dtype)
    with monkeypatch.context() as mp:
        mp.setattr(codegen, "jam_slabs", lambda ir: ir)
        mp.setattr(api, "CODEGEN_VERSION", api.CODEGEN_VERSION + "-nojam-test")
        f0, g0 = tl.compile(loss, threads=1), tl.compile(g.program, threads=1)
        want_f, want_g = f0(**d), g0(**d)  # compiled here, at these sizes, without the pass
    f1, g1 = tl.compile(loss, threads=1), tl.compile(g.program, threads=1)
    got_f, got_g = f1(**d), g1(**d)
    assert got_f == want_f
    for a, b in zip(got_g, want_g):
        np.testing.assert_array_equal(a, b)
    if dtype is np.float64:
        assert abs(got_f - w.loss_ref(d)) <= 1e-10 * max(1.0, abs(got_f))
        ref = w.grad_ref(d)
        np.testing.assert_allclose(got_g[0], ref["x"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got_g[1], ref["c"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n,m", [(5000, 16), (4100, 63)])
def test_two_threads_bitwise_as_without_the_pass(monkeypatch, n, m):
    w, loss, v = _deconv()
    d = _data(n, m, n + m)
    with monkeypatch.context() as mp:
        mp.setattr(codegen, "jam_slabs", lambda ir: ir)
        mp.setattr(api, "CODEGEN_VERSION", api.CODEGEN_VERSION + "-nojam-test")
        want = tl.compile(loss, threads=2)(**d)
    assert tl.compile(loss, threads=2)(**d) == want
    assert abs(want - w.loss_ref(d)) <= 1e-10 * max(1.0, abs(want))
