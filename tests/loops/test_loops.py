"""Loops (issue #17 items 1-3): semantics, derivatives, checkpointing, cost, backend, errors.

Oracles are independent: a NumPy reference loop, sympy, central finite
differences, the dot-product test <J v, w> = <v, J^T w>, and hand counts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

import tensorlang as tl
from tensorlang import driver
from tensorlang.loops import schedule

n, T = tl.sizes("n T")
u0 = tl.tensor("u0", n)
a = tl.scalar("a")
f = tl.tensor("f", T, n)

POLICIES = ["all", 1, 3, "binomial", ("binomial", 2)]


def step(t, u):
    # a 3-point diffusion step with a nonlinearity and a forcing indexed by t
    return tl.gen(n, lambda i: u[i] + a * (tl.iverson(i >= 1, u[i - 1]) + tl.iverson(i + 1 <= n - 1, u[i + 1]) - 2 * u[i])
                  + 0.1 * tl.sin(u[i]) + f[t, i])


def ref(x, av, F):
    u = x.copy()
    for t in range(F.shape[0]):
        up = np.r_[0.0, u[:-1]]
        dn = np.r_[u[1:], 0.0]
        u = u + av * (up + dn - 2 * u) + 0.1 * np.sin(u) + F[t]
    return u


def data(steps=7, size=6, seed=0):
    r = np.random.RandomState(seed)
    return dict(u0=r.rand(size), a=0.1, f=0.1 * r.rand(steps, size))


def loss_of(ck="all"):
    L = tl.loop(T, u0, step, checkpoint=ck)
    return L, tl.sum(n, lambda i: L[i] * L[i])


def test_evaluator_matches_numpy_reference_loop():
    L, loss = loss_of()
    kw = data()
    np.testing.assert_allclose(tl.evaluate(L, **kw), ref(kw["u0"], kw["a"], kw["f"]), rtol=1e-13)
    np.testing.assert_allclose(tl.evaluate(loss, **kw), (ref(kw["u0"], kw["a"], kw["f"]) ** 2).sum(), rtol=1e-13)
    # T = 0: the initial state
    np.testing.assert_array_equal(tl.evaluate(L, **data(steps=0)), data(steps=0)["u0"])


def test_evaluator_exact_over_sympy():
    x, c = tl.scalar("x"), tl.scalar("c")
    L = tl.loop(3, x, lambda t, s: s * s + c)
    X, C = sympy.symbols("X C")
    want = ((X**2 + C) ** 2 + C) ** 2 + C
    got = tl.evaluate(L, x=np.array(X, dtype=object), c=np.array(C, dtype=object))
    assert sympy.expand(got - want) == 0


def test_printer_and_alpha_canonical_identity():
    L1 = tl.loop(T, u0, step, checkpoint=3)
    L2 = tl.loop(T, u0, step, checkpoint=3)
    assert L1 is not L2 and tl.alpha_eq(L1, L2)
    assert not tl.alpha_eq(L1, tl.loop(T, u0, step))  # the policy is part of the identity
    text = str(L1)
    assert text.startswith("loop[t:T, checkpoint=3] (u = u0)") and "f[t, i]" in text


def test_compiled_equals_evaluator():
    L, loss = loss_of()
    kw = data()
    np.testing.assert_allclose(tl.compile(L)(**kw), tl.evaluate(L, **kw), rtol=1e-13)
    np.testing.assert_allclose(tl.compile(loss)(**kw), tl.evaluate(loss, **kw), rtol=1e-13)


def _fd(loss, kw, name, idx, eps=1e-6):
    hi, lo = dict(kw), dict(kw)
    if np.ndim(kw[name]) == 0:
        hi[name], lo[name] = kw[name] + eps, kw[name] - eps
    else:
        hi[name], lo[name] = kw[name].copy(), kw[name].copy()
        hi[name][idx] += eps
        lo[name][idx] -= eps
    return (tl.evaluate(loss, **hi) - tl.evaluate(loss, **lo)) / (2 * eps)


def test_grad_matches_finite_differences():
    _, loss = loss_of()
    kw = data()
    gu, ga, gf = tl.grad(loss, wrt=[u0, a, f])(**kw)
    assert gu.shape == (6,) and gf.shape == (7, 6)
    for k in range(6):
        assert gu[k] == pytest.approx(_fd(loss, kw, "u0", k), rel=1e-6, abs=1e-8)
    assert ga == pytest.approx(_fd(loss, kw, "a", None), rel=1e-6)
    for idx in [(0, 0), (3, 4), (6, 5)]:
        assert gf[idx] == pytest.approx(_fd(loss, kw, "f", idx), rel=1e-6, abs=1e-8)
    v, g2 = tl.value_and_grad(loss, wrt=u0)(**kw)
    assert v == pytest.approx(tl.evaluate(loss, **kw), rel=1e-13)
    np.testing.assert_allclose(g2, gu, rtol=1e-13)


@pytest.mark.parametrize("steps", [1, 2, 7, 10])
def test_every_checkpoint_policy_gives_identical_gradients(steps, monkeypatch):
    from tensorlang.backend import loop_kernel

    monkeypatch.setattr(loop_kernel, "DRIVER_MIN_STEPS", 2)  # the Numba step programs at these small T
    kw = data(steps=steps)
    grads = []
    for ck in POLICIES:
        _, loss = loss_of(ck)
        grads.append(tl.grad(loss, wrt=[u0, a, f])(**kw))
    for g in grads[1:]:
        for x, y in zip(grads[0], g):
            np.testing.assert_array_equal(x, y)  # same operations on the same states: bit-identical
    # ... and the same as the per-step validated calls (no step programs)
    _, loss = loss_of(3)
    g = tl.grad(loss, wrt=[u0, a, f])
    g(**kw)
    assert steps < 2 or g.loop_program._rprog is not None
    monkeypatch.setattr(loop_kernel, "DRIVER_MIN_STEPS", 10**9)
    for x, y in zip(grads[0], g(**kw)):
        np.testing.assert_array_equal(x, y)


def test_dot_product_test_through_the_loop():
    L, _ = loss_of()
    kw = data()
    r = np.random.RandomState(3)
    v_u, v_a, w = r.rand(6), 0.7, r.rand(6)
    _, jv = tl.jvp(L, wrt=[u0, a])(**kw, du0=v_u, da=v_a)
    gu, ga = tl.vjp(L, wrt=[u0, a])(**kw, dy=w)
    assert float(jv @ w) == pytest.approx(float(v_u @ gu + v_a * ga), rel=1e-12)


def test_step_zero_cotangent_of_a_t_indexed_input():
    # regression: t entered the body program as a size, and the simplifier's
    # sizes >= 1 turned [a == t] into false at t = 0 (the forcing's step-0
    # cotangent was lost); t is now passed as t + 1
    L = tl.loop(1, u0, lambda t, u: tl.gen(n, lambda i: u[i] * a + f[t, i]))
    loss = tl.sum(n, lambda i: L[i] * L[i])
    kw = data(steps=1)
    gf = tl.grad(loss, wrt=f)(**kw)
    for idx in [(0, 0), (0, 3)]:
        assert gf[idx] == pytest.approx(_fd(loss, kw, "f", idx), rel=1e-6)
        assert gf[idx] != 0.0


def test_pair_state_and_loop_with_t_unused():
    x, y = tl.scalar("x"), tl.scalar("y")
    L = tl.loop(5, tl.pair(x, y), lambda t, s: tl.pair(tl.proj(s, 1), tl.proj(s, 0) * 0.5 + tl.sin(tl.proj(s, 1))),
                checkpoint=2)
    loss = tl.proj(L, 0) + 2 * tl.proj(L, 1)
    kw = dict(x=0.3, y=-0.4)
    xs, ys = 0.3, -0.4
    for _ in range(5):
        xs, ys = ys, xs * 0.5 + math.sin(ys)
    assert tl.evaluate(loss, **kw) == pytest.approx(xs + 2 * ys, rel=1e-14)
    assert tl.compile(loss)(**kw) == pytest.approx(xs + 2 * ys, rel=1e-14)
    gx, gy = tl.grad(loss, wrt=[x, y])(**kw)
    assert gx == pytest.approx(_fd(loss, kw, "x", None), rel=1e-6)
    assert gy == pytest.approx(_fd(loss, kw, "y", None), rel=1e-6)


def test_symbolic_cost_is_T_times_the_body_by_hand_count():
    uu = tl.tensor("uu", n)
    body = tl.gen(n, lambda i: uu[i] * a + tl.sin(uu[i]))  # per point: 1 mul, 1 add, 1 call
    L = tl.loop(T, uu, lambda t, u: tl.gen(n, lambda i: u[i] * a + tl.sin(u[i])))
    sym = tl.symbolic_cost(L)
    syms = {s.name: s for s in sym.free_symbols}
    for nv, tv in [(1, 0), (4, 3), (10, 1000)]:
        val = sym.xreplace({syms[k]: sympy.Integer(v) for k, v in (("n", nv), ("T", tv)) if k in syms})
        assert int(val) == tv * 3 * nv == tl.cost(L, n=nv, T=tv)
        assert tl.cost(body, n=nv) == 3 * nv


def test_adjoint_cost_certificates_per_policy():
    from tensorlang.loop_cost import adjoint_cost

    for ck, stored in [("all", 100), (10, 10 + 9), (("binomial", 4), 4)]:
        _, loss = loss_of(ck)
        c = adjoint_cost(loss, [u0, a], n=50, T=100)
        assert c["stored_states"] == stored
        assert c["adjoint"] > c["primal"] > 0
    c_all = adjoint_cost(loss_of("all")[1], [u0], n=50, T=100)
    c_k = adjoint_cost(loss_of(10)[1], [u0], n=50, T=100)
    assert c_all["recomputed_steps"] == 0 and c_k["recomputed_steps"] == 90
    # recomputing 90 body steps costs exactly 90 body costs more
    body_cost = tl.cost(_body_program(), n=50, T=100)
    assert c_k["adjoint"] - c_all["adjoint"] == 90 * body_cost


def _body_program():
    ss = tl.tensor("ss", n)
    return tl.gen(n, lambda i: ss[i] + a * (tl.iverson(i >= 1, ss[i - 1]) + tl.iverson(i + 1 <= n - 1, ss[i + 1]) - 2 * ss[i])
                  + 0.1 * tl.sin(ss[i]) + f[0, i])


@pytest.mark.parametrize("steps", [1, 2, 5, 17, 100, 1000])
def test_schedules_reverse_every_step_once_within_their_memory(steps):
    k = max(1, math.isqrt(steps))
    for pol in ["all", k, ("binomial", 3), ("binomial", None)]:
        sc = schedule(pol if pol != ("binomial", None) else ("binomial", None), steps)
        cur, slots, rev, final = 0, {}, [], False
        for act in sc.actions:
            if act[0] == "store":
                assert cur == act[2]
                slots[act[1]] = cur
            elif act[0] == "restore":
                assert slots[act[1]] == act[2]
                cur = act[2]
            elif act[0] == "advance":
                assert cur == act[1] and act[2] > act[1]
                cur = act[2]
            elif act[0] == "final":
                assert cur == steps
                final = True
            else:
                assert final and cur == act[1]
                rev.append(act[1])
        assert rev == list(reversed(range(steps)))
        if pol == "all":
            assert sc.slots == steps and sc.recomputed == 0
        elif pol == k:
            assert sc.slots <= 2 * math.sqrt(steps) and sc.recomputed <= steps
        elif pol == ("binomial", 3):
            r = 0
            while math.comb(3 + r, 3) < steps:
                r += 1
            assert sc.slots <= 3 and sc.recomputed <= r * steps


def test_errors_name_the_loop():
    with pytest.raises(tl.TensorLangError, match="T = -1 is negative"):
        tl.loop(-1, u0, step)
    with pytest.raises(tl.TypeCheckError, match=r"state type.*\[n\]ℝ.*ℝ"):
        tl.loop(T, u0, lambda t, u: tl.sum(n, lambda i: u[i]))
    with pytest.raises(tl.TensorLangError, match=r"in the loop loop\[t:T\].*f\[t \+ 1\]"):
        tl.loop(T, u0, lambda t, u: tl.gen(n, lambda i: u[i] + f[t + 1, i]))
    with pytest.raises(tl.TensorLangError, match="checkpoint"):
        tl.loop(T, u0, step, checkpoint=0)
    with pytest.raises(tl.TensorLangError, match="checkpoint"):
        tl.loop(T, u0, step, checkpoint="some")
    m = tl.size("m")
    # a loop under a gen binder whose body uses the binder's index j: no longer refused, it runs as one
    # loop over the elements (loops.lift_loop): Σ_j [j >= 1]·a⁴ = (m - 1)·a⁴, gradient 4(m - 1)·a³
    inner = tl.gen(m, lambda j: tl.loop(3, a, lambda t, s: tl.iverson(j >= 1, s * a)))
    v, g = tl.value_and_grad(tl.sum(m, lambda j: inner[j]), wrt=a)(a=0.5, m=3)
    assert v == pytest.approx(2 * 0.5**4, rel=1e-14) and g == pytest.approx(8 * 0.5**3, rel=1e-14)
    _, loss = loss_of()
    with pytest.raises(tl.UnsupportedError, match="tl.adjoint of a program with a loop"):
        tl.adjoint(loss, wrt=[u0])


def test_numba_driver_runs_the_steps_and_matches_per_step_calls(monkeypatch):
    from tensorlang.backend import loop_kernel

    monkeypatch.setattr(loop_kernel, "DRIVER_MIN_STEPS", 2)
    L, loss = loss_of()
    kw = data(steps=9)
    k = tl.compile(L)
    assert k.program.step_program() is not None  # a tensor state, float64 inputs: one njit step program
    got = k(**kw)
    monkeypatch.setattr(loop_kernel, "DRIVER_MIN_STEPS", 10**9)  # the per-step validated calls
    np.testing.assert_array_equal(k(**kw), got)
    np.testing.assert_allclose(got, ref(kw["u0"], kw["a"], kw["f"]), rtol=1e-13)
    # float32 inputs: the float32 kernel, per step
    kw32 = {k_: (np.float32(v) if np.ndim(v) == 0 else v.astype(np.float32)) for k_, v in kw.items()}
    k2 = tl.compile(L)
    assert k2(**kw32).dtype == np.float32


def test_audit_certifies_every_policy():
    from tensorlang.loop_audit import audit_loop

    _, loss = loss_of(3)
    rep = audit_loop(loss, wrt=["u0", "a"], sizes={"n": 20, "T": 16})
    names = [r.name for r in rep.rows]
    assert names[0] == "loop program" and "body: simplified adjoint" in names
    loops = {r.name: r for r in rep.rows if r.name.startswith("loop adjoint")}
    assert set(loops) == {"loop adjoint, checkpoint every 3", "loop adjoint, checkpoint all",
                          "loop adjoint, checkpoint every 4", "loop adjoint, checkpoint binomial, s = 4"}
    assert "stored states 16," in loops["loop adjoint, checkpoint all"].reason
    assert loops["loop adjoint, checkpoint all"].cost < loops["loop adjoint, checkpoint every 3"].cost
    assert rep.exit_code == 0 and all(v.holds for v in rep.verdicts if v.name.startswith("loop adjoint"))


# -- random loop programs against their unrolled form (three oracles) -----------------

from hypothesis import given, settings, strategies as st  # noqa: E402

_FNS = {"sin": tl.sin, "tanh": tl.tanh, "relu": tl.relu, "id": lambda x: x}
_NP = {"sin": np.sin, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0), "id": lambda x: x}


@st.composite
def loop_programs(draw):
    c = [draw(st.sampled_from([-0.5, -0.25, 0.0, 0.25, 0.5, 1.0])) for _ in range(3)]
    fn = draw(st.sampled_from(sorted(_FNS)))
    forcing = draw(st.booleans())
    steps = draw(st.integers(0, 5))
    policy = draw(st.sampled_from(["all", 1, 2, 3, ("binomial", 1), ("binomial", 2), "binomial"]))
    return c, fn, forcing, steps, policy


def _build(c, fn, forcing, steps, policy):
    n = tl.size("n")
    x, z, w, fo = tl.tensor("x", n), tl.tensor("z", n), tl.scalar("w"), tl.tensor("fo", steps, n)

    def body(t, u):
        return tl.gen(n, lambda i: c[0] * u[i] + c[1] * tl.iverson(i >= 1, u[i - 1])
                      + c[2] * tl.iverson(i + 1 <= n - 1, u[i + 1]) + w * _FNS[fn](u[i])
                      + (fo[t, i] if forcing else 0.0))

    def unrolled(t, u):
        return u if t == steps else tl.let(body(t, u), lambda v: unrolled(t + 1, v))

    loss = lambda s: tl.sum(n, lambda i: (s[i] - z[i]) * (s[i] - z[i]))  # noqa: E731
    looped = loss(tl.loop(steps, x, body, checkpoint=policy))
    flat = tl.let(unrolled(0, x), loss) if steps else loss(x)
    return looped, flat, [x, w] + ([fo] if forcing else [])


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(loop_programs())
def test_random_loops_agree_with_their_unrolled_form(prog):
    from tensorlang.backend import api

    c, fn, forcing, steps, policy = prog
    looped, flat, wrt = _build(c, fn, forcing, steps, policy)
    r = np.random.RandomState(steps)
    kw = dict(x=r.randn(5), z=r.randn(5), w=0.3, fo=0.1 * r.randn(steps, 5))
    names = {v.name for v in tl.ir.input_vars(looped)}
    kw = {k: v for k, v in kw.items() if k in names}
    wrt = [v for v in wrt if v.name in names]
    flat_names = {v.name for v in tl.ir.input_vars(flat)}  # T = 0: the body's inputs are unused
    kw_flat = {k: v for k, v in kw.items() if k in flat_names}
    # semantics: the loop is its unrolled form
    want = tl.evaluate(flat, **kw_flat)
    assert tl.evaluate(looped, **kw) == pytest.approx(want, rel=1e-12, abs=1e-12)
    # cost: T times the body, exactly the unrolled program's count
    assert tl.cost(looped, n=5) == tl.cost(flat, n=5)
    # the loop's kernels as plain Python (the same generated source, no Numba
    # compilation per random program; the Numba drivers are tested above)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "compile", api.python_kernel)
        from tensorlang.backend.loop_kernel import LoopKernel

        assert LoopKernel(looped, "sparse", None, driver.python_kernel)(**kw) == pytest.approx(want, rel=1e-12, abs=1e-12)
        got = tl.grad(looped, wrt=wrt)(**kw)
    # derivatives: directional derivatives of the unrolled program (central
    # differences of the reference evaluator; its adjoint takes minutes to build)
    got = (got,) if len(wrt) == 1 else got
    for _ in range(2):
        dirs = {v.name: r.randn(*np.shape(kw[v.name])) for v in wrt}
        h = 1e-6
        hi = {**kw, **{k: kw[k] + h * d for k, d in dirs.items()}}
        lo = {**kw, **{k: kw[k] - h * d for k, d in dirs.items()}}
        fd = (tl.evaluate(flat, **{k: hi[k] for k in kw_flat}) - tl.evaluate(flat, **{k: lo[k] for k in kw_flat})) / (2 * h)
        dot = sum(float(np.sum(g * dirs[v.name])) for g, v in zip(got, wrt))
        assert dot == pytest.approx(fd, rel=1e-5, abs=1e-7)
