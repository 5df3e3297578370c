"""Workspace reuse of a loop gradient's step programs (issue #17 item 3; the
paper's Section 6 applied per loop part).

A loop gradient keeps its checkpoint buffers between calls, one workspace
per thread (``loop_autodiff._Reverse._buffers``), and remembers its
instruction tables per (policy, T).  Reuse must never carry state from one
call into the next, nor from one thread into another's: repeated calls with
other data, and calls from several threads at once, give exactly what a
fresh gradient object gives on each input alone (bit for bit: the same
operations in the same order), and that agrees with a NumPy reference of
the heat step's adjoint (independent oracle).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import loop_kernel as LK

T = 40  # >= DRIVER_MIN_STEPS: the step programs run
KAPPA = 0.2


def heat(checkpoint):
    n = tl.size("n")
    u0, z, kappa = tl.tensor("u0", n, n), tl.tensor("z", n, n), tl.scalar("kappa")

    def step(t, u):
        return tl.gen([n, n], lambda i, j: u[i, j] + kappa * (
            tl.iverson(i >= 1, u[i - 1, j]) + tl.iverson(i + 1 <= n - 1, u[i + 1, j])
            + tl.iverson(j >= 1, u[i, j - 1]) + tl.iverson(j + 1 <= n - 1, u[i, j + 1]) - 4 * u[i, j]))

    uT = tl.loop(T, u0, step, checkpoint=checkpoint)
    return tl.sum([n, n], lambda i, j: (uT[i, j] - z[i, j]) ** 2), (u0, kappa)


def _lap(u):
    out = -4.0 * u
    out[1:, :] += u[:-1, :]
    out[:-1, :] += u[1:, :]
    out[:, 1:] += u[:, :-1]
    out[:, :-1] += u[:, 1:]
    return out


def reference(d):
    """(loss, d/du0, d/dkappa) by NumPy: the step is u + κ L u, L symmetric."""
    states = [d["u0"]]
    for _ in range(T):
        states.append(states[-1] + d["kappa"] * _lap(states[-1]))
    g = 2.0 * (states[-1] - d["z"])
    gk = 0.0
    for u in reversed(states[:-1]):
        gk += float((g * _lap(u)).sum())
        g = g + d["kappa"] * _lap(g)
    return float(((states[-1] - d["z"]) ** 2).sum()), g, gk


def inputs(seed, n):
    r = np.random.default_rng(seed)
    return {"u0": r.uniform(0, 1, (n, n)), "z": r.uniform(0, 0.5, (n, n)), "kappa": KAPPA + 0.01 * seed}


def fresh(ck, d):
    """The answer of a gradient object that has never run before."""
    loss, wrt = heat(ck)
    return tl.value_and_grad(loss, wrt=list(wrt))(**d)


def same(a, b):
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1][0], b[1][0])
    assert a[1][1] == b[1][1]


@pytest.mark.parametrize("ck", ["all", 6])
def test_repeated_calls_match_a_fresh_gradient_and_numpy(ck):
    loss, wrt = heat(ck)
    vg = tl.value_and_grad(loss, wrt=list(wrt))
    ds = [inputs(s, 7) for s in range(3)] + [inputs(3, 5), inputs(0, 7)]  # a size change, then back
    outs = [vg(**d) for d in ds]
    assert vg.loop_program._rprog is not None  # the step programs ran (the reused workspace)
    for d, got in zip(ds, outs):
        v, gu, gk = reference(d)
        assert got[0] == pytest.approx(v, rel=1e-12)
        np.testing.assert_allclose(got[1][0], gu, rtol=1e-11, atol=1e-13)
        assert got[1][1] == pytest.approx(gk, rel=1e-11)
        same(got, fresh(ck, d))
    same(outs[0], outs[-1])  # the same input again, after others: the same bits
    # results never alias the workspace: a later call did not change them
    np.testing.assert_array_equal(outs[0][1][0], fresh(ck, ds[0])[1][0])


def test_concurrent_calls_from_threads_match_serial_calls():
    loss, wrt = heat("all")
    vg = tl.value_and_grad(loss, wrt=list(wrt))
    ds = [inputs(s, 8) for s in range(4)]
    want = [fresh("all", d) for d in ds]
    got: dict = {}
    errors: list = []
    barrier = threading.Barrier(4)

    def work(k):
        try:
            barrier.wait()
            for rep in range(3):  # each thread calls repeatedly with its own data
                got[(k, rep)] = vg(**ds[k])
        except Exception as e:  # reported below, with the thread
            errors.append((k, e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for (k, _), out in got.items():
        same(out, want[k])


def test_step_programs_apply_at_this_T():
    assert T >= LK.DRIVER_MIN_STEPS


def test_heat_benchmark_step_breakdown_runs():
    """``python -m benchmarks.heat --steps`` (the per-step breakdown): every
    sweep it times runs through the step programs at a small size."""
    from benchmarks.heat import measure_steps

    got = measure_steps(8, 36, 1)
    for ck in ("all", "6"):
        row = got[ck]
        assert row["primal_step_us"] > 0 and row["forward_step_us"] > 0 and row["reverse_step_us"] > 0
    assert got["all"]["reverse_step_state_in_cache_us"] > 0
