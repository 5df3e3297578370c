"""Random programs with TWO loops (tests/loop_builder.py
``two_loop_programs``: the second's initial state is the first's result,
or the two are independent and feed one loss, or the second's body reads
terms of the first's result as loop-invariant inputs) through the three
oracles and the derivative checks (issue #17 item 1: several loops per
program; loops extend the paper's language, Section 4, and are normalized,
costed and differentiated per part, Sections 5, 4.3 and 6).

Oracles, independent of the code under test:

1. semantics: the float evaluator, the exact (sympy) evaluator and the
   compiled loop kernels (the generated source run as Python) agree;
2. normal forms: every loop-free part of the chain (each loop's ``pre``,
   body and hoisted terms, the last ``post``) normalizes with its value
   kept (``oracles.check_pass``);
3. cost: ``tl.cost`` equals the counting evaluator's count (it executes the
   program, tests/counting.py), and the certified reverse sweep stays within
   the largest of the loops' proved factors, storing the schedules' states
   of both loops;
4. derivatives: central finite differences of the evaluator, the
   dot-product test between ``tl.jvp`` and ``tl.vjp``, and bit-identical
   gradients under every checkpoint policy given at the call.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.ir import Loop, Var, size_vars, walk
from tensorlang.loops import chain, normalize_checkpoint, schedule, t_value
from tensorlang.passes.pipeline import normalize

from tests.counting import counting_cost, total
from tests.loop_builder import POLICIES, two_loop_programs
from tests.oracles import check_pass
from tests.strategies import assert_close

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _python_kernels(monkeypatch):
    from tensorlang.backend import api

    monkeypatch.setattr(api, "compile", api.python_kernel)


def _kw(prog):
    return {**prog.inputs, **prog.sizes}


@SETTINGS
@given(two_loop_programs())
def test_float_exact_and_compiled_values_agree(prog):
    from tensorlang.backend import api
    from tensorlang import driver
    from tensorlang.backend.loop_kernel import LoopKernel

    assert len(chain(prog.expr, "test")) == 2
    want = prog.evaluate()
    assert_close(prog.numeric(prog.evaluate_exact()), want, prog.bound, "exact (sympy) vs float")
    got = LoopKernel(prog.expr, "sparse", None, driver.python_kernel)(**_kw(prog))
    assert_close(got, want, prog.bound, "compiled kernels (as Python) vs evaluator")


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(two_loop_programs())
def test_every_part_of_the_chain_normalizes_with_its_value_kept(prog):
    from tensorlang.loop_autodiff import _tzeros

    rng = np.random.default_rng(prog.steps)
    sizes = dict(prog.size_values)
    shared = dict(prog.inputs)  # the inputs and the earlier loops' final states (inputs of the later parts)
    sps = chain(prog.expr, "test")
    for k, sp in enumerate(sps):
        shared[sp.final.name] = _randomize(_tzeros(sp.final.type, sizes), rng)
        vals = dict(shared)  # each split's own state, row and hoisted inputs (names may recur across splits)
        for v in [sp.state] + [row for row, _, _ in sp.rows] + [v for v, _ in sp.hoisted]:
            vals[v.name] = _randomize(_tzeros(v.type, sizes), rng)
        T = sp.steps.evaluate(sizes)
        parts = [("pre", sp.pre)] + [(v.name, e) for v, e in sp.hoisted] + ([("body", sp.body)] if T else [])
        if k == len(sps) - 1:
            parts.append(("post", sp.post))
        for name, part in parts:
            if isinstance(part, Var):
                continue
            assert not any(isinstance(x, Loop) for x in walk(part)), f"loop {k + 1}'s {name} holds a loop"
            psizes = {s: v for s, v in sizes.items() if s in {x.name for x in size_vars(part)}}
            if name == "body" and sp.t_size is not None:
                psizes[sp.t_size.name] = t_value(T - 1)
            check_pass(normalize, part, vals, psizes, max_rule_checks=5)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(two_loop_programs())
def test_cost_is_the_counting_evaluators_per_step_and_the_adjoint_within_its_certificate(prog):
    """``tl.cost`` of the program is the counting evaluator's count of every
    loop's init, of every step of every loop's body (at its own ``t``, the
    state an input) and of the last ``post``: what the loops run."""
    from tensorlang.ir import Aff, subst
    from tensorlang.loop_audit import certified_factor
    from tensorlang.loop_autodiff import _tzeros
    from tensorlang.loop_cost import adjoint_cost

    sizes = dict(prog.size_values)
    rng = np.random.default_rng(prog.steps)

    def count(e, vals):
        if isinstance(e, Var):
            return 0
        sz = {k: v for k, v in sizes.items() if k in {s.name for s in size_vars(e)}}
        return total(counting_cost(e, vals, **sz))

    used = {s.name for s in size_vars(prog.loss)}
    cost = tl.cost(prog.loss, **{k: v for k, v in sizes.items() if k in used})
    sps = chain(prog.loss, "test")
    Ts = [sp.steps.evaluate(sizes) for sp in sps]
    want, vals = 0, dict(prog.inputs)
    for sp, T in zip(sps, Ts):
        vals[sp.final.name] = vals[sp.state.name] = _randomize(_tzeros(sp.state.type, sizes), rng)
        want += count(sp.pre, vals)
        body = subst(sp.loop.body, vals={sp.loop.svar: sp.state})
        want += sum(count(subst(body, idx={sp.loop.ivar: Aff((), t)}), vals) for t in range(T))
    want += count(sps[-1].post, vals)
    assert cost == want
    for pol in [None, ("binomial", 1)]:
        got = adjoint_cost(prog.loss, list(prog.wrt), pol, **sizes)
        pols = [normalize_checkpoint(sp.checkpoint if pol is None else pol) for sp in sps]
        assert got["stored_states"] == sum(schedule(p, T).slots for p, T in zip(pols, Ts) if T)
        assert got["recomputed_steps"] == sum(schedule(p, T).recomputed for p, T in zip(pols, Ts) if T)
        assert [x["steps"] for x in got["loops"]] == Ts
        strided = any(v.name.endswith("q") for v in prog.wrt)  # q[2t + 1]: accumulated whole per step
        if not strided and got["primal"]:
            assert got["factor"] <= max(certified_factor(p, T) for p, T in zip(pols, Ts)), (pol, got)


def _randomize(z, rng):
    """Any value of a part input's type (a part must be right for every input)."""
    if isinstance(z, tuple):
        return tuple(_randomize(x, rng) for x in z)
    if np.ndim(z):
        return rng.uniform(-1, 1, size=np.shape(z))
    return float(rng.uniform(-1, 1))


