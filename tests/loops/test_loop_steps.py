"""Step programs (issue #17 item 3): a loop's sweeps in one Numba call, the
state double-buffered, no allocation per step.

Oracles: a symbolic run of each instruction table (which state every buffer
holds), the kernel IR's allocations (structural, no timing), the NumPy heat
reference, and the per-step validated calls (bit for bit).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorlang as tl
from tensorlang.backend import loop_kernel as LK
from tensorlang.backend.loopir import Alloc, out_buffer_ir, walk_stmts
from tensorlang.loops import normalize_checkpoint, schedule

POLICIES = ["all", 1, 2, 5, "binomial", ("binomial", 1), ("binomial", 3)]


def simulate(sch, T, groups=(0,), alias=()):
    """Run the tables on labels: each physical buffer (group, index) -> the
    (step, leaf) it holds, the initial state's leaf i as ``-1 - i``; a
    pair-state step (wave: leaf 0 of s_{t+1} is leaf 1 of s_t, ``alias``)
    writes only its new leaves.  Returns (reverse steps in order, forward
    steps, pool sizes)."""
    fwd, rev, final, pools = LK.compile_schedule(sch, T, groups, alias)
    L, al = len(groups), dict(alias)
    held = {(groups[i], -1 - i): (0, i) for i in range(L)}

    def state(row):
        got = [held.get((groups[k], p)) for k, p in enumerate(row)]
        assert None not in got, f"reads a buffer of {row} before it holds a state"
        return got

    nfwd = 0
    order = []
    for code in (fwd, rev):
        assert code.shape[1] == 2 + 2 * L
        for row in code.tolist():
            op, t, src, dst = row[0], row[1], row[2:2 + L], row[2 + L:]
            cur = state(src)
            # the state at src is s_t: leaf k holds (t, k), or (t-1, i) where
            # leaf k of s_t is leaf i of s_{t-1} (an alias chain)
            assert all(c[0] == t or c == (t - 1, al.get(k)) or _chain(c, t, k, al) for k, c in enumerate(cur))
            if op == LK.FWD:
                for k, p in enumerate(dst):
                    if k in al:
                        assert p == src[al[k]]  # shared, not written
                    else:
                        assert 0 <= p < pools[groups[k]]
                        assert (groups[k], p) not in {(groups[i], q) for i, q in enumerate(src)}  # never in place
                        # no live state still needs the buffer it overwrites: checked by the reads' labels
                        held[groups[k], p] = (t + 1, k)
                nfwd += 1
            else:
                assert op == LK.REV
                order.append(t)
        if code is fwd:
            assert all(_chain(held[groups[k], p], T, k, al) for k, p in enumerate(final))  # s_T
    return order, nfwd, pools


def _chain(c, t, k, al):
    """``c`` (step, leaf) is leaf ``k`` of ``s_t`` through the alias chain."""
    while c != (t, k):
        if k not in al or t == 0:
            return False
        t, k = t - 1, al[k]
    return True


@settings(max_examples=50, deadline=None)
@given(T=st.integers(1, 60), policy=st.sampled_from(POLICIES))
def test_tables_reverse_every_step_once_on_the_right_state(T, policy):
    sch = schedule(normalize_checkpoint(policy), T)
    order, nfwd, pools = simulate(sch, T)
    assert order == list(reversed(range(T)))
    assert nfwd == sch.forward_steps  # the schedule's recomputation, no more
    assert pools[0] <= sch.slots + 2  # the slots and two scratch buffers, at most
    if policy == "all":
        assert pools[0] == T  # s_1 … s_T; s_0 is the caller's array, never copied


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 40), policy=st.sampled_from(POLICIES))
def test_tables_share_the_leaf_a_pair_step_carries(T, policy):
    """Wave's (u_prev, u) -> (u, u_next): one pool for both leaves, leaf 0
    of each new state is leaf 1 of the previous one (shared, never copied),
    so each step writes one buffer and ``"all"`` holds each u_t once."""
    sch = schedule(normalize_checkpoint(policy), T)
    order, nfwd, pools = simulate(sch, T, groups=(0, 0), alias=((0, 1),))
    assert order == list(reversed(range(T))) and nfwd == sch.forward_steps
    assert pools[0] <= 2 * (sch.slots + 2)  # never more than before: slots + 2 buffers per leaf
    if policy == "all":
        assert pools[0] == T  # u_1 … u_T (u_0 is the caller's)


def test_primal_table_alternates_two_buffers():
    code, final, pools = LK.forward_table(7)
    assert code[:, 2].tolist() == [LK.IN, 0, 1, 0, 1, 0, 1] and code[:, 3].tolist() == [0, 1, 0, 1, 0, 1, 0]
    assert list(final) == [0] and pools == [2]
    assert (code[:, 0] == LK.FWD).all() and code[:, 1].tolist() == list(range(7))


def test_primal_table_rotates_three_buffers_for_a_pair_step():
    code, final, pools = LK.forward_table(6, (0, 0), ((0, 1),))
    assert pools == [3]  # u_{t-1}, u_t read while u_{t+1} is written
    assert code[0, 2:].tolist() == [-1, -2, -2, 0]  # s_1 = (u0's leaf 1, new)
    for a, b in zip(code[:-1], code[1:]):
        assert b[2:4].tolist() == a[4:6].tolist() and b[4] == a[5]  # each step reads the last one's state


def heat(ck="all"):
    from benchmarks.heat import program

    return program("T", ck)


def _top_allocs(ir):
    return [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]


def test_step_kernels_allocate_nothing_per_step():
    loss, ins = heat()
    g = tl.grad(loss, wrt=[ins["u0"], ins["kappa"]])
    rev = g.loop_program
    lp = rev.lp
    # the body's kernel allocates its result; its step form writes into the buffer it is given
    body_ir = lp.body.fn.lowered()[0]
    assert any(not a.pooled for a in _top_allocs(body_ir))
    ir2, names, copied = out_buffer_ir(body_ir, [0])
    assert names == [body_ir.results[0]] and ir2.args[-1] == names[0] and copied == []
    assert all(a.pooled for a in _top_allocs(ir2))
    # the adjoint step: its state cotangent into a buffer, its temporaries pooled
    part, wrt = rev.body_vjp
    adj_ir = part.fn.lowered()[0]
    ir3, _, _ = out_buffer_ir(adj_ir, [0])
    assert all(a.pooled for a in _top_allocs(ir3))
    # and the cached step modules are these (the stored spec names the buffers)
    d = _data(6, 40)
    g(**d)
    assert lp.step_program().module.fwd_prog is not None
    assert rev._reverse_program().module.rev_prog is not None
    assert lp.step_program().base == lp.body.fn.variant("float64").spec


def _data(n, T, seed=0):
    from benchmarks.heat import data

    return data({"n": n, "T": T}, np.random.default_rng(seed))


@pytest.mark.parametrize("T", [33, 40])
def test_heat_step_programs_match_numpy_and_the_per_step_calls(T, monkeypatch):
    from benchmarks.heat import grad_ref, loss_ref

    d = _data(7, T)
    want = grad_ref(d)
    got = {}
    for ck in ("all", 6, "binomial"):
        loss, ins = heat(ck)
        vg = tl.value_and_grad(loss, wrt=[ins["u0"], ins["kappa"]])
        u0 = d["u0"].copy()
        v, (gu, gk) = vg(**d)
        np.testing.assert_array_equal(d["u0"], u0)  # the initial state is only read
        assert vg.loop_program._rprog is not None  # the step programs ran
        assert v == pytest.approx(loss_ref(d), rel=1e-12)
        np.testing.assert_allclose(gu, want["u0"], rtol=1e-11, atol=1e-13)
        assert gk == pytest.approx(float(want["kappa"]), rel=1e-11)
        got[ck] = (v, gu, gk)
        assert tl.compile(loss)(**d) == v
    first = got["all"]
    for other in got.values():  # every policy: the same operations, bit for bit
        assert other[0] == first[0] and other[2] == first[2]
        np.testing.assert_array_equal(other[1], first[1])
    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 10**9)  # per-step validated calls
    loss, ins = heat(6)
    v, (gu, gk) = tl.value_and_grad(loss, wrt=[ins["u0"], ins["kappa"]])(**d)
    assert v == first[0] and gk == first[2]
    np.testing.assert_array_equal(gu, first[1])


def test_results_do_not_alias_the_reused_buffers():
    n = tl.size("n")
    u0, c = tl.tensor("u0", n), tl.scalar("c")
    r = np.random.RandomState(1)
    d1 = {"u0": r.rand(5), "c": 0.5}
    d2 = {"u0": r.rand(5), "c": 0.25}

    def ref(d):
        u = d["u0"]
        for _ in range(40):
            u = d["c"] * u + 1.0
        return u

    L = tl.loop(40, u0, lambda t, u: tl.gen(n, lambda i: c * u[i] + 1.0))
    k = tl.compile(L)
    x1 = k(**d1)
    x1_copy = x1.copy()
    x2 = k(**d2)
    np.testing.assert_array_equal(x1, x1_copy)  # the second run did not write into the first's result
    np.testing.assert_allclose(x1, ref(d1), rtol=1e-13)
    np.testing.assert_allclose(x2, ref(d2), rtol=1e-13)
    # the vjp's program value is the final state itself: never the reused checkpoint buffer
    vj = tl.vjp(L, wrt=[u0, c])
    g1 = vj(**d1, dy=np.ones(5))
    g2 = vj(**d2, dy=np.ones(5))
    assert vj.loop_program._rprog is not None
    np.testing.assert_allclose(g1[0], np.full(5, 0.5 ** 40), rtol=1e-12)  # d u_T / d u0 = c^T
    np.testing.assert_allclose(g2[0], np.full(5, 0.25 ** 40), rtol=1e-12)
    rev = vj.loop_program
    v1, _ = rev(dict(d1), np.ones(5))
    v1c = v1.copy()
    rev(dict(d2), np.ones(5))
    np.testing.assert_array_equal(v1, v1c)
    np.testing.assert_allclose(v1, ref(d1), rtol=1e-13)


def test_pair_state_wave_step_programs(monkeypatch):
    """A pair state (u_prev, u) -> (u, u_next): one buffer set per leaf; the
    leaf the body returns unchanged (u) is shared by the program, the other
    written by the kernel; the adjoint writes the new cotangent of u and
    returns u_prev's, ``-b``, as ``b``'s buffer with a sign (backend/step_signs.py)."""
    from benchmarks.wave import data, grad_ref, loss_ref, program

    d = data({"n": 6, "T": 40}, np.random.default_rng(3))
    want = grad_ref(d)
    got = []
    for ck in ("all", 5, ("binomial", 2)):
        loss, ins = program("T", ck)
        vg = tl.value_and_grad(loss, wrt=[ins["u0"], ins["c2"]])
        v, (gu, gc) = vg(**d)
        rev = vg.loop_program
        fp, rp = rev.lp.step_program(), rev._reverse_program()
        assert fp is not None and rp is not None
        assert (fp.pooled, fp.copied) == ([1], [0]) and (rp.pooled, rp.copied, rp.alias) == ([1], [0], ((0, 1),))
        assert v == pytest.approx(loss_ref(d), rel=1e-12)
        np.testing.assert_allclose(gu, want["u0"], rtol=1e-11, atol=1e-12)
        assert gc == pytest.approx(float(want["c2"]), rel=1e-11)
        got.append((v, gu, gc))
        assert tl.compile(loss)(**d) == v
    for other in got[1:]:
        assert other[0] == got[0][0] and other[2] == got[0][2]
        np.testing.assert_array_equal(other[1], got[0][1])
    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 10**9)  # per-step validated calls: the same bits
    loss, ins = program("T", "all")
    v, (gu, gc) = tl.value_and_grad(loss, wrt=[ins["u0"], ins["c2"]])(**d)
    assert v == got[0][0] and gc == got[0][2]
    np.testing.assert_array_equal(gu, got[0][1])


def test_threads_run_the_parallel_step_programs():
    """``threads=2``: the step kernels' parallel variants (gen loops prange,
    reductions in per-thread chunks).  Every point of a gen is computed by
    the same expression, so the states and the state's cotangent are the
    serial ones bit for bit; the κ cotangent (a reduction per step) is
    summed in chunks, equal to rounding."""
    d = _data(9, 36)
    loss, ins = heat("all")
    wrt = [ins["u0"], ins["kappa"]]
    v1, (gu1, gk1) = tl.value_and_grad(loss, wrt=wrt)(**d)
    vg2 = tl.value_and_grad(loss, wrt=wrt, threads=2)
    v2, (gu2, gk2) = vg2(**d)
    rev = vg2.loop_program
    assert rev.lp.threads == 2 and rev.lp.step_program().par and rev._reverse_program().par
    np.testing.assert_array_equal(gu2, gu1)
    assert gk2 == pytest.approx(gk1, rel=1e-12) and v2 == pytest.approx(v1, rel=1e-13)
    k2 = tl.compile(loss, threads=2)
    assert k2.program.threads == 2 and k2(**d) == pytest.approx(v1, rel=1e-13)


def test_checkpoint_option_of_grad_is_normalized():
    # grad(..., checkpoint="binomial") overrides the loop's own policy, spelled as tl.loop accepts it
    from tensorlang.loop_autodiff import grad

    d = _data(5, 34)
    loss, ins = heat("all")
    want = grad(loss, [ins["u0"]])(**d)
    for ck in ("binomial", 4, ("binomial", 2)):
        np.testing.assert_array_equal(grad(loss, [ins["u0"]], checkpoint=ck)(**d), want)


def test_threads_1_runs_every_part_serially(monkeypatch):
    """``threads=1`` runs every kernel of a loop program serially, the parts
    run by per-step validated calls (T < DRIVER_MIN_STEPS) included: calls
    are equal bit for bit, and to the NumPy heat reference to rounding.
    (Session 13 hunt: the parts were compiled with threads=None, whose
    automatic choice (autothreads.py) runs the parallel variant on its
    calls 4-6 and then the faster; at n = 257 (66049 points, past
    PARALLEL_MIN) the κ cotangent of a threads=1 gradient changed between
    its first and second call.)"""
    import os

    import numba

    from benchmarks.heat import grad_ref
    from tensorlang.backend import api

    if numba.config.NUMBA_NUM_THREADS < 2 or (os.cpu_count() or 1) < api.PARALLEL_MIN_CPUS:
        pytest.skip("the automatic choice needs two cores")
    monkeypatch.setattr(api, "cores_free", lambda: True)  # as on a quiet machine
    d = _data(257, 9, seed=3)
    loss, ins = heat("all")
    wrt = [ins["u0"], ins["kappa"]]
    vg = tl.value_and_grad(loss, wrt=wrt, threads=1)
    runs = [vg(**d) for _ in range(3)]
    for v, (gu, gk) in runs[1:]:
        assert v == runs[0][0] and gk == runs[0][1][1]
        np.testing.assert_array_equal(gu, runs[0][1][0])
    want = grad_ref(d)
    np.testing.assert_allclose(runs[0][1][0], want["u0"], rtol=1e-10, atol=1e-12)
    assert runs[0][1][1] == pytest.approx(float(want["kappa"]), rel=1e-10)
    assert vg.loop_program.lp.body.fn.threads == 1
