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
from tensorlang.backend.loopir import Assign, If, KernelIR, Loop, Store, walk_stmts
from tensorlang.backend.short_slabs import slab_nest
from tests.backend.test_short_slabs import _deconv


pytestmark = pytest.mark.usefixtures("compiled_runtime")


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
    before = [s for s in walk_stmts(ir.body) if slab_nest(s) is not None]
    assert len(before) == 1  # y's accumulation over the taps
    (nest,) = before
    run = jam_slabs(ir)
    (pairs,) = _jammed(run.body)
    assert len(_jammed(printed_ir(ir).body)) == 1  # and in the serial kernel, tile-fused before (jam.py runs last)
    h = pairs.body[1]
    assert isinstance(h, Loop) and (h.lo, h.hi) == (nest.body[0].lo, nest.body[0].hi)  # the same slab
    (st,) = h.body
    old = nest.body[0].body[0]
    assert isinstance(st, Store) and st.array == old.array
    assert len(st.value.terms) == 2 * len(old.value.terms) - 1  # D[h] once, the terms of both points
    assert st.value.terms[: len(old.value.terms)] == old.value.terms  # the first point's terms first
    # the remainder, the nest's body once at r = q when q < r_hi (at most one point is left over)
    rest = [s for s in walk_stmts(run.body) if isinstance(s, If) and s.then[1:] == nest.body]
    assert len(rest) == 1 and rest[0].cond.rhs == nest.hi and rest[0].then[0] == Assign(nest.var, rest[0].cond.lhs)
    assert printed_ir(ir, True) is not None  # the parallel variant prints


def test_moving_slab_is_jammed_in_five_sweeps():
    _, loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=1)
    ir = tl.compile(g.program, threads=1).loop_ir
    dx = ir.results[0]
    fixed = [s for s in walk_stmts(ir.body) if slab_nest(s) is not None]
    moving = [s for s in walk_stmts(ir.body) if slab_nest(s) is None and slab_nest(s, moving=True) is not None]
    assert len(fixed) == 2  # y's nest and dc's (behind its gathers)
    (into_dx,) = moving  # the adjoint's full convolution: its slab's bounds read the tap
    assert into_dx.body[0].body[0].array == dx
    run = jam_slabs(ir)
    jammed = _jammed(run.body)
    assert len(jammed) == 3
    (pairs,) = [j for j in jammed if any(isinstance(x, Store) and x.array == dx for x in walk_stmts(j.body))]
    parts = [x for x in pairs.body if isinstance(x, (Loop, If))]
    h = into_dx.body[0].var
    # the slab's ends move by one per tap: each edge part holds at most one point, a test
    # (h = its point, then the store); the common part is the one loop
    assert [type(x) for x in parts] == [If, If, Loop, If, If]
    assert parts[2].var == h and all(x.then[0] == Assign(h, x.cond.lhs) for x in parts if isinstance(x, If))
    n_terms = [len((x.body if isinstance(x, Loop) else x.then)[-1].value.terms) for x in parts]
    assert n_terms == [2, 2, 3, 2, 2]  # D[h] and one point's term, or both points' (the common part)


def _partition(lo, hi, taps):
    """The (element, tap) pairs the jammed sweeps of ``for r in taps: for h in [lo(r), hi(r))`` add,
    each element's taps in order, by evaluating the loop IR's bounds (no kernel), and how many
    edge parts are single-point tests."""
    r_loop = Loop("r", K.Int(taps[0]), K.Int(taps[1]), 1, (Loop("h", lo, hi, 1, (Store(
        "D", (K.Name("h"),), K.FSum((K.Load("D", (K.Name("h"),), True), K.Load("x", (K.Name("r"),), True)))),), "gen"),),
        "scatter")
    assert slab_nest(r_loop, moving=True) is not None
    out = jam_slabs(KernelIR(args=[], allocs=[], body=[r_loop], results=[])).body
    got = []
    q_assign, pairs, rest = out
    edges = [st for st in pairs.body if isinstance(st, If)]
    assert len(edges) in (0, 4)  # all four edge parts are tests or none
    env = {}
    env[q_assign.target] = K.evaluate_int(q_assign.value, env)
    for r in range(K.evaluate_int(pairs.lo, env), K.evaluate_int(pairs.hi, env), pairs.step):
        env[pairs.var] = r
        for st in pairs.body:
            if isinstance(st, Assign):
                env[st.target] = K.evaluate_int(st.value, env)
                continue
            if isinstance(st, If):  # an edge part of at most one point: h = its point if any
                assert len(st.then) == 2 and isinstance(st.then[0], Assign)
                store, points = st.then[1], [K.evaluate_int(st.then[0].value, env)] if K.evaluate_int(st.cond, env) else []
            else:
                store, points = st.body[0], range(K.evaluate_int(st.lo, env), K.evaluate_int(st.hi, env))
            for h in points:
                for t in store.value.terms[1:]:
                    got.append((h, K.evaluate_int(t.index[0], env)))
    assert isinstance(rest, If) and rest.then[0] == Assign("r", rest.cond.lhs)  # at most one tap left over
    if K.evaluate_int(rest.cond, env):
        env["r"] = K.evaluate_int(rest.cond.lhs, env)
        got += [(h, env["r"]) for h in range(K.evaluate_int(lo, env), K.evaluate_int(hi, env))]
    return got, len(edges)


@pytest.mark.parametrize("seed", range(100))
def test_moving_sweeps_partition_the_slabs_in_tap_order(seed):
    # random affine slab bounds lo(r) = a r + b, hi(r) = c r + d (empty, disjoint, nested, crossing)
    rng = np.random.default_rng(seed)
    a, c = rng.integers(-5, 6, size=2)
    b = int(rng.integers(-6, 7))
    d = b + int(rng.integers(-2, 6))  # narrow slabs: empty ones next to full ones are common
    lo = K.IBin("+", K.IBin("*", K.Int(int(a)), K.Name("r")), K.Int(int(b)))
    hi = K.IBin("+", K.IBin("*", K.Int(int(c)), K.Name("r")), K.Int(int(d)))
    r0 = int(rng.integers(-3, 3))
    taps = (r0, r0 + int(rng.integers(0, 8)))
    got, tests = _partition(lo, hi, taps)
    assert (tests == 4) == (abs(a) <= 1 and abs(c) <= 1)  # ends moving by at most one per tap
    want = [(h, r) for r in range(*taps) for h in range(a * r + b, c * r + d)]
    assert sorted(got) == sorted(want)  # every (element, tap) once
    for h in {h for h, _ in want}:  # each element's taps in tap order
        seq = [r for x, r in got if x == h]
        assert seq == sorted(seq)


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
