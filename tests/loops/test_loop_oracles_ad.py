"""Derivatives of random loop programs (issue #17 "Tests": finite
differences and dot-product tests through loops; every checkpoint policy
gives identical gradients).  Loops extend the paper's language (Section
4); their derivatives are the body's total derivative (Section 6.1) carried
forward with the state and the body's adjoint (Section 6.2) run backwards
over stored or recomputed states (tensorlang/loop_autodiff.py).

Oracles, independent of the code under test:

* central finite differences of the reference evaluator (``tl.evaluate``)
  along random directions, against ``<grad, direction>``;
* the dot-product test ``<J v, w> = <v, Jᵀ w>``: forward mode (``tl.jvp``,
  a loop carrying state and tangent) against reverse mode (``tl.vjp``, the
  reverse sweep) — two different code paths that must agree to rounding;
* ``tl.grad`` with every checkpoint policy is bit-identical (the same
  operations on the same states), and the same as the loop's own policy.

Kernels run as the generated Python source (``backend.api.python_kernel``;
the Numba step drivers are covered by tests/test_loops.py and
tests/test_loop_steps.py), so each random program costs no compilation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.loops import normalize_checkpoint

from tests.loop_builder import POLICIES, dot_values, random_like
from tests.strategies import loop_programs

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _python_kernels(monkeypatch):
    from tensorlang.backend import api

    monkeypatch.setattr(api, "compile", api.python_kernel)




def _shift(kw, dirs, h):
    return {k: (v + h * dirs[k] if k in dirs else v) for k, v in kw.items()}


@SETTINGS
@given(loop_programs(max_steps=4, max_size=4))
def test_gradient_matches_finite_differences(prog):
    kw = {**prog.inputs, **prog.sizes}
    wrt = list(prog.wrt)
    g = tl.grad(prog.loss, wrt=wrt)(**kw)
    for v, gv in zip(wrt, g):
        assert np.shape(gv) == np.shape(prog.inputs[v.name]), v.name
    rng = np.random.default_rng(prog.steps)
    h = 1e-6
    for _ in range(2):
        dirs = {v.name: random_like(prog.inputs[v.name], rng) for v in wrt}
        fd = (tl.evaluate(prog.loss, **_shift(kw, dirs, h)) - tl.evaluate(prog.loss, **_shift(kw, dirs, -h))) / (2 * h)
        got = sum(dot_values(gv, dirs[v.name]) for v, gv in zip(wrt, g))
        assert got == pytest.approx(fd, rel=1e-5, abs=1e-6), (got, fd)


@SETTINGS
@given(loop_programs(max_steps=4, max_size=4))
def test_dot_product_jvp_against_vjp(prog):
    kw = {**prog.inputs, **prog.sizes}
    wrt = list(prog.wrt)
    rng = np.random.default_rng(prog.steps + 1)
    dirs = {"d" + v.name: random_like(prog.inputs[v.name], rng) for v in wrt}
    value, jv = tl.jvp(prog.expr, wrt=wrt)(**kw, **dirs)
    np.testing.assert_allclose(_flat(value), _flat(tl.evaluate(prog.expr, **kw)), rtol=1e-12, atol=1e-12)
    w = random_like(value, rng)
    gs = tl.vjp(prog.expr, wrt=wrt)(**kw, dy=w)
    lhs = dot_values(jv, w)
    rhs = sum(dot_values(dirs["d" + v.name], gv) for v, gv in zip(wrt, gs))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)


def _flat(v):
    if isinstance(v, tuple):
        return np.concatenate([_flat(x) for x in v])
    return np.ravel(np.asarray(v, dtype=float))


@SETTINGS
@given(loop_programs(max_steps=4, max_size=3))
def test_every_checkpoint_policy_gives_identical_gradients(prog):
    kw = {**prog.inputs, **prog.sizes}
    wrt = list(prog.wrt)
    vg = tl.value_and_grad(prog.loss, wrt=wrt)
    want = vg(**kw)  # the loop's own policy
    assert want[0] == pytest.approx(tl.evaluate(prog.loss, **kw), rel=1e-12, abs=1e-12)
    # every policy on the same built reverse sweep (its schedule is chosen per call) ...
    for pol in POLICIES:
        value, gs = vg.loop_program(kw, 1.0, normalize_checkpoint(pol))
        _same((value, tuple(gs)), want, pol, prog.policy)
    # ... and one program rebuilt with another policy, as tl.loop(..., checkpoint=) spells it
    other = "all" if prog.policy != "all" else ("binomial", 1)
    _same(tl.value_and_grad(_with_policy(prog.loss, other), wrt=wrt)(**kw), want, other, prog.policy)


def _same(got, want, pol, own):
    assert got[0] == want[0], pol
    for x, y in zip(_tuple(got[1]), _tuple(want[1])):
        np.testing.assert_array_equal(x, y, err_msg=f"policy {pol!r} vs the loop's {own!r}")


def _with_policy(e, pol):
    """``e`` with its loop's checkpoint policy replaced (the program as
    ``tl.loop(..., checkpoint=pol)`` builds it)."""
    from tensorlang.ir import Loop, walk
    from tensorlang.loops import _replace, normalize_checkpoint

    lp = next(x for x in walk(e) if isinstance(x, Loop))
    return _replace(e, lp, Loop(lp.extent, lp.init, lp.ivar, lp.svar, lp.body, normalize_checkpoint(pol)))


def _tuple(g):
    return g if isinstance(g, tuple) else (g,)
