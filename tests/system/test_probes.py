"""The hand-written kernels of benchmarks/probes_heat.py, probes_burgers.py
and probes_wave.py (issue #17: the machine-limit arguments for the loop
goals) compute the gradients they are timed as: each against the benchmarks'
NumPy references (grad_ref, written independently, step by step), at sizes
with boundary rows and odd T (blocked sweeps' leftover steps)."""

import numpy as np
import pytest

pytest.importorskip("numba")


@pytest.mark.parametrize("n,T", [(8, 7), (12, 10), (3, 5)])
def test_heat_hand_gradients_match_numpy(n, T):
    from benchmarks import heat, probes_heat

    d = heat.data({"n": n, "T": T}, np.random.default_rng(n + T))
    want = heat.grad_ref(d)
    got = dict(probes_heat.gradients(d, ms=(2, 3, 4)))
    assert {"grad_all", "grad_fused", "grad_blocked2_ix", "grad_blocked2", "grad_blocked4"} <= set(got)
    for name, (gu, gk) in got.items():
        np.testing.assert_allclose(gu, want["u0"], rtol=1e-12, atol=1e-14, err_msg=name)
        assert abs(gk - float(want["kappa"])) <= 1e-12 * max(1.0, abs(float(want["kappa"]))), name
    a, b = np.empty((n, n)), np.empty((n, n))
    assert probes_heat.primal(d["u0"], d["z"], float(d["kappa"]), T, a, b) == pytest.approx(heat.loss_ref(d), rel=1e-13)


def test_heat_nt_forward_matches_numpy():
    from benchmarks import heat, probes_heat

    d = heat.data({"n": 16, "T": 9}, np.random.default_rng(3))
    want = heat.grad_ref(d)
    got = dict(probes_heat.gradients(d, ms=()))
    gu, gk = got["grad_nt"]  # 16 doubles a row: 32-byte aligned rows in the aligned store
    np.testing.assert_allclose(gu, want["u0"], rtol=1e-12, atol=1e-14)
    assert abs(gk - float(want["kappa"])) <= 1e-12 * abs(float(want["kappa"]))


@pytest.mark.parametrize("n,T,signs", [(3, 4, False), (4, 3, True), (9, 6, True), (37, 11, False), (37, 11, True)])
def test_burgers_hand_gradients_match_numpy(n, T, signs):
    from benchmarks import burgers_loop, probes_burgers

    rng = np.random.default_rng(n * T)
    d = burgers_loop.data({"n": n, "T": T}, rng)
    if signs:  # both signs at every point, the borders included (the benchmark's sine is negative near its end)
        d["u0"] = rng.uniform(-0.9, 0.9, n)
    want = burgers_loop.grad_ref(d)
    got = dict(probes_burgers.gradients(d))
    assert set(got) == set(probes_burgers.REVERSES)
    for name, (gu, gc) in got.items():
        np.testing.assert_allclose(gu, want["u0"], rtol=1e-12, atol=1e-14, err_msg=name)
        assert abs(gc - float(want["c"])) <= 1e-12 * max(1.0, abs(float(want["c"]))), name
    a, b = np.empty(n), np.empty(n)
    got_loss = probes_burgers.primal(d["u0"], d["z"], float(d["c"]), T, a, b)
    assert got_loss == pytest.approx(burgers_loop.loss_ref(d), rel=1e-13)


@pytest.mark.parametrize("n,T", [(3, 1), (5, 4), (9, 7)])
def test_wave_hand_gradient_matches_numpy(n, T):
    from benchmarks import probes_wave, wave

    d = wave.data({"n": n, "T": T}, np.random.default_rng(n + 7 * T))
    want = wave.grad_ref(d)
    gu, gc = probes_wave.gradient(d)
    np.testing.assert_allclose(gu, want["u0"], rtol=1e-12, atol=1e-14)
    assert abs(gc - float(want["c2"])) <= 1e-12 * abs(float(want["c2"]))
    a, b, e = (np.empty((n, n)) for _ in range(3))
    assert probes_wave.primal(d["u0"], d["z"], float(d["c2"]), T, a, b, e) == pytest.approx(wave.loss_ref(d), rel=1e-13)
