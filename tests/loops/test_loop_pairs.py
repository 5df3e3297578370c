"""Step programs over pair states (issue #17 item 3): leaves kept, swapped,
unread, nested, rotated.  Leaves of one type share a pool of buffers; a
leaf the body returns as it is from the state shares the state's buffer
(the tables alias it, nothing is copied).  Oracles: the reference evaluator, central
finite differences, and the per-step validated calls (bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import loop_kernel as LK
from tensorlang.ir import input_vars

n = tl.size("n")
a0, b0, x0, c = tl.tensor("a0", n), tl.tensor("b0", n), tl.tensor("x0", n), tl.scalar("c")
P0, P1 = (lambda s: tl.proj(s, 0)), (lambda s: tl.proj(s, 1))


def program(kind):
    if kind == "nested":  # (a, (b, x)) -> (b, (c·a, x))
        L = tl.loop(40, tl.pair(a0, tl.pair(b0, x0)), lambda t, s: tl.pair(
            P0(P1(s)), tl.pair(tl.gen(n, lambda i: P0(s)[i] * c), P1(P1(s)))))
        return tl.sum(n, lambda i: P0(L)[i] * P1(P1(L))[i] + P0(P1(L))[i])
    if kind == "rotate":  # (a, (b, x)) -> (b, (x, a/2 + c·b·x/2)): each leaf moves one place
        L = tl.loop(40, tl.pair(a0, tl.pair(b0, x0)), lambda t, s: tl.pair(P0(P1(s)), tl.pair(
            P1(P1(s)), tl.gen(n, lambda i: 0.5 * P0(s)[i] + 0.5 * c * P0(P1(s))[i] * P1(P1(s))[i]))))
        return tl.sum(n, lambda i: P0(L)[i] * P1(P1(L))[i] + P0(P1(L))[i] ** 2)
    body = {
        "keep": lambda t, s: tl.pair(P0(s), tl.gen(n, lambda i: P1(s)[i] * c + P0(s)[i] * 0.01)),
        "swap": lambda t, s: tl.pair(P1(s), P0(s)),
        "unread": lambda t, s: tl.pair(P1(s), tl.gen(n, lambda i: P1(s)[i] * c)),
    }[kind]
    L = tl.loop(40, tl.pair(a0, b0), body)
    return tl.sum(n, lambda i: P0(L)[i] * 2.0 + P1(L)[i] ** 2)


@pytest.mark.parametrize("kind", ["keep", "swap", "unread", "nested"])
def test_pair_states_through_the_step_programs(kind, monkeypatch):
    loss = program(kind)
    names = [v.name for v in input_vars(loss)]
    r = np.random.RandomState(1)
    kw = {k: (0.97 if k == "c" else r.rand(4)) for k in names}
    wrt = [v for v in input_vars(loss)]
    vg = tl.value_and_grad(loss, wrt=wrt)
    v, g = vg(**kw)
    assert vg.loop_program._reverse_program() is not None  # the Numba step programs ran
    assert v == pytest.approx(tl.evaluate(loss, **kw), rel=1e-13)
    gb = g[names.index("b0")]
    for k in range(4):
        kp, km = dict(kw), dict(kw)
        kp["b0"], km["b0"] = kw["b0"].copy(), kw["b0"].copy()
        kp["b0"][k] += 1e-6
        km["b0"][k] -= 1e-6
        fd = (tl.evaluate(loss, **kp) - tl.evaluate(loss, **km)) / 2e-6
        assert gb[k] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 10**9)  # the per-step validated calls
    v2, g2 = tl.value_and_grad(loss, wrt=wrt)(**kw)
    assert v2 == v and all(np.array_equal(x, y) for x, y in zip(g, g2))


# result leaf j is the state's leaf i as is: (j, i), shared by the tables
ALIASES = {"keep": ((0, 0),), "swap": ((0, 1), (1, 0)), "unread": ((0, 1),), "nested": ((0, 1), (2, 2)),
           "rotate": ((0, 1), (1, 2))}


@pytest.mark.parametrize("kind", sorted(ALIASES))
def test_carried_leaves_share_buffers_and_every_policy_agrees(kind, monkeypatch):
    """The step kernel names the leaves it carries over (no copy in its
    program), and every checkpoint policy's sweep over the shared buffers
    gives the per-step validated calls' value and gradients bit for bit."""
    loss = program(kind)
    names = [v.name for v in input_vars(loss)]
    r = np.random.RandomState(2)
    kw = {k: (0.9 if k == "c" else r.rand(5)) for k in names}
    before = {k: np.copy(v) for k, v in kw.items()}
    wrt = [v for v in input_vars(loss)]
    got = []
    for ck in ("all", 1, 3, 7, "binomial", ("binomial", 2)):
        vg = tl.value_and_grad(loss, wrt=wrt, checkpoint=ck)
        got.append(vg(**kw))
        fp = vg.loop_program.lp.step_program()
        assert fp is not None and fp.alias == ALIASES[kind]
        assert all(x not in [j for j, _ in fp.alias] for x in fp.pooled)  # an aliased leaf is never written
        assert tl.compile(loss)(**kw) == got[-1][0]
    for k in names:  # the caller's arrays are never written (a leaf may alias the initial state)
        np.testing.assert_array_equal(kw[k], before[k])
    monkeypatch.setattr(LK, "DRIVER_MIN_STEPS", 10**9)  # the per-step validated calls
    want = tl.value_and_grad(loss, wrt=wrt)(**kw)
    for v, g in got:
        assert v == want[0] and all(np.array_equal(x, y) for x, y in zip(g, want[1]))
