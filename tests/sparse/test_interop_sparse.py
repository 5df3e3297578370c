"""Sparse tensors through the JAX / PyTorch / SciPy bridges (issue 16 with 18).

Oracles: the closed-form gradient of the sparse least-squares loss computed
with scipy.sparse (dA = 2 r x^T on A's pattern, dx = 2 A^T r), JAX's own
BCOO autodiff of the same loss, and PyTorch's dense autograd restricted to
the pattern.  Every bridge must hand the cotangent back in the framework's
own sparse type, on the input's own stored entries.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import tensorlang as tl

n, m = tl.sizes("n m")
S = tl.relation("S", n, m)
A = tl.sparse_tensor("A", S)
x = tl.tensor("x", m)
b = tl.tensor("b", n)
r = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j]) - b[i])
lsq = tl.sum(n, lambda i: r[i] * r[i])
Ax = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j]))

N, M = 9, 6


def data(seed=0, density=0.35):
    rng = np.random.default_rng(seed)
    Am = sp.random(N, M, density=density, random_state=seed, format="coo")
    return Am, rng.normal(size=M), rng.normal(size=N)


def reference(Am, xv, bv):
    """Value, dA on A's pattern (csr, sorted) and dx, from scipy.sparse."""
    Ac = Am.tocsr()
    Ac.sum_duplicates()
    res = Ac @ xv - bv
    rows = np.repeat(np.arange(N), np.diff(Ac.indptr))
    dA = sp.csr_matrix((2 * res[rows] * xv[Ac.indices], Ac.indices, Ac.indptr), shape=Ac.shape)
    return float(res @ res), dA, 2 * (Ac.T @ res)


# ---------------------------------------------------------------------------
# PyTorch


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_torch_sparse_input_gets_a_sparse_gradient_on_its_pattern(layout):
    torch = pytest.importorskip("torch")
    Am, xv, bv = data()
    At = torch.sparse_coo_tensor(np.stack([Am.row, Am.col]), Am.data, (N, M), check_invariants=True)
    if layout == "csr":
        At = At.to_sparse_csr()
    At.requires_grad_(True)
    xt = torch.tensor(xv, requires_grad=True)
    F = tl.torch_function(lsq)
    val = F(A=At, x=xt, b=torch.tensor(bv))
    val.backward()
    v_ref, dA_ref, dx_ref = reference(Am, xv, bv)
    assert np.isclose(val.item(), v_ref, rtol=1e-12)
    g = At.grad
    assert g.layout == At.layout  # sparse in, sparse (same layout) out: never densified
    gd = g.to_dense().numpy()
    assert np.allclose(gd, dA_ref.toarray(), rtol=1e-12, atol=1e-12)
    assert g.to_sparse_coo()._nnz() == dA_ref.nnz  # exactly the stored entries
    assert np.allclose(xt.grad.numpy(), dx_ref, rtol=1e-12)


def test_torch_sparse_tensor_output_vjp_and_float32():
    torch = pytest.importorskip("torch")
    Am, xv, _ = data(1)
    At = torch.sparse_coo_tensor(np.stack([Am.row, Am.col]), Am.data.astype(np.float32), (N, M),
                                 check_invariants=True).requires_grad_(True)
    xt = torch.tensor(xv.astype(np.float32), requires_grad=True)
    F = tl.torch_function(Ax)
    w = np.random.default_rng(2).normal(size=N).astype(np.float32)
    y = F(A=At, x=xt)
    assert y.dtype == torch.float32
    (y * torch.tensor(w)).sum().backward()
    Ac = Am.tocsr()
    rows = np.repeat(np.arange(N), np.diff(Ac.indptr))
    assert At.grad.dtype == torch.float32
    dA = At.grad.coalesce()
    idx = dA.indices().numpy()
    assert np.allclose(dA.values().numpy(), w[idx[0]] * xv[idx[1]], rtol=1e-5)
    assert sorted(zip(*idx)) == sorted(zip(rows, Ac.indices))
    assert np.allclose(xt.grad.numpy(), Ac.T @ w, rtol=1e-5)


def test_torch_sparse_with_dense_dimensions_is_refused():
    torch = pytest.importorskip("torch")
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(2, M), (N, M))
    F = tl.torch_function(lsq)
    with pytest.raises(tl.TensorLangError, match="dense dimension"):
        F(A=hybrid, x=torch.zeros(M), b=torch.zeros(N))


# ---------------------------------------------------------------------------
# JAX


