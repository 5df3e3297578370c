"""The sizes a loop program's derivative callables read before each call
(``loop_autodiff._zero_size_guard``: a call with a size of 0 runs the parts
derived again for sizes >= 0) are remembered per input signature
(``loop_autodiff._lp_sizes``; issue #14, hot path): ``prepare_inputs`` walks
the inputs for them once per signature, not on every call.

Checked: repeated calls with one signature run ``prepare_inputs`` on the loop
program at most once per call (the call's own validation; the sizes' walk
made it twice), with answers matching NumPy; a call with other shapes plans
again and is right; one callable alternating between a size of 0 and not
still takes the zero-size path exactly when a size is 0.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import evaluator


@pytest.fixture
def counted(monkeypatch):
    """The programs ``prepare_inputs`` is called on, in order (set before the callables are built)."""
    calls = []
    real = evaluator.prepare_inputs

    def spy(program, *a, **k):
        calls.append(program)
        return real(program, *a, **k)

    monkeypatch.setattr(evaluator, "prepare_inputs", spy)
    return calls


def _heat():
    from benchmarks.heat import program

    loss, ins = program("T", "all")
    return loss, ins["u0"], ins["kappa"]


def _data(n, T, seed=0):
    from benchmarks.heat import data

    return data({"n": n, "T": T}, np.random.default_rng(seed))


def _check(d, gu, gk):
    from benchmarks.heat import grad_ref

    ref = grad_ref(d)
    np.testing.assert_allclose(gu, ref["u0"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gk, ref["kappa"], rtol=1e-10, atol=1e-12)


def _on(calls, expr) -> int:
    return sum(1 for p in calls if p is expr)


@pytest.mark.parametrize("entry", ["grad", "value_and_grad", "vjp"])
def test_repeated_calls_walk_the_inputs_once_per_call(counted, entry):
    loss, u0, kappa = _heat()
    build = {"grad": tl.grad, "value_and_grad": tl.value_and_grad, "vjp": tl.vjp}[entry]
    g = build(loss, wrt=[u0, kappa])
    expr = g.loop_program.lp.expr
    d = _data(8, 5)
    kw = dict(d, dy=1.0) if entry == "vjp" else d

    def call():
        got = g(**kw)
        gu, gk = got[1] if entry == "value_and_grad" else got
        _check(d, gu, gk)

    call()  # plans: the sizes' walk and the call's own validation
    counted.clear()
    for _ in range(3):
        call()
    # the call's own validation (LoopProgram.sizes) may walk the inputs once;
    # the sizes for the zero-size test come from the plan (before: 2 per call)
    assert _on(counted, expr) <= 3, f"{_on(counted, expr)} walks of the loop program's inputs in 3 calls"


def test_jvp_repeated_calls_walk_the_inputs_once_per_call(counted):
    loss, u0, kappa = _heat()
    f = tl.jvp(loss, wrt=[u0, kappa])
    expr = f.loop_program.expr
    d = _data(6, 4)
    rng = np.random.default_rng(1)
    du, dk = rng.standard_normal((6, 6)), np.array(0.3)
    from benchmarks.heat import grad_ref

    ref = grad_ref(d)
    want = float((ref["u0"] * du).sum() + ref["kappa"] * dk)
    for k in range(4):
        _, t = f(**d, du0=du, dkappa=dk)
        assert float(t) == pytest.approx(want, rel=1e-10)
        if k == 0:
            counted.clear()
    assert _on(counted, expr) <= 3


def test_other_shapes_plan_again(counted):
    loss, u0, kappa = _heat()
    g = tl.grad(loss, wrt=[u0, kappa])
    expr = g.loop_program.lp.expr
    for n, T in ((6, 3), (6, 3), (9, 3), (9, 4), (6, 3)):
        d = _data(n, T, seed=n + T)
        before = _on(counted, expr)
        _check(d, *g(**d))
        assert _on(counted, expr) - before >= 1  # the call's validation, at least
    # a new signature costs one more walk (the sizes' plan): (6, 3), (9, 3), (9, 4)
    counted.clear()
    for n, T in ((7, 2), (7, 2)):
        d = _data(n, T)
        _check(d, *g(**d))
    assert _on(counted, expr) <= 3  # 2 for the new signature, 1 for the planned one


def test_one_callable_switches_to_and_from_a_zero_size():
    n, m, T = tl.sizes("n m T")
    x, y = tl.tensor("x", m), tl.tensor("y", n)
    uT = tl.loop(T, x, lambda t, u: tl.gen(m, lambda i: u[i] + tl.iverson(n >= 1, u[i])))
    loss = tl.sum(m, lambda i: uT[i]) + tl.sum(n, lambda k: y[k])
    vg = tl.value_and_grad(loss, wrt=x)
    X = np.arange(1.0, 4.0)
    for ny, steps in ((1, 2), (1, 2), (0, 2), (0, 2), (1, 2), (2, 3), (0, 0), (0, 3), (1, 3)):
        Y = np.ones(ny)
        scale = 2.0 ** steps if ny else 1.0  # [n >= 1] is false at n = 0: the step is the identity
        v, g = vg(x=X, y=Y, T=steps)
        assert v == pytest.approx(scale * X.sum() + ny)
        np.testing.assert_allclose(g, np.full(3, scale))
