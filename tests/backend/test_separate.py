"""Boundary pieces separated from interiors (issue #13 item 3; backend separate.py).

From the kernel IR: the 5-point Laplacian's gradient has an interior loop
whose body tests nothing, and the deconvolution's inner loops are
branch-free.  Values are checked against NumPy.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.loopir import If, Loop, Store, loops, walk_stmts
from tests.stencils import laplacian_energy


def _innermost(ir):
    return [lp for lp in loops(ir.body) if not any(isinstance(s, Loop) for s in walk_stmts(lp.body))]


def _laplacian_grad_ref(u):
    s = 2.0 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1])
    g = np.zeros_like(u)
    g[1:-1, 1:-1] -= 4.0 * s
    g[:-2, 1:-1] += s
    g[2:, 1:-1] += s
    g[1:-1, :-2] += s
    g[1:-1, 2:] += s
    return g


def test_laplacian_gradient_interior_loop_is_branch_free():
    loss, u = laplacian_energy()
    ir = tl.compile(tl.grad(loss, wrt=[u]).program).loop_ir
    out = ir.results[0]
    writers = [lp for lp in _innermost(ir) if any(isinstance(s, Store) and s.array == out for s in lp.body)]
    assert writers
    interior = [lp for lp in writers if not any(isinstance(s, If) for s in walk_stmts(lp.body))]
    # the interior copy reads all five shifted cotangents with no test
    assert any(len([s for s in lp.body if isinstance(s, Store)]) == 1 and str(lp.body).count("Load(") >= 5 for lp in interior)
    # and the boundary copies still test (they are where the brackets fail)
    assert any(any(isinstance(s, If) for s in walk_stmts(lp.body)) for lp in loops(ir.body))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_laplacian_gradient_matches_numpy(n):
    loss, u = laplacian_energy()
    g = tl.grad(loss, wrt=[u])
    x = np.random.default_rng(n).normal(size=(n, n))
    np.testing.assert_allclose(g(u=x), _laplacian_grad_ref(x), rtol=1e-12, atol=1e-12)


def test_deconvolution_inner_loops_are_branch_free():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.let(conv, lambda y: tl.sum(n, lambda i: (y[i] - z[i]) ** 2))
    g = tl.grad(loss, wrt=[x, c])
    ir = tl.compile(g.program).loop_ir
    for lp in _innermost(ir):
        assert not any(isinstance(s, If) for s in walk_stmts(lp.body)), lp
    rng = np.random.default_rng(0)
    xx, cc, zz = rng.normal(size=20), rng.normal(size=5), rng.normal(size=16)
    r = 2.0 * (np.convolve(xx, cc, mode="valid") - zz)
    gx, gc = g(x=xx, c=cc, z=zz)
    np.testing.assert_allclose(gx, np.convolve(r, cc[::-1], mode="full"), rtol=1e-12)
    np.testing.assert_allclose(gc, np.correlate(xx, r, mode="valid")[::-1], rtol=1e-12)


def test_separated_sum_matches_numpy():
    # a bracket on a sum's own index: the sum's interior piece is branch-free too
    n = tl.size("n")
    x = tl.tensor("x", n)
    f = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson((j >= 1) & (j + 1 < n), x[j - 1] * x[j + 1]) + x[j] * x[i]))
    k = tl.compile(f)
    xx = np.random.default_rng(2).normal(size=9)
    ref = np.array([(xx[:-2] * xx[2:]).sum() + xx.sum() * xx[i] for i in range(9)])
    np.testing.assert_allclose(k(x=xx), ref, rtol=1e-12)
