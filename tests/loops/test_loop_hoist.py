"""Loop-invariant code motion (issue #17 item 1): closed terms of a loop body
that depend neither on the state nor on ``t`` are computed once.

Oracles: the reference evaluator on the loop as written (no hoisting there),
central finite differences, the dot-product test between jvp and grad, and
hand counts of the Fig. 6 cost per step.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir import input_vars
from tensorlang.loop_cost import adjoint_cost
from tensorlang.loops import split

n, T = tl.sizes("n T")
u0, w, a = tl.tensor("u0", n), tl.tensor("w", n), tl.scalar("a")
f = tl.tensor("f", T, n)


def step(t, u):
    # exp(a) and 0.01·Σ w² do not depend on the state: hoisted
    return tl.gen(n, lambda i: u[i] * tl.exp(a) * 0.5 + tl.sum(n, lambda j: w[j] * w[j]) * 0.01
                  + 0.1 * tl.sin(u[i]))


def loss_of(ck="all", body=step):
    L = tl.loop(T, u0, body, checkpoint=ck)
    return tl.sum(n, lambda i: L[i] * L[i])


def test_split_hoists_closed_invariant_terms_only():
    sp = split(loss_of())
    terms = {str(e) for _, e in sp.hoisted}
    assert terms == {"exp(a)", "(sum[j:n] w[j]·w[j])·0.01"}
    body_names = {v.name for v in input_vars(sp.body)}
    assert {v.name for v, _ in sp.hoisted} <= body_names and "w" not in body_names and "a" not in body_names
    # terms with t, the state, or a let-bound variable stay in the body
    sp2 = split(loss_of(body=lambda t, u: tl.gen(n, lambda i: u[i] * f[t, i] + tl.let(
        tl.sum(n, lambda j: u[j]), lambda s: s * tl.exp(a)))))
    assert [str(e) for _, e in sp2.hoisted] == ["exp(a)"]
    # a body that is invariant as a whole is left alone
    assert split(loss_of(body=lambda t, u: tl.gen(n, lambda i: w[i] * 2.0))).hoisted == ()


def _fd(loss, kw, name, k, eps=1e-6):
    kp, km = dict(kw), dict(kw)
    if k is None:
        kp[name], km[name] = kw[name] + eps, kw[name] - eps
    else:
        kp[name], km[name] = kw[name].copy(), kw[name].copy()
        kp[name][k] += eps
        km[name][k] -= eps
    return (tl.evaluate(loss, **kp) - tl.evaluate(loss, **km)) / (2 * eps)


@pytest.mark.parametrize("steps", [7, 40])  # per-step calls, and the Numba step programs
def test_hoisted_loop_value_gradient_and_tangent(steps):
    r = np.random.RandomState(steps)
    kw = dict(u0=r.rand(5), w=r.rand(5), a=-0.3, T=steps)
    loss = loss_of()
    want = tl.evaluate(loss, **kw)
    got = []
    for ck in ("all", 3, "binomial"):
        lc = loss_of(ck)
        v, g = tl.value_and_grad(lc, wrt=[u0, w, a])(**kw)
        assert v == pytest.approx(want, rel=1e-13) and tl.compile(lc)(**kw) == pytest.approx(want, rel=1e-13)
        got.append((v, g))
    for v, g in got[1:]:  # every policy bit for bit
        assert v == got[0][0] and all(np.array_equal(x, y) for x, y in zip(g, got[0][1]))
    gu, gw, ga = got[0][1]
    for k in range(5):
        assert gu[k] == pytest.approx(_fd(loss, kw, "u0", k), rel=1e-6, abs=1e-9)
        assert gw[k] == pytest.approx(_fd(loss, kw, "w", k), rel=1e-6, abs=1e-9)
    assert ga == pytest.approx(_fd(loss, kw, "a", None), rel=1e-6)
    du, dw, da = r.rand(5), r.rand(5), 0.7
    val, tan = tl.jvp(loss, wrt=[u0, w, a])(**kw, du0=du, dw=dw, da=da)
    assert val == pytest.approx(want, rel=1e-13)
    assert tan == pytest.approx(gu @ du + gw @ dw + ga * da, rel=1e-10)  # <J v, 1> = <v, J^T 1>


def test_hoisted_work_is_counted_once():
    # per step, by hand: u·inv0, ·0.5, 0.1·sin, sin, and two additions per
    # point: 6n; without hoisting Σ w² (2n - 1 + 1) and exp(a) would be in every step
    loss = loss_of()
    c1 = adjoint_cost(loss, [u0, w, a], "all", n=100, T=1000)
    c2 = adjoint_cost(loss, [u0, w, a], "all", n=100, T=2000)
    assert c2["primal"] - c1["primal"] == 1000 * 6 * 100
    assert c1["factor"] <= 5.0


def test_zero_steps_never_evaluates_the_hoisted_terms():
    # at T = 0 the body never runs (w[n] would even read out of range there: only
    # the loop's own proof, with t in an empty range, admits it)
    L = tl.loop(0, u0, step)
    loss = tl.sum(n, lambda i: L[i] * L[i])
    kw = dict(u0=np.arange(3.0), w=np.ones(3), a=0.1)
    v, (gu, gw, ga) = tl.value_and_grad(loss, wrt=[u0, w, a])(**kw)
    assert v == 5.0 and np.array_equal(gu, 2 * kw["u0"]) and not gw.any() and ga == 0.0
