"""What a loop program's callables check (issue #17; the first standard: a
right answer or a TensorLangError naming the input).

* The tangents of ``jvp`` and the cotangent of ``vjp`` are the caller's
  inputs: a wrong rank or length, or a NaN, is refused naming them.  They
  were passed on unchecked: refused under the loop's own names
  (``loop_dstate``, ``dloop_row_f``) in the per-step path, and in the
  Numba sweeps (T >= ``DRIVER_MIN_STEPS``) not at all: a cotangent one
  short was read past its end and a gradient of its length returned, a
  NaN cotangent gave NaN gradients.
* The loop's own values (its state, the final state, their tangents and
  cotangents) are not inputs: an overflow to infinity follows IEEE, as in
  the unrolled program, instead of an InputError about ``loop_state``.

References: NumPy by hand (``u_T = u0 · a^T``).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.loop_kernel import DRIVER_MIN_STEPS

n, T = tl.size("n"), tl.size("T")
u0, a, f = tl.tensor("u0", n), tl.scalar("a"), tl.tensor("f", T, n)
STEPS = [3, DRIVER_MIN_STEPS + 1]  # per-step calls, then the Numba sweeps


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


def _stencil(chain=False):
    def body(t, u):
        return tl.gen(n, lambda i: u[i] * a + f[t, i] + 0.1 * tl.iverson(i >= 1, u[i - 1]))

    L = tl.loop(T, u0, body, checkpoint=2)
    return tl.loop(T, L, body) if chain else L


@pytest.mark.parametrize("steps", STEPS)
def test_cotangent_and_tangents_are_checked_by_name(steps):
    L = _stencil()
    vj, jv = tl.vjp(L, wrt=[u0, a, f]), tl.jvp(tl.sum(n, lambda i: L[i] * L[i]), wrt=[u0, a, f])
    base = dict(u0=np.ones(70), a=0.5, f=np.ones((steps, 70)))
    tang = dict(du0=np.ones(70), da=1.0, df=np.ones((steps, 70)))
    vj(**base, dy=np.ones(70))  # validated signatures: a NaN of the same shapes is refused after them too
    jv(**base, **tang)
    for dy, what in [(np.ones(69), "has length 69"), (np.ones(100), "has length 100"), (1.0, "must have 1 dimension"),
                     (np.r_[np.ones(69), np.nan], "contains NaN")]:
        with pytest.raises(tl.InputError, match=f"input dy.*{what}"):
            vj(**base, dy=dy)
    for name, bad, what in [("du0", np.ones(69), "has length 69"), ("du0", np.r_[np.nan, np.ones(69)], "contains NaN"),
                            ("df", np.ones((steps + 5, 70)), f"has length {steps + 5}"), ("df", np.ones((1, 70)), "has length 1"),
                            ("df", np.full((steps, 70), np.inf), "contains NaN"), ("da", np.ones(2), "must have 0 dimension")]:
        with pytest.raises(tl.InputError, match=f"input {name}.*{what}"):
            jv(**base, **{**tang, name: bad})
    # the right ones still run: the dot-product test <J v, w> = <v, J^T w>
    rng = np.random.default_rng(steps)
    v = dict(du0=rng.normal(size=70), da=0.3, df=rng.normal(size=(steps, 70)))
    w = rng.normal(size=70)
    jvl = tl.jvp(L, wrt=[u0, a, f])
    _, Jv = jvl(**base, **v)
    g = vj(**base, dy=w)
    assert np.isclose(Jv @ w, g[0] @ v["du0"] + g[1] * v["da"] + np.sum(g[2] * v["df"]), rtol=1e-10)


@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("steps", STEPS)
def test_an_overflowing_state_follows_ieee_like_the_unrolled_program(steps, chain):
    L = tl.loop(T, u0, lambda t, u: tl.gen(n, lambda i: u[i] * a))
    if chain:  # the second loop reads the first one's (infinite) final state
        L = tl.loop(T, L, lambda t, u: tl.gen(n, lambda i: u[i] * a))
    loss = tl.sum(n, lambda i: L[i] * L[i])
    d = dict(u0=np.full(70, 1e200), a=1e100, T=steps)
    inf = np.full(70, np.inf)
    # u_T = u0 · a^T overflows at the second step; every product below is of positive infinities
    assert tl.compile(loss)(**d) == np.inf
    np.testing.assert_array_equal(tl.compile(L)(**d), inf)
    gu, ga = tl.grad(loss, wrt=[u0, a])(**d)
    np.testing.assert_array_equal(gu, inf)
    assert ga == np.inf
    v, (gu2, ga2) = tl.value_and_grad(loss, wrt=[u0, a])(**d)
    assert v == np.inf and ga2 == np.inf
    np.testing.assert_array_equal(gu2, inf)
    with np.errstate(over="ignore"):
        aT = np.power(1e100, steps * (2 if chain else 1))  # d u_T / d u0 = a^T: 1e300 at T = 3
    np.testing.assert_allclose(tl.vjp(L, wrt=u0)(**d, dy=np.ones(70)), np.full(70, aT), rtol=1e-13)
    val, tan = tl.jvp(loss, wrt=[a])(**d, da=1.0)
    assert val == np.inf and tan == np.inf
    # a NaN the caller gives is still refused by name
    with pytest.raises(tl.InputError, match="input u0 contains NaN"):
        tl.grad(loss, wrt=[u0, a])(**{**d, "u0": np.r_[np.nan, np.ones(69)]})


@pytest.mark.parametrize("steps", STEPS)
def test_float32_inputs_give_float32_derivatives(steps):
    """float32 inputs give float32 results (backend/api.py's rule): a forcing
    input's cotangent (accumulated row by row) and a tangent that starts at
    zero (``u0`` not differentiated) came back float64.  Values against the
    float64 call."""
    L = _stencil()
    loss = tl.sum(n, lambda i: L[i] * L[i])
    rng = np.random.default_rng(1)
    d64 = dict(u0=rng.normal(size=70), a=0.5, f=rng.normal(size=(steps, 70)))
    d32 = {k: np.asarray(v, dtype=np.float32) if np.ndim(v) else np.float32(v) for k, v in d64.items()}
    for fn, extra in [(tl.grad(loss, wrt=[u0, a, f]), {}), (tl.value_and_grad(loss, wrt=[a, f]), {}),
                      (tl.jvp(loss, wrt=[a]), {"da": 1.0}), (tl.vjp(L, wrt=[u0, f]), {"dy": np.ones(70, dtype=np.float32)})]:
        got, want = fn(**d32, **extra), fn(**d64, **extra)
        leaves32 = [got[0], *got[1]] if isinstance(got[1], tuple) else list(got)
        leaves64 = [want[0], *want[1]] if isinstance(want[1], tuple) else list(want)
        assert [np.asarray(x).dtype for x in leaves32] == [np.float32] * len(leaves32)
        for x, y in zip(leaves32, leaves64):
            np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("steps", STEPS)
def test_a_tangent_of_an_unused_input_with_its_own_size(steps):
    """A wrt input the program does not read may have a size the program does
    not have: its tangent's size comes from the tangent (the check above looked
    the size up in the program's sizes: a KeyError).  Against u_T = u0 · a^T."""
    m = tl.size("m")
    q = tl.tensor("q", m)
    L = tl.loop(T, u0, lambda t, u: tl.gen(n, lambda i: u[i] * a))
    loss = tl.sum(n, lambda i: L[i])
    val, tan = tl.jvp(loss, wrt=[a, q])(u0=np.ones(5), a=0.5, T=steps, da=1.0, dq=np.ones(4))
    assert np.isclose(val, 5 * 0.5**steps) and np.isclose(tan, 5 * steps * 0.5 ** (steps - 1))
    with pytest.raises(tl.InputError, match="input dq must have 1 dimension"):
        tl.jvp(loss, wrt=[a, q])(u0=np.ones(5), a=0.5, T=steps, da=1.0, dq=1.0)


@pytest.mark.parametrize("steps", STEPS)
def test_user_inputs_named_like_the_loop_s_tangents(steps):
    """jvp names the tangents of the loop's state, rows and hoisted terms
    ``d<name>``; a user input named ``dloop_state`` (or ``dloop_row_f``,
    ``dloop_inv0``) refused the program ("the tangent of loop_state would be
    named 'dloop_state'").  The loop's names now leave their tangents' free.
    Checked against a NumPy loop by central differences."""
    q1, q2, q3 = tl.tensor("dloop_state", n), tl.tensor("dloop_row_f", n), tl.tensor("dloop_inv0", n)
    w = tl.tensor("w", n)
    L = tl.loop(T, u0, lambda t, u: tl.gen(n, lambda i: u[i] * a + tl.exp(w[i]) * 0.1 + f[t, i] * q1[i] + q2[i] * q3[i]))
    loss = tl.sum(n, lambda i: L[i] * L[i])

    def ref(d):
        u = d["u0"].copy()
        for t in range(steps):
            u = u * d["a"] + np.exp(d["w"]) * 0.1 + d["f"][t] * d["dloop_state"] + d["dloop_row_f"] * d["dloop_inv0"]
        return float(u @ u)

    rng = np.random.default_rng(2)
    d = {"u0": rng.normal(size=6), "a": 0.7, "f": rng.normal(size=(steps, 6)), "w": rng.normal(size=6),
         "dloop_state": rng.normal(size=6), "dloop_row_f": rng.normal(size=6), "dloop_inv0": rng.normal(size=6)}
    tang = {"da": 0.3, "df": rng.normal(size=(steps, 6)), "dw": rng.normal(size=6)}
    val, got = tl.jvp(loss, wrt=[a, f, w])(**d, **tang)
    h = 1e-6
    up = ref({**d, "a": d["a"] + h * tang["da"], "f": d["f"] + h * tang["df"], "w": d["w"] + h * tang["dw"]})
    dn = ref({**d, "a": d["a"] - h * tang["da"], "f": d["f"] - h * tang["df"], "w": d["w"] - h * tang["dw"]})
    assert np.isclose(val, ref(d), rtol=1e-12)
    assert np.isclose(got, (up - dn) / (2 * h), rtol=1e-6)
