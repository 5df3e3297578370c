"""A cheap producer read by several consumers at their own point is computed
in each of them, not stored (backend/own_point.py; issue #13 items 2 and 5).

Structural checks on the kernel IR (how many allocations have two
size-dependent extents), values against NumPy: the Laplacian prior's
``value_and_grad`` against the dense operator ``|A u|² + |u - f|²``.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.loopir import Alloc, walk_stmts


pytestmark = pytest.mark.usefixtures("compiled_kernel_cache")  # tests/backend/conftest.py


n = tl.size("n")


def _square_allocs(program) -> int:
    ir = tl.compile(program).loop_ir
    allocs = list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]
    # an allocation is listed in ``ir.allocs`` and met again in the body: count names
    return len({a.name for a in allocs if sum(1 for d in a.shape if not isinstance(d, K.Int)) >= 2})


def laplacian_prior():
    u, f = tl.tensor("u", n, n), tl.tensor("f", n, n)
    inner = lambda i, j: (i >= 1) & (i < n - 1) & (j >= 1) & (j < n - 1)  # noqa: E731
    lap = lambda i, j: 4 * u[i, j] - u[i - 1, j] - u[i + 1, j] - u[i, j - 1] - u[i, j + 1]  # noqa: E731
    loss = tl.sum([n, n], lambda i, j: tl.iverson(inner(i, j), lap(i, j) ** 2) + (u[i, j] - f[i, j]) ** 2)
    return loss, u


def _operator(N):
    """The interior 5-point Laplacian as a dense (N², N²) matrix."""
    A = np.zeros((N * N, N * N))
    for i in range(1, N - 1):
        for j in range(1, N - 1):
            r = i * N + j
            A[r, r] = 4
            for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                A[r, (i + di) * N + j + dj] = -1
    return A


def test_value_and_grad_keeps_no_more_square_arrays_than_grad():
    loss, u = laplacian_prior()
    g = tl.grad(loss, wrt=u)
    vg = tl.value_and_grad(loss, wrt=u)
    # grad: the gradient and one 2·L u array (read by the transposed stencil);
    # value_and_grad before the rule also stored u - f, L u and 2·L u
    assert _square_allocs(g.program) == 2
    assert _square_allocs(vg.program) == 2


@pytest.mark.parametrize("N", [1, 2, 3, 5, 17])
def test_value_and_grad_matches_the_dense_operator(N):
    loss, u = laplacian_prior()
    rng = np.random.default_rng(N)
    uu, ff = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    A = _operator(N)
    x = uu.ravel()
    want_v = float(np.sum((A @ x) ** 2) + np.sum((uu - ff) ** 2))
    want_g = (2 * A.T @ (A @ x) + 2 * (x - ff.ravel())).reshape(N, N)
    val, grad = tl.value_and_grad(loss, wrt=u)(u=uu, f=ff)
    np.testing.assert_allclose(val, want_v, rtol=1e-12)
    np.testing.assert_allclose(grad, want_g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tl.grad(loss, wrt=u)(u=uu, f=ff), want_g, rtol=1e-12, atol=1e-12)


def _shared(body):
    """``(Σ t², gen 3·t)`` with ``t = gen[i, j] body(i, j)`` read by both."""
    u, f = tl.tensor("u", n, n), tl.tensor("f", n, n)
    t = tl.gen([n, n], lambda i, j: body(u, f, i, j))
    return tl.let(t, lambda t: tl.pair(tl.sum([n, n], lambda i, j: t[i, j] * t[i, j]),
                                       tl.gen([n, n], lambda i, j: 3 * t[i, j])))


def _check(prog, ref_t):
    rng = np.random.default_rng(0)
    uu, ff = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    s, g = tl.compile(prog)(u=uu, f=ff)
    t = ref_t(uu, ff)
    np.testing.assert_allclose(s, np.sum(t * t), rtol=1e-12)
    np.testing.assert_allclose(g, 3 * t, rtol=1e-12)


def test_cheap_pointwise_producer_is_computed_in_each_consumer():
    prog = _shared(lambda u, f, i, j: u[i, j] - 2 * f[i, j])
    assert _square_allocs(prog) == 1  # the result only
    _check(prog, lambda u, f: u - 2 * f)


def test_a_producer_calling_a_function_is_stored():
    # tanh computed again in each consumer made the MLP's value_and_grad 1.5x slower
    prog = _shared(lambda u, f, i, j: tl.tanh(u[i, j]) * f[i, j])
    assert _square_allocs(prog) == 2
    _check(prog, lambda u, f: np.tanh(u) * f)


def test_a_producer_read_at_a_shift_is_not_an_own_point_use():
    u, f = tl.tensor("u", n, n), tl.tensor("f", n, n)
    t = tl.gen([n, n], lambda i, j: u[i, j] - f[i, j])
    prog = tl.let(t, lambda t: tl.pair(
        tl.sum([n, n], lambda i, j: t[i, j] * t[i, j]),
        tl.gen([n, n], lambda i, j: tl.iverson(i >= 1, t[i - 1, j]) + t[i, j])))
    assert _square_allocs(prog) == 2
    rng = np.random.default_rng(1)
    uu, ff = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    s, g = tl.compile(prog)(u=uu, f=ff)
    d = uu - ff
    want = d.copy()
    want[1:] += d[:-1]
    np.testing.assert_allclose(s, np.sum(d * d), rtol=1e-12)
    np.testing.assert_allclose(g, want, rtol=1e-12)
