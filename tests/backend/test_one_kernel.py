"""Issue #13 item 5: one kernel per derivative callable (paper Section 6).

``tl.value_and_grad``, ``tl.jvp`` and ``tl.vjp(..., with_value=True)`` compile
ONE program that computes the primal once and the derivative from its
residuals.  Checked here: the value equals the compiled loss, the gradient
equals ``tl.grad``'s, exactly one kernel is compiled per callable (counted
at ``backend.api.compile``), and the derivatives agree with central finite
differences and with each other (the dot-product test
``<jvp(dx), dy> = <dx, vjp(dy)>``) and with NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.backend.api as backend_api


@pytest.fixture
def compiles(monkeypatch):
    """Run compiled kernels at every size and count the kernels built."""
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")
    built = []
    orig = backend_api.compile

    def counting(expr, *a, **k):
        kern = orig(expr, *a, **k)
        built.append(kern)
        return kern

    monkeypatch.setattr(backend_api, "compile", counting)
    return built


def deconv():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    rng = np.random.default_rng(1)
    N, M = 40, 5
    data = dict(x=rng.standard_normal(N + M - 1), c=rng.standard_normal(M), z=rng.standard_normal(N))
    return loss, y, (x, c), data


def laplacian():
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    w = tl.tensor("w", n, n)
    lap = tl.gen([n, n], lambda i, j: tl.iverson(
        (i >= 1) & (i < n - 1) & (j >= 1) & (j < n - 1),
        4 * u[i, j] - u[i - 1, j] - u[i + 1, j] - u[i, j - 1] - u[i, j + 1]))
    loss = tl.sum([n, n], lambda i, j: w[i, j] * tl.tanh(u[i, j]) + lap[i, j] * lap[i, j])
    rng = np.random.default_rng(2)
    N = 9
    data = dict(u=rng.standard_normal((N, N)), w=rng.standard_normal((N, N)))
    return loss, lap, (u, w), data


PROGRAMS = {"deconvolution": deconv, "laplacian": laplacian}


def fd_grad(f, data, name, h=1e-6):
    base = data[name]
    g = np.zeros_like(base)
    for k in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[k] += h
        minus[k] -= h
        g[k] = (f(**{**data, name: plus}) - f(**{**data, name: minus})) / (2 * h)
    return g


# the naive adjoint of the Laplacian compiles for tens of seconds (dense one-hot sums)
@pytest.mark.parametrize("which, mode", [("deconvolution", "sparse"), ("deconvolution", "naive"), ("laplacian", "sparse")])
def test_value_and_grad_is_one_kernel(compiles, which, mode):
    loss, _, wrt, data = PROGRAMS[which]()
    vg = tl.value_and_grad(loss, wrt=list(wrt), mode=mode)
    val, grads = vg(**data)
    assert len(compiles) == 1  # one kernel for value and gradient
    assert isinstance(vg.program, tl.Expr)
    f = tl.compile(loss)
    want_val = f(**data)
    assert val == pytest.approx(want_val, rel=1e-12, abs=1e-12)
    want = tl.grad(loss, wrt=list(wrt), mode=mode)(**data)
    for got, exp, x in zip(grads, want, wrt):
        np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, fd_grad(f, data, x.name), rtol=1e-5, atol=1e-6)


def test_value_and_grad_single_wrt_and_repeat_calls(compiles):
    loss, _, (x, c), data = deconv()
    vg = tl.value_and_grad(loss, wrt=x)
    for scale in (1.0, -0.5, 2.0):
        d = {**data, "x": data["x"] * scale}
        val, gx = vg(**d)
        y = np.convolve(d["x"], d["c"], mode="valid")
        assert val == pytest.approx(float(np.sum((y - d["z"]) ** 2)), rel=1e-12)
        # dx[k] = sum over i - j + m - 1 = k of r[i] c[j]: a full convolution with c reversed
        want = np.convolve(2 * (y - d["z"]), d["c"][::-1], mode="full")
        np.testing.assert_allclose(gx, want, rtol=1e-10, atol=1e-12)
    assert len(compiles) == 1  # the plan and the kernel are reused


@pytest.mark.parametrize("which", sorted(PROGRAMS))
def test_jvp_and_vjp_with_value_are_one_kernel_each(compiles, which):
    _, prog, wrt, data = PROGRAMS[which]()
    x = wrt[0]
    data = {v.name: data[v.name] for v in tl.ir.input_vars(prog)}
    rng = np.random.default_rng(3)
    dx = rng.standard_normal(data[x.name].shape)
    jv = tl.jvp(prog, wrt=x)
    val, tan = jv(**data, **{"d" + x.name: dx})
    assert len(compiles) == 1
    want_val = tl.evaluate(prog, **data)
    np.testing.assert_allclose(val, want_val, rtol=1e-12, atol=1e-12)
    # the tangent against central differences of the evaluator
    h = 1e-6
    fd = (tl.evaluate(prog, **{**data, x.name: data[x.name] + h * dx})
          - tl.evaluate(prog, **{**data, x.name: data[x.name] - h * dx})) / (2 * h)
    np.testing.assert_allclose(tan, fd, rtol=1e-5, atol=1e-6)

    dy = rng.standard_normal(np.shape(want_val))
    vj = tl.vjp(prog, wrt=x, with_value=True)
    val2, ct = vj(**data, dy=dy)
    assert len(compiles) == 2  # one more kernel, for the vjp
    np.testing.assert_allclose(val2, want_val, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ct, tl.vjp(prog, wrt=x)(**data, dy=dy), rtol=1e-12, atol=1e-12)
    # dot-product test: <J dx, dy> = <dx, J^T dy>
    assert np.sum(tan * dy) == pytest.approx(np.sum(dx * ct), rel=1e-9, abs=1e-9)


def test_value_and_grad_on_the_evaluator_runtime(monkeypatch):
    """The same one program, run by the reference evaluator, gives the same pair."""
    monkeypatch.setenv("TENSORLANG_RUNTIME", "evaluator")
    loss, _, (x, c), data = deconv()
    val, (gx, gc) = tl.value_and_grad(loss, wrt=[x, c])(**data)
    assert val == pytest.approx(tl.evaluate(loss, **data), rel=1e-12)
    f = lambda **d: tl.evaluate(loss, **d)  # noqa: E731
    np.testing.assert_allclose(gc, fd_grad(f, data, "c"), rtol=1e-5, atol=1e-6)
