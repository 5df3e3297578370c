"""Cheap gradients through a forcing term ``f[t, i]`` (issue #17 items 1-2;
the paper's cheap-gradient principle, Theorem 6.55, applied per loop step).

An input read only as ``f[±t + c, …]`` is passed to the body as its rows
(``f[t]``, ``g[t + 1]``, ``h[T - 1 - t]``: ``loops.row_inputs``): the
body's adjoint returns an ``[n]`` cotangent per row and step, added into
that row of the ``[T][n]`` cotangent, so a gradient costs ``O(Tn)`` (it
built a whole ``[T][n]`` array per step before: ``O(T²n)``).  An input read
otherwise (``q[2t]``) stays whole and is counted as it runs.

Oracles: the reference evaluator on the loop as written, central finite
differences, the dot-product test between jvp and grad, every checkpoint
policy bit for bit, and hand counts of the certified adjoint cost.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir import TensorT
from tensorlang.loop_cost import adjoint_cost
from tensorlang.loops import binomial_budget, repetitions, split
from tensorlang.typecheck import type_of

n, T = tl.sizes("n T")
u0, a = tl.tensor("u0", n), tl.scalar("a")
f, h, g = tl.tensor("f", T, n), tl.tensor("h", T), tl.tensor("g", T + 1, n)
q = tl.tensor("q", 2 * T, n)


def step(t, u):
    # f[t, i], h[t], h[T-1-t], g[t, i] and g[t+1, i] are rows; q[2t, i] keeps the whole-input path
    return tl.gen(n, lambda i: u[i] * a + 0.1 * tl.sin(u[i]) + f[t, i] * h[t] + 0.5 * g[t + 1, i]
                  + 0.25 * g[t, i] + 0.3 * h[T - 1 - t] * q[2 * t, i])


def loss_of(ck="all", body=step):
    L = tl.loop(T, u0, body, checkpoint=ck)
    return tl.sum(n, lambda i: L[i] * L[i])


WRT = [u0, a, f, h, g, q]


def test_rows_are_the_inputs_read_as_f_t_only():
    sp = split(loss_of())
    assert {(r.name, x.name, str(i)) for r, x, i in sp.rows} == {
        ("loop_row_f", "f", "t"), ("loop_row_g", "g", "t"), ("loop_row_g_1", "g", "t + 1"),
        ("loop_row_h", "h", "-t + T - 1"), ("loop_row_h_1", "h", "t")}
    names = {v.name for v in tl.ir.input_vars(sp.body)}
    assert not names & {"f", "g", "h"} and "q" in names


def test_the_step_adjoint_returns_an_n_row_for_f():
    grad = tl.grad(loss_of(), wrt=WRT)
    rev = grad.loop_program
    part, wrt = rev.body_vjp
    names = [w.name for w in wrt]
    assert "loop_row_f" in names and "f" not in names and "q" in names
    out = type_of(part.prog)  # (E_state, (E_x1, …)) in wrt order
    comps = []
    while len(comps) < len(wrt) - 1:
        comps.append(out.fst)
        out = out.snd
    comps.append(out)
    by = dict(zip(names, comps))
    assert isinstance(by["loop_row_f"], TensorT) and not isinstance(by["loop_row_f"].elem, TensorT)
    assert str(by["loop_row_f"].extent) == "n"  # [n], not [T][n]
    assert by["loop_row_h"] is tl.ir.REAL and str(by["loop_row_g_1"].extent) == "n"
    assert str(by["q"].extent) == "2·T"  # the whole-input path, counted as such below


def _fd(loss, kw, name, k, eps=1e-6):
    kp, km = dict(kw), dict(kw)
    if k is None:
        kp[name], km[name] = kw[name] + eps, kw[name] - eps
    else:
        kp[name], km[name] = kw[name].copy(), kw[name].copy()
        kp[name][k] += eps
        km[name][k] -= eps
    return (tl.evaluate(loss, **kp) - tl.evaluate(loss, **km)) / (2 * eps)


@pytest.mark.parametrize("steps", [6, 40])  # per-step calls, and the Numba step programs
def test_forcing_gradient_fd_dot_product_and_policies(steps):
    r = np.random.RandomState(steps)
    m = 4
    kw = dict(u0=r.rand(m), a=0.3, f=r.rand(steps, m), h=r.rand(steps), g=r.rand(steps + 1, m),
              q=r.rand(2 * steps, m))
    want = tl.evaluate(loss_of(), **kw)
    got = []
    for ck in ("all", 3, "binomial", ("binomial", 2)):
        lc = loss_of(ck)
        v, gs = tl.value_and_grad(lc, wrt=WRT)(**kw)
        assert v == pytest.approx(want, rel=1e-12)
        got.append(gs)
    if steps >= 32:
        assert tl.grad(loss_of(), wrt=WRT).loop_program._reverse_program() is not None
    for gs in got[1:]:  # every policy bit for bit
        assert all(np.array_equal(x, y) for x, y in zip(gs, got[0]))
    gu, ga, gf, gh, gg, gq = got[0]
    assert gf.shape == (steps, m) and gh.shape == (steps,)
    loss = loss_of()
    for t, i in [(0, 0), (steps // 2, 1), (steps - 1, m - 1)]:
        assert gf[t, i] == pytest.approx(_fd(loss, kw, "f", (t, i)), rel=1e-5, abs=1e-8)
        assert gg[t + 1, i] == pytest.approx(_fd(loss, kw, "g", (t + 1, i)), rel=1e-5, abs=1e-8)
        assert gg[t, i] == pytest.approx(_fd(loss, kw, "g", (t, i)), rel=1e-5, abs=1e-8)
        assert gh[t] == pytest.approx(_fd(loss, kw, "h", t), rel=1e-5, abs=1e-8)
        assert gq[2 * t, i] == pytest.approx(_fd(loss, kw, "q", (2 * t, i)), rel=1e-5, abs=1e-8)
    assert not gq[1::2].any()  # q's odd rows are never read
    assert ga == pytest.approx(_fd(loss, kw, "a", None), rel=1e-5)
    assert gu[1] == pytest.approx(_fd(loss, kw, "u0", 1), rel=1e-5)
    # dot-product test: <J v, 1> = <v, J^T 1>, the tangents' rows df[t] given per step
    v = dict(du0=r.rand(m), da=0.7, df=r.rand(steps, m), dh=r.rand(steps), dg=r.rand(steps + 1, m),
             dq=r.rand(2 * steps, m))
    val, tan = tl.jvp(loss, wrt=WRT)(**kw, **v)
    assert val == pytest.approx(want, rel=1e-12)
    dot = (gu @ v["du0"] + ga * v["da"] + np.sum(gf * v["df"]) + gh @ v["dh"] + np.sum(gg * v["dg"])
           + np.sum(gq * v["dq"]))
    assert tan == pytest.approx(dot, rel=1e-10)


def _forced(t, u):
    return tl.gen(n, lambda i: u[i] * a + f[t, i])


def test_certified_adjoint_cost_is_linear_in_T_by_hand_count():
    # per step, by hand (n = 50): primal u·a, + f: 2n; adjoint of the body
    # ds·a (n) and Σ u·ds (2n - 1), f's row is ds itself (0); accumulated:
    # f's row (n) and a (1).  6n per step in all, the same at every T
    loss = loss_of(body=_forced)
    c = {Tv: adjoint_cost(loss, [u0, a, f], "all", n=50, T=Tv) for Tv in (100, 1000)}
    assert c[100]["accumulated_per_step"] == c[1000]["accumulated_per_step"] == 51
    assert c[1000]["adjoint"] - c[100]["adjoint"] == 900 * 6 * 50
    assert c[1000]["primal"] - c[100]["primal"] == 900 * 2 * 50
    # within each policy's certified factor (loop_audit): 5, 6, 5 + r
    r = repetitions(binomial_budget(("binomial", None), 1000), 1000)
    for pol, bound in (("all", 5.0), (10, 6.0), ("binomial", 5.0 + r)):
        assert adjoint_cost(loss, [u0, a, f], pol, n=50, T=1000)["factor"] <= bound


def test_whole_input_path_is_counted_as_it_runs():
    # q[2t, i] keeps the whole input: each step adds a [2T][n] cotangent, and
    # the certificate says so (quadratic in T), not a per-row count; g[t + 1]
    # is a row: linear
    loss = loss_of(body=lambda t, u: tl.gen(n, lambda i: u[i] * a + q[2 * t, i]))
    c = {Tv: adjoint_cost(loss, [u0, a, q], "all", n=10, T=Tv) for Tv in (10, 20, 30)}
    assert c[10]["accumulated_per_step"] == 2 * 10 * 10 + 1
    second = c[30]["adjoint"] - 2 * c[20]["adjoint"] + c[10]["adjoint"]
    assert second == 2 * 2 * 10 * 10 * 10  # T·2T·n's second difference at step 10: 4·10²·n
    loss = loss_of(body=lambda t, u: tl.gen(n, lambda i: u[i] * a + g[t + 1, i]))
    c = {Tv: adjoint_cost(loss, [u0, a, g], "all", n=10, T=Tv) for Tv in (10, 20, 30)}
    assert c[10]["accumulated_per_step"] == c[30]["accumulated_per_step"] == 10 + 1
    assert c[30]["adjoint"] - 2 * c[20]["adjoint"] + c[10]["adjoint"] == 0


@pytest.mark.parametrize("steps", [5, 36])
def test_forcing_also_read_by_init_post_and_a_hoisted_term(steps):
    # f's cotangent gathers its rows per step plus the whole-input parts
    # (init f[0], the post's Σ f[T-1], a hoisted Σ_j f[0, j]); tl.compile too
    def body(t, u):
        return tl.gen(n, lambda i: u[i] * a + f[t, i] * tl.sum(n, lambda j: f[0, j]) * 0.1)

    def loss_f(ck="all"):
        L = tl.loop(T, tl.gen(n, lambda i: u0[i] + f[0, i]), body, checkpoint=ck)
        return tl.sum(n, lambda i: L[i] * L[i] + f[T - 1, i])

    r = np.random.RandomState(1)
    kw = dict(u0=r.rand(3), a=0.4, f=r.rand(steps, 3))
    loss = loss_f()
    want = tl.evaluate(loss, **kw)
    assert tl.compile(loss)(**kw) == pytest.approx(want, rel=1e-12)
    gs = [tl.grad(loss_f(ck), wrt=[f, a])(**kw) for ck in ("all", 2, "binomial")]
    for x in gs[1:]:
        assert np.array_equal(x[0], gs[0][0]) and x[1] == gs[0][1]
    gf = gs[0][0]
    for t, i in [(0, 0), (0, 2), (1, 1), (steps - 1, 0)]:
        assert gf[t, i] == pytest.approx(_fd(loss, kw, "f", (t, i)), rel=1e-5, abs=1e-8)
    df = r.rand(steps, 3)
    _, tan = tl.jvp(loss, wrt=[f])(**kw, df=df)
    assert tan == pytest.approx(np.sum(gf * df), rel=1e-10)