def test_jax_bcoo_cotangent_follows_the_callers_indices(jax64):
    jax = jax64
    jnp = jax.numpy
    sparse = pytest.importorskip("jax.experimental.sparse")
    Am, xv, bv = data(3)
    idx = np.stack([Am.row, Am.col], 1)
    # unsorted, with two duplicated coordinates (their values add up, as BCOO defines)
    idx = np.concatenate([idx, idx[:2]])[::-1].copy()
    vals = np.concatenate([Am.data, [0.5, -0.25]])[::-1].copy()
    Ab = sparse.BCOO((jnp.array(vals), jnp.array(idx)), shape=(N, M))
    f = tl.jax_function(lsq)

    def ours(A_, x_):
        return f(A=A_, x=x_, b=bv)

    def theirs(A_, x_):
        return jnp.sum((A_ @ x_ - bv) ** 2)

    for wrap in (lambda h: h, jax.jit):
        v, (gA, gx) = wrap(sparse.value_and_grad(ours, argnums=(0, 1)))(Ab, xv)
        v_ref, (gA_ref, gx_ref) = sparse.value_and_grad(theirs, argnums=(0, 1))(Ab, xv)
        assert np.isclose(v, v_ref, rtol=1e-12)
        assert np.allclose(gA.data, gA_ref.data, rtol=1e-10)
        assert np.array_equal(np.asarray(gA.indices), idx)
        assert np.allclose(gx, gx_ref, rtol=1e-10)


def test_jax_bcoo_tensor_output_vjp(jax64):
    jax = jax64
    jnp = jax.numpy
    sparse = pytest.importorskip("jax.experimental.sparse")
    Am, xv, _ = data(4)
    Ab = sparse.BCOO.fromdense(jnp.array(Am.toarray()))
    fy = tl.jax_function(Ax)

    def h(d):
        return jnp.sum(jnp.sin(fy(A=sparse.BCOO((d, Ab.indices), shape=Ab.shape), x=xv)))

    def h_ref(d):
        return jnp.sum(jnp.sin(sparse.BCOO((d, Ab.indices), shape=Ab.shape) @ xv))

    assert np.allclose(jax.grad(h)(Ab.data), jax.grad(h_ref)(Ab.data), rtol=1e-10)


def test_jax_bcoo_with_batch_dimensions_is_refused(jax64):
    jnp = jax64.numpy
    sparse = pytest.importorskip("jax.experimental.sparse")
    batched = sparse.BCOO.fromdense(jnp.ones((2, N, M)), n_batch=1)
    f = tl.jax_function(Ax)
    with pytest.raises(tl.TensorLangError, match="batch or dense"):
        f(A=batched, x=np.zeros(M))


# ---------------------------------------------------------------------------
# SciPy


def test_scipy_objective_optimises_the_stored_values_only():
    opt = pytest.importorskip("scipy.optimize")
    Am, xv, bv = data(5, density=0.5)
    ridge = lsq + tl.sum(n, lambda i: tl.sum(m, lambda j: A[i, j] * A[i, j]))
    obj = tl.scipy_objective(ridge, wrt=[A], x=xv, b=bv)
    x0 = obj.x0(A=Am)
    Ac = Am.tocsr()
    Ac.sum_duplicates()
    assert x0.shape == (Ac.nnz,)  # nnz unknowns, not N*M
    val, g = obj(x0)
    v_ref, dA_ref, _ = reference(Am, xv, bv)
    assert np.isclose(val, v_ref + np.sum(Ac.data ** 2), rtol=1e-12)
    assert np.allclose(g, dA_ref.data + 2 * Ac.data, rtol=1e-12)
    res = opt.minimize(obj, x0, jac=True, method="L-BFGS-B", options=dict(gtol=1e-12, ftol=1e-15, maxiter=2000))
    sol = obj.unflatten(res.x)["A"]
    assert sp.issparse(sol) and sol.nnz == Ac.nnz
    assert np.array_equal(sol.indptr, Ac.indptr) and np.array_equal(sol.indices, Ac.indices)
    # the minimiser is stationary on the pattern (checked with the independent formula)
    _, dA_sol, _ = reference(sol.tocoo(), xv, bv)
    assert np.abs(dA_sol.data + 2 * sol.data).max() < 1e-6


def test_scipy_objective_on_a_fixed_relation_larger_than_the_start():
    pytest.importorskip("scipy.optimize")
    Am, xv, bv = data(6, density=0.3)
    mask = Am.toarray() != 0
    mask[0, :] = True  # the relation holds on a whole extra row the start leaves at 0
    obj = tl.scipy_objective(lsq, wrt=[A], x=xv, b=bv, S=mask)
    x0 = obj.x0(A=Am)
    assert x0.shape == (int(mask.sum()),)
    val, g = obj(x0)
    dense = Am.toarray()
    res = dense @ xv - bv
    assert np.isclose(val, res @ res, rtol=1e-12)
    assert np.allclose(g, (2 * np.outer(res, xv))[mask], rtol=1e-12)


def test_scipy_objective_needs_a_pattern_for_a_sparse_input():
    pytest.importorskip("scipy.optimize")
    _, xv, bv = data()
    obj = tl.scipy_objective(lsq, wrt=[A], x=xv, b=bv)
    with pytest.raises(tl.TensorLangError, match="stored entries"):
        obj.x0()