def _dot(a, b) -> float:
    if isinstance(a, tuple):
        return sum(_dot(x, y) for x, y in zip(a, b))
    return float(np.sum(np.asarray(a, dtype=float) * np.asarray(b, dtype=float)))


def _like(v, rng):
    if isinstance(v, tuple):
        return tuple(_like(x, rng) for x in v)
    if np.ndim(v):
        return rng.standard_normal(np.shape(v))
    return float(rng.standard_normal())


@SETTINGS
@given(two_loop_programs())
def test_gradient_against_finite_differences_and_jvp_against_vjp(prog):
    kw = _kw(prog)
    wrt = list(prog.wrt)
    g = tl.grad(prog.loss, wrt=wrt)(**kw)
    rng = np.random.default_rng(prog.steps)
    dirs = {v.name: _like(prog.inputs[v.name], rng) for v in wrt}
    h = 1e-6
    shift = lambda s: {k: (x + s * dirs[k] if k in dirs else x) for k, x in kw.items()}  # noqa: E731
    fd = (tl.evaluate(prog.loss, **shift(h)) - tl.evaluate(prog.loss, **shift(-h))) / (2 * h)
    got = sum(_dot(gv, dirs[v.name]) for v, gv in zip(wrt, g))
    assert got == pytest.approx(fd, rel=1e-5, abs=1e-6)
    # the dot-product test on the (pair-valued) program: forward mode against reverse mode
    value, jv = tl.jvp(prog.expr, wrt=wrt)(**kw, **{"d" + k: d for k, d in dirs.items()})
    w = _like(value, rng)
    gs = tl.vjp(prog.expr, wrt=wrt)(**kw, dy=w)
    assert _dot(jv, w) == pytest.approx(sum(_dot(dirs[v.name], gv) for v, gv in zip(wrt, gs)), rel=1e-10, abs=1e-10)


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(two_loop_programs())
def test_every_policy_at_the_call_gives_identical_gradients(prog):
    kw = _kw(prog)
    wrt = list(prog.wrt)
    vg = tl.value_and_grad(prog.loss, wrt=wrt)
    want = vg(**kw)  # each loop its own policy
    # every policy for both loops on the built sweeps (the call's policy is passed down the chain) ...
    runs = {pol: vg.loop_program(kw, 1.0, pol) for pol in POLICIES}
    # ... and two spelled at the call, as tl.value_and_grad(..., checkpoint=) builds them
    for pol in ("all", ("binomial", 1)):
        runs[("call", pol)] = tl.value_and_grad(prog.loss, wrt=wrt, checkpoint=pol)(**kw)
    for pol, got in runs.items():
        assert got[0] == want[0]
        for x, y in zip(got[1], want[1]):
            np.testing.assert_array_equal(x, y, err_msg=f"checkpoint={pol!r} vs the loops' {prog.policy!r}")
