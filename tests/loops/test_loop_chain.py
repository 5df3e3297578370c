"""Several loops in one program (issue #17 item 1; loops extend the paper's
language, Section 4; their derivatives are Section 6's per part, as
tensorlang/loop_autodiff.py builds them, the later loops' sweeps first).

The programs a demanding user writes:

* ``coarse_fine``: a coarse time integrator, then a fine one started from
  a function of the coarse final state (the second loop's init reads the
  first loop's result);
* ``two_sims``: a loss adding terms of two independent simulations sharing
  a parameter ``a`` (its cotangent accumulates over both sweeps);
* ``invariant``: a second loop whose body reads a tensor computed from the
  first loop's result (a loop-invariant input of the second loop).

Oracles, independent of the code under test: NumPy re-implementations of
each program (values), central finite differences of the reference
evaluator (gradients), forward mode against reverse mode (the dot-product
test ``<J v, w> = <v, Jᵀ w>``), the counting evaluator
(tests/counting.py: it executes the program and counts the operations it
performs) and a hand count for the cost model, and bit-identical gradients
under every checkpoint policy, given to the loop or at the call
(``tl.grad(..., checkpoint=...)``).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.loop_cost import adjoint_cost
from tensorlang.loops import chain, normalize_checkpoint, schedule

from tests.counting import counting_cost, total

n, T1, T2 = tl.sizes("n T1 T2")
u0, v0 = tl.tensor("u0", n), tl.tensor("v0", n)
a, w = tl.scalar("a"), tl.tensor("w", n)
POLICIES = ("all", 1, 2, 3, "binomial", ("binomial", 1), ("binomial", 2))


def coarse_fine(ck1="all", ck2="all"):
    # explicit Euler on u' = -u + a·sin(u): dt = 0.2 coarse, then 0.05 fine from 2·u
    L1 = tl.loop(T1, u0, lambda t, u: tl.gen(n, lambda i: u[i] + 0.2 * (a * tl.sin(u[i]) - u[i])), checkpoint=ck1)
    L2 = tl.loop(T2, tl.gen(n, lambda i: 2.0 * L1[i]),
                 lambda t, u: tl.gen(n, lambda i: u[i] + 0.05 * (a * tl.sin(u[i]) - u[i]) + 0.01 * w[i]), checkpoint=ck2)
    return tl.sum(n, lambda i: L2[i] * L2[i])


def coarse_fine_np(u0, a, w, T1, T2):
    u = u0.copy()
    for _ in range(T1):
        u = u + 0.2 * (a * np.sin(u) - u)
    u = 2.0 * u
    for _ in range(T2):
        u = u + 0.05 * (a * np.sin(u) - u) + 0.01 * w
    return float(u @ u)


def two_sims(ck1="all", ck2="all"):
    # two independent simulations sharing a: a diffusion-like one and a tanh map
    A = tl.loop(T1, u0, lambda t, u: tl.gen(
        n, lambda i: 0.5 * u[i] + 0.25 * tl.iverson(i >= 1, u[i - 1]) + 0.25 * a * tl.iverson(i + 1 <= n - 1, u[i + 1])),
        checkpoint=ck1)
    B = tl.loop(T2, v0, lambda t, v: tl.gen(n, lambda i: tl.tanh(a * v[i] + w[i])), checkpoint=ck2)
    return tl.sum(n, lambda i: A[i] * A[i]) + tl.sum(n, lambda i: B[i] * w[i])


def two_sims_np(u0, v0, a, w, T1, T2):
    u = u0.copy()
    for _ in range(T1):
        left = np.concatenate([[0.0], u[:-1]])
        right = np.concatenate([u[1:], [0.0]])
        u = 0.5 * u + 0.25 * left + 0.25 * a * right
    v = v0.copy()
    for _ in range(T2):
        v = np.tanh(a * v + w)
    return float(u @ u + v @ w)


def invariant(ck1="all", ck2="all"):
    # the second loop's body reads c = exp(-L1²), computed once from the first loop's result
    L1 = tl.loop(T1, u0, lambda t, u: tl.gen(n, lambda i: tl.sin(u[i]) + a), checkpoint=ck1)
    c = tl.gen(n, lambda i: tl.exp(-L1[i] * L1[i]))
    L2 = tl.loop(T2, v0, lambda t, v: tl.gen(n, lambda i: 0.9 * v[i] * c[i] + 0.1 * w[i]), checkpoint=ck2)
    return tl.sum(n, lambda i: L2[i] * L1[i])


def invariant_np(u0, v0, a, w, T1, T2):
    u = u0.copy()
    for _ in range(T1):
        u = np.sin(u) + a
    c = np.exp(-u * u)
    v = v0.copy()
    for _ in range(T2):
        v = 0.9 * v * c + 0.1 * w
    return float(v @ u)


CASES = {
    "coarse_fine": (coarse_fine, coarse_fine_np, ("u0", "a", "w")),
    "two_sims": (two_sims, two_sims_np, ("u0", "v0", "a", "w")),
    "invariant": (invariant, invariant_np, ("u0", "v0", "a", "w")),
}


def _inputs(names, k=5, seed=0):
    rng = np.random.default_rng(seed)
    vals = {"u0": rng.uniform(-1, 1, k), "v0": rng.uniform(-1, 1, k), "a": 0.7, "w": rng.uniform(-1, 1, k)}
    return {x: vals[x] for x in names}


def _wrt(names):
    return [{"u0": u0, "v0": v0, "a": a, "w": w}[x] for x in names]


@pytest.fixture
def python_kernels(monkeypatch):
    from tensorlang.backend import api

    monkeypatch.setattr(api, "compile", api.python_kernel)


@pytest.mark.parametrize("case", sorted(CASES))
def test_value_evaluator_and_compiled_agree_with_numpy(case, python_kernels):
    build, ref, names = CASES[case]
    loss = build()
    kw = _inputs(names)
    want = ref(**kw, T1=4, T2=3)
    assert tl.evaluate(loss, **kw, T1=4, T2=3) == pytest.approx(want, rel=1e-12)
    from tensorlang.backend import api
    from tensorlang import driver
    from tensorlang.backend.loop_kernel import LoopKernel

    k = LoopKernel(loss, "sparse", None, driver.python_kernel)  # the kernels' generated source, run as Python
    assert k(**kw, T1=4, T2=3) == pytest.approx(want, rel=1e-12)
    assert k(**kw, T1=0, T2=2) == pytest.approx(ref(**kw, T1=0, T2=2), rel=1e-12)
    assert len(chain(loss)) == 2


def test_numba_kernels_and_step_programs_run_both_loops():
    """Compiled with Numba, both loops long enough (T >= DRIVER_MIN_STEPS) for
    the step programs: each loop one sequential loop in one Numba call, the
    reverse sweeps of loop 2 then loop 1, against NumPy and the Python path."""
    from tensorlang.backend.loop_kernel import DRIVER_MIN_STEPS

    loss = coarse_fine(6, "all")
    kw = _inputs(("u0", "a", "w"), k=8, seed=7)
    sz = dict(T1=DRIVER_MIN_STEPS + 8, T2=DRIVER_MIN_STEPS)
    assert tl.compile(loss)(**kw, **sz) == pytest.approx(coarse_fine_np(**kw, **sz), rel=1e-12)
    v, g = tl.value_and_grad(loss, wrt=[u0, a, w])(**kw, **sz)
    assert v == pytest.approx(coarse_fine_np(**kw, **sz), rel=1e-12)
    g2 = tl.grad(loss, wrt=[u0, a, w], checkpoint="binomial")(**kw, **sz)
    for x, y in zip(g, g2):
        np.testing.assert_array_equal(x, y)
    h = 1e-6
    fd = (coarse_fine_np(**{**kw, "a": kw["a"] + h}, **sz) - coarse_fine_np(**{**kw, "a": kw["a"] - h}, **sz)) / (2 * h)
    assert g[1] == pytest.approx(fd, rel=1e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_against_finite_differences(case, python_kernels):
    build, ref, names = CASES[case]
    loss = build(2, "binomial")
    kw = _inputs(names, seed=1)
    sz = dict(T1=5, T2=4)
    gs = tl.grad(loss, wrt=_wrt(names))(**kw, **sz)
    h = 1e-6
    rng = np.random.default_rng(2)
    for name, g in zip(names, gs):
        d = rng.standard_normal(np.shape(kw[name])) if np.ndim(kw[name]) else 1.0
        plus = ref(**{**kw, name: kw[name] + h * d}, **sz)
        minus = ref(**{**kw, name: kw[name] - h * d}, **sz)
        assert float(np.sum(g * d)) == pytest.approx((plus - minus) / (2 * h), rel=1e-6, abs=1e-8), name


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_reverse_mode_agree_dot_product_test(case, python_kernels):
    build, _, names = CASES[case]
    loss = build(3, 1)
    kw = _inputs(names, seed=3)
    sz = dict(T1=4, T2=5)
    rng = np.random.default_rng(4)
    dirs = {x: (rng.standard_normal(np.shape(kw[x])) if np.ndim(kw[x]) else float(rng.standard_normal()))
            for x in names}
    value, tangent = tl.jvp(loss, wrt=_wrt(names))(**kw, **sz, **{"d" + x: d for x, d in dirs.items()})
    v, gs = tl.value_and_grad(loss, wrt=_wrt(names))(**kw, **sz)
    assert value == v
    wv = float(sum(np.sum(g * dirs[x]) for x, g in zip(names, gs)))
    assert tangent == pytest.approx(wv, rel=1e-12)
    # vjp at a random output cotangent
    cot = float(rng.standard_normal())
    vj = tl.vjp(loss, wrt=_wrt(names))(**kw, **sz, dy=cot)
    assert float(sum(np.sum(g * dirs[x]) for x, g in zip(names, vj))) == pytest.approx(cot * tangent, rel=1e-12)


def test_vjp_of_a_tensor_valued_two_loop_program_dot_product(python_kernels):
    L1 = tl.loop(T1, u0, lambda t, u: tl.gen(n, lambda i: tl.sin(u[i]) * a))
    L2 = tl.loop(T2, L1, lambda t, u: tl.gen(n, lambda i: u[i] * w[i] + tl.iverson(i >= 1, u[i - 1])))
    kw = dict(u0=np.linspace(-1, 1, 4), a=0.8, w=np.linspace(0.3, 0.9, 4), T1=3, T2=4)
    rng = np.random.default_rng(5)
    dx = {"du0": rng.standard_normal(4), "da": 0.4, "dw": rng.standard_normal(4)}
    dy = rng.standard_normal(4)
    _, jv = tl.jvp(L2, wrt=[u0, a, w])(**kw, **dx)
    vj = tl.vjp(L2, wrt=[u0, a, w])(**kw, dy=dy)
    lhs = float(jv @ dy)
    rhs = float(vj[0] @ dx["du0"] + vj[1] * dx["da"] + vj[2] @ dx["dw"])
    assert lhs == pytest.approx(rhs, rel=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_policy_gives_bit_identical_gradients_at_the_loop_and_at_the_call(case, python_kernels):
    build, _, names = CASES[case]
    kw = _inputs(names, seed=6)
    sz = dict(T1=7, T2=6)
    want = tl.grad(build(), wrt=_wrt(names))(**kw, **sz)
    loss = build()
    for pol in POLICIES:
        got_loop = tl.grad(build(pol, pol), wrt=_wrt(names))(**kw, **sz)
        got_call = tl.grad(loss, wrt=_wrt(names), checkpoint=pol)(**kw, **sz)
        v, got_vg = tl.value_and_grad(build(3, "binomial"), wrt=_wrt(names), checkpoint=pol)(**kw, **sz)
        for x, y0, y1, y2 in zip(want, got_loop, got_call, got_vg):
            np.testing.assert_array_equal(y0, x)
            np.testing.assert_array_equal(y1, x)
            np.testing.assert_array_equal(y2, x)


def test_the_call_policy_overrides_every_loop_policy_in_the_certificate():
    loss = coarse_fine(2, "binomial")
    own = adjoint_cost(loss, [u0, a], n=6, T1=9, T2=5)
    assert [x["policy"] for x in own["loops"]] == [2, ("binomial", 3)]
    assert own["stored_states"] == schedule(2, 9).slots + schedule(("binomial", 3), 5).slots
    every = adjoint_cost(loss, [u0, a], "all", n=6, T1=9, T2=5)
    assert [x["policy"] for x in every["loops"]] == ["all", "all"]
    assert [x["stored_states"] for x in every["loops"]] == [9, 5]
    assert every["stored_reals"] == (9 + 5) * 6 and every["recomputed_steps"] == 0


def test_bad_policy_at_the_call_is_an_error_naming_it():
    loss = coarse_fine()
    for bad in (0, "some", ("binomial", 0), True, 2.5):
        for f in (tl.grad, tl.value_and_grad, tl.vjp):
            with pytest.raises(tl.TensorLangError, match=r"checkpoint=.*" + "|".join(["must be one of", "needs"])):
                f(loss, wrt=u0, checkpoint=bad)
    with pytest.raises(tl.TensorLangError, match=r"jvp\(\.\.\., checkpoint='all'\): checkpoint= is a reverse-mode option"):
        tl.jvp(loss, wrt=u0, checkpoint="all")


def test_checkpoint_at_the_call_on_a_loop_free_program_is_checked_and_has_no_effect():
    loss = tl.sum(n, lambda i: u0[i] * u0[i] * a)
    kw = dict(u0=np.arange(3.0), a=2.0)
    np.testing.assert_array_equal(tl.grad(loss, wrt=u0, checkpoint=2)(**kw), 4.0 * np.arange(3.0))
    with pytest.raises(tl.TensorLangError, match=r"grad\(\.\.\., checkpoint=-1\)"):
        tl.grad(loss, wrt=u0, checkpoint=-1)


# -- cost: symbolic in each T, against a hand count and the counting evaluator --------------


def test_cost_is_symbolic_in_each_loop_count_and_matches_hand_and_counting_evaluator():
    import sympy

    loss = coarse_fine()
    for sz in (dict(n=5, T1=4, T2=3), dict(n=3, T1=0, T2=6), dict(n=7, T1=2, T2=0)):
        count = total(counting_cost(loss, _inputs(("u0", "a", "w"), k=sz["n"]), **sz))
        assert tl.cost(loss, **sz) == count, sz
    sym = tl.symbolic_cost(loss)
    Ts = {str(s): s for s in sym.free_symbols}
    assert set(Ts) == {"n", "T1", "T2"}
    # linear in each T: the body's count per step times n, plus the init, the loss
    N, A, B = Ts["n"], Ts["T1"], Ts["T2"]
    per1 = sympy.expand(sym).coeff(A).coeff(N)
    per2 = sympy.expand(sym).coeff(B).coeff(N)
    assert per1 == tl.cost(coarse_fine(), n=1, T1=1, T2=0) - tl.cost(coarse_fine(), n=1, T1=0, T2=0)
    assert per2 == tl.cost(coarse_fine(), n=1, T1=0, T2=1) - tl.cost(coarse_fine(), n=1, T1=0, T2=0)
    for sz in (dict(n=5, T1=4, T2=3), dict(n=2, T1=11, T2=1)):
        assert int(sym.xreplace({N: sympy.Integer(sz["n"]), A: sympy.Integer(sz["T1"]),
                                 B: sympy.Integer(sz["T2"])})) == tl.cost(loss, **sz)


def test_cost_of_two_simulations_by_hand():
    loss = two_sims()
    # A's step per element: 4 muls (0.5·u, 0.25·[..], 0.25·a·[..]: the constants multiply outside the
    # brackets, so they are performed at every i) and 2 adds (the operands are products, not brackets:
    # rule 4.24's saving does not apply): 6n per step.
    # B's step per element: a·v (1 mul), + w (1 add), tanh (1 call): 3.  The loss: Σ A² (n muls,
    # n - 1 adds), Σ B·w (n, n - 1), one add between them.
    for nn, t1, t2 in ((5, 4, 3), (1, 2, 2), (4, 0, 5)):
        a_step = 6 * nn
        want_b = 3 * nn * t2
        want_loss = 2 * nn + 2 * (nn - 1) + 1
        count = total(counting_cost(loss, _inputs(("u0", "v0", "a", "w"), k=nn), n=nn, T1=t1, T2=t2))
        assert tl.cost(loss, n=nn, T1=t1, T2=t2) == count == t1 * a_step + want_b + want_loss


def test_audit_prints_each_loops_certified_adjoint_and_peak_state_memory():
    from tensorlang.loop_audit import audit_loop

    loss = coarse_fine(2, "all")
    sizes = {"n": 10, "T1": 16, "T2": 9}
    rep = audit_loop(loss, wrt=["u0", "a"], sizes=sizes)
    rows = {r.name: r for r in rep.rows}
    # each loop's body audited as its own program
    assert any(r.startswith("body 1: ") for r in rows) and any(r.startswith("body 2: ") for r in rows)
    own1, own2 = rows["loop 1 adjoint, checkpoint every 2"], rows["loop 2 adjoint, checkpoint all"]
    c = adjoint_cost(loss, [u0, a], **sizes)
    assert (own1.cost, own2.cost) == (c["loops"][0]["adjoint"], c["loops"][1]["adjoint"])
    # stored states: every 2nd of 16 plus one segment's 1 recomputed state; all 9 of loop 2
    assert own1.reason == f"stored states {schedule(2, 16).slots}, recomputed steps 8, peak state memory " \
                          f"{schedule(2, 16).slots * 10} reals"
    assert own2.reason == "stored states 9, recomputed steps 0, peak state memory 90 reals"
    whole = rows["loops adjoint (all 2), checkpoint each loop's own"]
    assert whole.cost == c["adjoint"] and f"stored states {schedule(2, 16).slots + 9}," in whole.reason
    assert {"loop 1 adjoint, checkpoint all", "loop 2 adjoint, checkpoint all",
            "loop 1 adjoint, checkpoint binomial, s = 4", "loop 2 adjoint, checkpoint binomial, s = 4"} <= set(rows)
    assert "loops adjoint (all 2), checkpoint binomial" in rows  # each loop its own snapshot budget
    assert rep.exit_code == 0 and all(v.holds for v in rep.verdicts if "adjoint (" in v.name)
    from tensorlang.cli import markdown_report

    md = markdown_report(rep, "coarse_fine.py")  # the CLI's rendering (`tensorlang audit --format markdown`)
    assert "| loop 2 adjoint, checkpoint all |" in md and "peak state memory 90 reals" in md
    # the totals add the loops' shares and the loop-free loss's adjoint
    assert c["adjoint"] > c["loops"][0]["adjoint"] + c["loops"][1]["adjoint"]
    assert c["primal"] == tl.cost(loss, **sizes)


def test_a_loop_in_a_loop_body_using_neither_t_nor_the_state_is_computed_once(python_kernels):
    """A loop inside another loop's body that reads neither the outer ``t``
    nor the outer state is loop-invariant: it is split out first (its final
    state an input of the outer body) and runs once, not once per outer step
    (tl.cost counts what runs: once)."""
    inner = tl.loop(T2, v0, lambda s, v: tl.gen(n, lambda i: tl.sin(v[i]) * a))
    outer = tl.loop(T1, u0, lambda t, u: tl.gen(n, lambda i: 0.5 * u[i] + 0.1 * inner[i]))
    loss = tl.sum(n, lambda i: outer[i] * w[i])
    kw = dict(u0=np.linspace(-1, 1, 4), v0=np.linspace(0.2, 0.8, 4), a=0.9, w=np.linspace(1, 2, 4))

    def ref(u0, v0, a, w, T1, T2):
        v = v0.copy()
        for _ in range(T2):
            v = np.sin(v) * a
        u = u0.copy()
        for _ in range(T1):
            u = 0.5 * u + 0.1 * v
        return float(u @ w)

    sz = dict(T1=5, T2=3)
    assert [describe_steps(sp) for sp in chain(loss)] == ["T2", "T1"]  # the inner loop first
    assert tl.evaluate(loss, **kw, **sz) == pytest.approx(ref(**kw, **sz), rel=1e-12)
    from tensorlang.backend import api
    from tensorlang import driver
    from tensorlang.backend.loop_kernel import LoopKernel

    assert LoopKernel(loss, "sparse", None, driver.python_kernel)(**kw, **sz) == pytest.approx(ref(**kw, **sz), rel=1e-12)
    g = tl.grad(loss, wrt=[v0, a])(**kw, **sz)
    h = 1e-6
    d = np.array([0.3, -0.2, 0.5, 0.1])
    fd = (ref(**{**kw, "v0": kw["v0"] + h * d}, **sz) - ref(**{**kw, "v0": kw["v0"] - h * d}, **sz)) / (2 * h)
    assert float(g[0] @ d) == pytest.approx(fd, rel=1e-6)
    fa = (ref(**{**kw, "a": kw["a"] + h}, **sz) - ref(**{**kw, "a": kw["a"] - h}, **sz)) / (2 * h)
    assert g[1] == pytest.approx(fa, rel=1e-6)
    # per element: the inner step sin·a (2), run T2 times; the outer step 0.5·u + 0.1·v (3), T1 times; the loss
    assert tl.cost(loss, n=4, T1=5, T2=3) == 4 * (2 * 3 + 3 * 5) + (4 + 3)


def describe_steps(sp) -> str:
    return str(sp.steps)


def test_two_loops_over_the_same_T_with_forcing_rows(python_kernels):
    """Both loops run T steps and read their own forcing row f[t], g[T - 1 - t]
    (row inputs, loops.row_inputs): one symbolic T, two loops."""
    T = tl.size("T")
    f, g = tl.tensor("f", T, n), tl.tensor("g", T, n)
    L1 = tl.loop(T, u0, lambda t, u: tl.gen(n, lambda i: 0.8 * u[i] + f[t, i]), checkpoint=2)
    L2 = tl.loop(T, L1, lambda t, u: tl.gen(n, lambda i: tl.sin(u[i]) * g[T - 1 - t, i]))
    loss = tl.sum(n, lambda i: L2[i] * L2[i])
    rng = np.random.default_rng(9)
    kw = dict(u0=rng.uniform(-1, 1, 3), f=rng.uniform(-1, 1, (6, 3)), g=rng.uniform(-1, 1, (6, 3)))

    def ref(u0, f, g):
        u = u0.copy()
        for t in range(6):
            u = 0.8 * u + f[t]
        for t in range(6):
            u = np.sin(u) * g[5 - t]
        return float(u @ u)

    assert tl.evaluate(loss, **kw) == pytest.approx(ref(**kw), rel=1e-12)
    gs = tl.grad(loss, wrt=[u0, f, g])(**kw)
    h = 1e-6
    for name, gv in zip(("u0", "f", "g"), gs):
        d = rng.standard_normal(kw[name].shape)
        fd = (ref(**{**kw, name: kw[name] + h * d}) - ref(**{**kw, name: kw[name] - h * d})) / (2 * h)
        assert float(np.sum(gv * d)) == pytest.approx(fd, rel=1e-6), name
    for x, y in zip(tl.grad(loss, wrt=[u0, f, g], checkpoint=("binomial", 1))(**kw), gs):
        np.testing.assert_array_equal(x, y)
    assert [len(sp.rows) for sp in chain(loss)] == [1, 1]


@pytest.mark.parametrize("pol", ["all", 3, ("binomial", 2)])
def test_one_loop_cut_into_two_gives_the_same_value_and_gradient_bit_for_bit(pol, python_kernels):
    """loop(T1 + T2, u0, step) = loop(T2, loop(T1, u0, step), step): the same
    operations in the same order, so the same bits (an oracle that needs no
    reference implementation)."""
    T = tl.size("T")

    def step(t, u):
        return tl.gen(n, lambda i: u[i] + a * (tl.iverson(i >= 1, u[i - 1]) + tl.iverson(i + 1 <= n - 1, u[i + 1])
                                               - 2.0 * u[i]) + 0.01 * tl.tanh(w[i] * u[i]))

    one = tl.loop(T, u0, step, checkpoint=pol)
    two = tl.loop(T2, tl.loop(T1, u0, step, checkpoint=pol), step, checkpoint=pol)
    l1, l2 = (tl.sum(n, lambda i: L[i] * L[i] * w[i]) for L in (one, two))
    kw = _inputs(("u0", "a", "w"), k=6, seed=11)
    kw["a"] = 0.2
    v1, g1 = tl.value_and_grad(l1, wrt=[u0, a, w])(**kw, T=9)
    v2, g2 = tl.value_and_grad(l2, wrt=[u0, a, w])(**kw, T1=4, T2=5)
    assert v1 == v2
    for x, y in zip(g1, g2):
        np.testing.assert_array_equal(x, y)
    _, t1 = tl.jvp(l1, wrt=[a])(**kw, T=9, da=1.0)
    _, t2 = tl.jvp(l2, wrt=[a])(**kw, T1=4, T2=5, da=1.0)
    assert t1 == t2
