"""No materialised n x m intermediates (issue #13 item 2; backend scatter.py and contract.py).

Structural: the kernel IR of the n-body gradient allocates nothing with two
size-dependent extents.  Values: every kernel is checked against NumPy.
"""

import numpy as np
import pytest

import tensorlang as tl
from tests.nbody import nbody, nbody_grad_ref
from tensorlang.backend import kir as K
from tensorlang.backend.contract import contract, fuse_loops
from tensorlang.backend.loopir import Alloc, Assign, Loop, Store, loops, walk_stmts



def _sized_dims(alloc) -> int:
    return sum(1 for d in alloc.shape if not isinstance(d, K.Int))


def _allocs(ir):
    return list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]




def test_nbody_gradient_allocates_no_n_by_n_temporary():
    loss, p = nbody()
    g = tl.grad(loss, wrt=[p])
    ir = tl.compile(g.program).loop_ir
    big = [a for a in _allocs(ir) if _sized_dims(a) >= 2]
    assert big == [], big
    # the pair loop accumulates into the two O(n) partial results: it runs serially
    assert any(lp.kind == "scatter" for lp in loops(ir.body))


@pytest.mark.parametrize("n", [1, 2, 3, 9, 40])
def test_nbody_gradient_matches_numpy(n):
    loss, p = nbody()
    g = tl.grad(loss, wrt=[p])
    x = np.random.default_rng(n).uniform(-1, 1, (n, 3))
    np.testing.assert_allclose(np.asarray(g(p=x)), nbody_grad_ref(x), rtol=1e-12, atol=1e-12)


def test_rectangular_pairwise_gradient_rows_and_columns():
    # sum_ij exp(-(u_i - v_j)^2): d/du reduces the pair term over j, d/dv over i
    n, m = tl.size("n"), tl.size("m")
    u, v = tl.tensor("u", n), tl.tensor("v", m)
    loss = tl.sum([n, m], lambda i, j: tl.exp(-((u[i] - v[j]) ** 2)))
    g = tl.grad(loss, wrt=[u, v])
    ir = tl.compile(g.program).loop_ir
    assert [a for a in _allocs(ir) if _sized_dims(a) >= 2] == []
    rng = np.random.default_rng(3)
    uu, vv = rng.normal(size=7), rng.normal(size=5)
    d = uu[:, None] - vv[None, :]
    e = -2 * d * np.exp(-(d**2))
    gu, gv = g(u=uu, v=vv)
    np.testing.assert_allclose(gu, e.sum(1), rtol=1e-12)
    np.testing.assert_allclose(gv, -e.sum(0), rtol=1e-12)


def test_shifted_reads_are_not_fused():
    # B[i] = A[i - 1] reads another iteration's element: the nests must stay apart
    n = K.Name("n0")
    a = Loop("i0", K.Int(0), n, 1, (Store("t0", (K.Name("i0"),), K.Load("x0", (K.Name("i0"),))),), "gen")
    shifted = (K.IBin("-", K.Name("i1"), K.Int(1)),)
    b = Loop("i1", K.Int(1), n, 1, (Store("t1", (K.Name("i1"),), K.Load("t0", shifted)),), "gen")
    assert len(fuse_loops([a, b])) == 2
    same = Loop("i1", K.Int(0), n, 1, (Store("t1", (K.Name("i1"),), K.Load("t0", (K.Name("i1"),))),), "gen")
    fused = fuse_loops([a, same])
    assert len(fused) == 1 and len(fused[0].body) == 2
    # t0 is then touched only at the iteration's own element: a scalar local
    allocs = [Alloc("t0", (n,), False, "temporary", "a"), Alloc("t1", (n,), False, "output", "b")]
    body, gone = contract([allocs[0]] + fused, allocs, {"t1"}, iter(["v9"]).__next__)
    assert gone == {"t0"}
    (lp,) = body
    assert isinstance(lp.body[1], Assign) and lp.body[1].target == "v9"
    assert lp.body[2] == Store("t1", (K.Name("i0"),), K.Name("v9"))


def test_shifted_consumer_still_correct():
    # a pair intermediate read by a shifted consumer is materialised, and right
    n = tl.size("n")
    x = tl.tensor("x", n)
    pair = tl.gen([n, n], lambda i, j: tl.sin(x[i] * x[j]))
    loss = tl.let(pair, lambda P: tl.sum([n - 1, n], lambda i, j: P[i + 1, j] * P[i, j]))
    g = tl.grad(loss, wrt=[x])
    xx = np.random.default_rng(1).normal(size=6)
    h = 1e-6
    fd = np.array([(tl.compile(loss)(x=xx + h * e) - tl.compile(loss)(x=xx - h * e)) / (2 * h) for e in np.eye(6)])
    np.testing.assert_allclose(g(x=xx), fd, rtol=1e-6, atol=1e-8)


def test_sparse_least_squares_reads_values_in_order_and_matches_scipy():
    # dx[j] = sum_i [S(i,j)] A[i,j] r[i] runs over S in row order: no CSC permutation
    sp = pytest.importorskip("scipy.sparse")
    n, m = tl.sizes("n m")
    S = tl.relation("S", n, m)
    A = tl.sparse_tensor("A", S)
    x, b = tl.tensor("x", m), tl.tensor("b", n)
    r = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j]) - b[i])
    loss = tl.let(r, lambda r: tl.sum(n, lambda i: r[i] * r[i]))
    g = tl.grad(loss, wrt=[x, A])
    k = tl.compile(g.program)
    assert k.spec["relation_orders"] == []  # no permutation of the values
    # by columns, only the pointers remain (dx is zero on empty columns); no column array
    assert all(cols == [] for _, perm, _, cols in k.spec["relations"] if perm != sorted(perm))
    M = sp.random(30, 20, density=0.2, random_state=4, format="csr")
    rng = np.random.default_rng(4)
    xv, bv = rng.normal(size=20), rng.normal(size=30)
    gx, gA = g(A=M, x=xv, b=bv)
    res = M @ xv - bv
    np.testing.assert_allclose(gx, 2 * (M.T @ res), rtol=1e-12, atol=1e-12)
    coo = M.tocoo()
    want = sp.csr_matrix((2 * res[coo.row] * xv[coo.col], (coo.row, coo.col)), shape=M.shape)
    np.testing.assert_allclose(gA.toarray(), want.toarray(), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        gA.indices[0] = 1  # the pattern is shared read-only with the prepared relation
