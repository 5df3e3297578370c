"""Derivatives at a size of 0 (found by review, session 8).

The simplifier decides a derived program's predicates for sizes >= 1:
``[n >= 1]`` is true there and an unused ``exists k < n`` holds, so the
gradient of ``Σ_i [n >= 1]·x_i`` was ``1`` at n = 0, where the loss is the
constant 0.  A call with a size of 0 now runs the program derived again for
sizes >= 0 (``isl_bridge.sizes_may_be_zero``).  References: the evaluator on
the source program and hand derivatives; every entry point, both runtimes,
loop programs too.
"""

import numpy as np
import pytest

import tensorlang as tl


def _programs():
    n, m = tl.sizes("n m")
    x, y = tl.tensor("x", m), tl.tensor("y", n)
    tail = tl.sum(n, lambda k: y[k])
    guarded = tl.sum(m, lambda i: tl.iverson(n >= 1, x[i] * x[i])) + tail
    exists = tl.sum(m, lambda i: tl.iverson(tl.exists(n, lambda k: k <= i), x[i] * x[i])) + tail
    return x, y, {"guarded": guarded, "exists": exists}


def _want_grad(X, ny):
    return 2 * X if ny >= 1 else np.zeros_like(X)


@pytest.mark.parametrize("runtime", ["evaluator", "compiled"])
@pytest.mark.parametrize("which", ["guarded", "exists"])
def test_every_derivative_at_a_zero_size(monkeypatch, runtime, which):
    monkeypatch.setenv("TENSORLANG_RUNTIME", runtime)
    x, y, progs = _programs()
    loss = progs[which]
    X = np.arange(1.0, 4.0)
    for ny in (0, 2, 0):  # a zero size, then not, then zero again (the callables keep both)
        Y = np.ones(ny)
        want = tl.evaluate(loss, x=X, y=Y)
        assert want == (float(X @ X) + ny if ny else 0.0)
        g = _want_grad(X, ny)
        np.testing.assert_allclose(tl.grad(loss, wrt=x)(x=X, y=Y), g)
        v, gg = tl.value_and_grad(loss, wrt=x)(x=X, y=Y)
        assert v == pytest.approx(want)
        np.testing.assert_allclose(gg, g)
        np.testing.assert_allclose(tl.vjp(loss, wrt=x)(x=X, y=Y, dy=2.0), 2 * g)
        d = np.array([1.0, -1.0, 0.5])
        v, t = tl.jvp(loss, wrt=[x])(x=X, y=Y, dx=d)
        assert v == pytest.approx(want) and t == pytest.approx(float(g @ d))


def test_a_loop_at_a_zero_size():
    n, m, T = tl.sizes("n m T")
    x, y = tl.tensor("x", m), tl.tensor("y", n)
    uT = tl.loop(T, x, lambda t, u: tl.gen(m, lambda i: u[i] + tl.iverson(n >= 1, u[i])))
    loss = tl.sum(m, lambda i: uT[i]) + tl.sum(n, lambda k: y[k])
    X = np.arange(1.0, 4.0)
    for ny, steps in ((0, 2), (1, 2), (0, 0), (0, 3)):
        Y = np.ones(ny)
        scale = 2.0 ** steps if ny else 1.0
        assert tl.evaluate(loss, x=X, y=Y, T=steps) == pytest.approx(scale * X.sum() + ny)
        v, g = tl.value_and_grad(loss, wrt=x)(x=X, y=Y, T=steps)
        assert v == pytest.approx(scale * X.sum() + ny)
        np.testing.assert_allclose(g, np.full(3, scale))
        np.testing.assert_allclose(tl.grad(loss, wrt=x)(x=X, y=Y, T=steps), np.full(3, scale))
        np.testing.assert_allclose(tl.vjp(loss, wrt=x)(x=X, y=Y, T=steps, dy=3.0), np.full(3, 3 * scale))
        v, t = tl.jvp(loss, wrt=[x])(x=X, y=Y, T=steps, dx=np.ones(3))
        assert t == pytest.approx(3 * scale)
