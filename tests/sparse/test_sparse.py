"""Sparse tensors stored on relations, and prepared relation data (issue 16;
issue 13 item 1).

Oracles: scipy.sparse / NumPy references written independently of
tensorlang, central finite differences along sparse directions, the
dot-product test <J v, w> = <v, J^T w> with sparse tangents, and the cost
model's nnz symbols.  Kernels run with runtime="compiled" (no evaluator).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import tensorlang as tl
from tensorlang.runtime import make_callable
from tensorlang.sparse import RelationData, relation_data

SETTINGS = dict(max_examples=20, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


def _lsq():
    n, m = tl.sizes("n m")
    S = tl.relation("S", n, m)
    A = tl.sparse_tensor("A", S)
    x, b = tl.tensor("x", m), tl.tensor("b", n)
    r = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j]) - b[i])
    return tl.sum(n, lambda i: r[i] * r[i]), S, A, x, b


def _data(n=40, m=30, density=0.15, seed=0, fmt="csr"):
    rng = np.random.default_rng(seed)
    M = sp.random(n, m, density=density, random_state=seed, format=fmt)
    return M, rng.normal(size=m), rng.normal(size=n)


def _ref_grads(M, x, b):
    M = sp.csr_matrix(M)
    res = M @ x - b
    coo = M.tocoo()
    gA = sp.csr_matrix((2 * res[coo.row] * x[coo.col], (coo.row, coo.col)), shape=M.shape)
    return float(res @ res), 2 * (M.T @ res), gA


def _same_pattern(a, b):
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    a.sort_indices(), b.sort_indices()
    return np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)


# -- values and gradients ---------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil", "dok"])
def test_least_squares_value_and_gradients_match_scipy(fmt):
    loss, S, A, x, b = _lsq()
    M, xv, bv = _data(fmt=fmt)
    val, gx_ref, gA_ref = _ref_grads(M, xv, bv)
    assert np.isclose(tl.evaluate(loss, A=M, x=xv, b=bv), val)
    assert np.isclose(tl.compile(loss)(A=M, x=xv, b=bv), val)
    v, (gx, gA) = tl.value_and_grad(loss, wrt=[x, A])(A=M, x=xv, b=bv)
    assert np.isclose(v, val)
    assert np.allclose(gx, gx_ref)
    assert isinstance(gA, sp.csr_matrix)
    assert _same_pattern(gA, M) and gA.nnz == sp.csr_matrix(M).nnz
    assert np.allclose(gA.toarray(), gA_ref.toarray())


def test_coords_values_input_and_given_relation():
    loss, S, A, x, b = _lsq()
    M, xv, bv = _data()
    coo = M.tocoo()
    coords = np.stack([coo.row, coo.col], axis=1)
    val, gx_ref, gA_ref = _ref_grads(M, xv, bv)
    # (coords, values) needs the shape: from S's data, or from the sizes
    g = tl.grad(loss, wrt=A)
    gA = g(A=(coords, coo.data), S=M != 0, x=xv, b=bv)
    assert np.allclose(gA.toarray(), gA_ref.toarray())
    gA2 = g(A=(coords[::-1], coo.data[::-1]), n=40, m=30, x=xv, b=bv)  # unsorted rows
    assert np.allclose(gA2.toarray(), gA_ref.toarray())


def test_explicit_zeros_are_stored_entries_and_duplicates_sum():
    loss, S, A, x, b = _lsq()
    rows = np.array([0, 0, 1, 2, 2])
    cols = np.array([1, 1, 0, 2, 0])
    vals = np.array([1.0, 2.0, 0.0, 4.0, -1.0])  # (0,1) twice: 3.0; (1,0) an explicit zero
    M = sp.coo_matrix((vals, (rows, cols)), shape=(3, 3))
    xv, bv = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    dense = np.zeros((3, 3))
    np.add.at(dense, (rows, cols), vals)
    res = dense @ xv - bv
    gA = tl.grad(loss, wrt=A)(A=M, x=xv, b=bv)
    assert gA.nnz == 4  # the explicit zero at (1, 0) is part of the pattern
    assert set(zip(*gA.nonzero())) <= {(0, 1), (1, 0), (2, 0), (2, 2)}
    assert np.isclose(gA[1, 0], 2 * res[1] * xv[0])
    assert np.isclose(tl.evaluate(loss, A=M, x=xv, b=bv), res @ res)


def test_relation_pattern_wider_than_tensor_fills_zeros():
    loss, S, A, x, b = _lsq()
    M, xv, bv = _data()
    mask = (M != 0).toarray()
    mask[0, :] = True  # S holds on a whole extra row
    gA = tl.grad(loss, wrt=A)(A=M, S=mask, x=xv, b=bv)
    assert gA.nnz == mask.sum()  # exactly S's pattern
    res = M @ xv - bv
    assert np.allclose(gA.toarray()[0], 2 * res[0] * xv)


def test_vjp_and_jvp_with_sparse_tangent_dot_product():
    n, m = tl.sizes("n m")
    S = tl.relation("S", n, m)
    A = tl.sparse_tensor("A", S)
    x = tl.tensor("x", m)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: tl.tanh(A[i, j]) * x[j]))
    M, xv, _ = _data(n=70, m=66)
    rng = np.random.default_rng(3)
    V = M.copy()
    V.data = rng.normal(size=V.nnz)  # a sparse tangent on the same pattern
    w = rng.normal(size=70)
    val, jv = tl.jvp(y, wrt=A)(A=M, x=xv, dA=V)
    T = M.toarray()
    assert np.allclose(val, np.tanh(T) * (T != 0) @ xv)
    jtw = tl.vjp(y, wrt=A)(A=M, x=xv, dy=w)
    assert isinstance(jtw, sp.csr_matrix) and _same_pattern(jtw, M)
    assert np.isclose(jv @ w, np.sum(V.multiply(jtw)))  # <J v, w> = <v, J^T w>
    h = 1e-6
    Mp, Mm = M.copy(), M.copy()
    Mp.data = M.data + h * V.data
    Mm.data = M.data - h * V.data
    fd = (tl.evaluate(y, A=Mp, x=xv) - tl.evaluate(y, A=Mm, x=xv)) / (2 * h)
    assert np.allclose(fd, jv, atol=1e-6)


def test_vector_on_unary_relation():
    n = tl.size("n")
    R = tl.relation("R", n)
    v = tl.sparse_tensor("v", R)
    x = tl.tensor("x", n)
    loss = tl.sum(n, lambda i: v[i] * x[i] * x[i])
    coords = np.array([[3], [0], [7]])
    vals = np.array([1.0, 2.0, -1.0])
    xv = np.arange(70.0) / 10
    ref = sum(c * xv[k] ** 2 for (k,), c in zip(coords, vals))
    assert np.isclose(tl.evaluate(loss, v=(coords, vals), x=xv), ref)
    gx, (gc, gv) = tl.grad(loss, wrt=[x, v])(v=(coords, vals), x=xv)
    exp_gx = np.zeros(70)
    exp_gx[[3, 0, 7]] = 2 * vals * xv[[3, 0, 7]]
    assert np.allclose(gx, exp_gx)
    assert np.array_equal(gc[:, 0], [0, 3, 7]) and np.allclose(gv, xv[[0, 3, 7]] ** 2)


# -- bad data ---------------------------------------------------------------------


def test_bad_data_is_an_input_error_naming_the_input():
    loss, S, A, x, b = _lsq()
    M, xv, bv = _data()
    f = tl.compile(loss)
    with pytest.raises(tl.InputError, match="A"):
        f(A=M, x=np.zeros(31), b=bv)  # shape mismatch against x
    other = sp.random(40, 30, density=0.1, random_state=9, format="csr")
    with pytest.raises(tl.InputError, match="sparse tensor A stores an entry"):
        f(A=M, S=other != 0, x=xv, b=bv)  # wrong pattern
    with pytest.raises(tl.InputError, match="sparse tensor A: coordinates contain NaN"):
        f(A=(np.array([[0.0, np.nan]]), np.array([1.0])), n=40, m=30, x=xv, b=bv)
    with pytest.raises(tl.InputError, match="sparse tensor A: a coordinate is negative"):
        f(A=(np.array([[0, -1]]), np.array([1.0])), n=40, m=30, x=xv, b=bv)
    with pytest.raises(tl.InputError, match="sparse tensor A"):
        f(A=(np.array([[0, 30]]), np.array([1.0])), n=40, m=30, x=xv, b=bv)  # out of range
    with pytest.raises(tl.InputError, match="sparse tensor A"):
        f(A=M.toarray(), x=xv, b=bv)  # dense data for a sparse tensor
    bad = M.copy()
    bad.data[0] = np.nan
    with pytest.raises(tl.InputError, match="NaN"):
        f(A=bad, x=xv, b=bv)
    with pytest.raises(tl.InputError, match="shape"):
        f(A=M, S=np.ones((40, 31), bool), x=xv, b=bv)


# -- relation data ----------------------------------------------------------------


def test_relation_data_is_prepared_once_per_array_and_never_stale():
    mask = np.random.default_rng(0).random((50, 40)) < 0.1
    a = relation_data(mask)
    assert isinstance(a, RelationData) and relation_data(mask) is a  # cached by the array
    assert np.array_equal(a.dense(), mask)
    mask[0, 0] = not mask[0, 0]  # mutated in place: converted again
    b = relation_data(mask)
    assert b is not a and np.array_equal(b.dense(), mask)
    coo = sp.coo_matrix(mask)
    assert np.array_equal(relation_data(coo).coords, b.coords)
    csc = sp.csc_matrix(mask)
    assert np.array_equal(relation_data(csc).coords, b.coords)  # sorted row-major
    rows = np.argwhere(mask)
    assert np.array_equal(relation_data(rows[::-1].copy()).coords, b.coords)


def test_relation_data_object_in_a_plain_relation_program():
    n, m = tl.sizes("n m")
    R = tl.relation("R", n, m)
    X = tl.tensor("X", n, m)
    loss = tl.sum([n, m], lambda i, j: tl.iverson(R(i, j), X[i, j] * X[i, j]))
    mask = np.random.default_rng(1).random((70, 65)) < 0.2
    Xv = np.random.default_rng(2).normal(size=(70, 65))
    rd = tl.relation_data(mask)
    ref = np.sum(Xv[mask] ** 2)
    assert np.isclose(tl.compile(loss)(R=rd, X=Xv), ref)
    assert np.isclose(tl.evaluate(loss, R=sp.csr_matrix(mask), X=Xv), ref)
    g = tl.grad(loss, wrt=X)(R=rd, X=Xv)
    assert np.allclose(g, 2 * Xv * mask)


# -- random programs --------------------------------------------------------------


@settings(**SETTINGS)
@given(st.integers(0, 10_000), st.sampled_from(["tanh", "square", "mul"]), st.booleans())
def test_random_sparse_programs_agree_with_numpy(seed, op, transposed):
    n, m = tl.sizes("n m")
    S = tl.relation("S", n, m)
    A = tl.sparse_tensor("A", S)
    x = tl.tensor("x", m if not transposed else n)
    f = {"tanh": tl.tanh, "square": lambda t: t * t, "mul": lambda t: 3.0 * t}[op]
    npf = {"tanh": np.tanh, "square": lambda t: t * t, "mul": lambda t: 3.0 * t}[op]
    if transposed:  # y_j = sum_i f(A_ij) x_i: the loop reads A by columns
        y = tl.gen(m, lambda j: tl.sum(n, lambda i: f(A[i, j]) * x[i]))
    else:
        y = tl.gen(n, lambda i: tl.sum(m, lambda j: f(A[i, j]) * x[j]))
    rng = np.random.default_rng(seed)
    nn, mm = int(rng.integers(1, 80)), int(rng.integers(64, 80))
    M = sp.random(nn, mm, density=float(rng.uniform(0, 0.3)), random_state=seed, format="csr")
    xv = rng.normal(size=mm if not transposed else nn)
    T = M.toarray()
    FT = npf(T) * (T != 0) if True else None
    ref = FT.T @ xv if transposed else FT @ xv
    assert np.allclose(tl.compile(y)(A=M, x=xv), ref)
    w = rng.normal(size=len(ref))
    gA = tl.vjp(y, wrt=A)(A=M, x=xv, dy=w)
    dF = {"tanh": 1 - np.tanh(T) ** 2, "square": 2 * T, "mul": 3.0 * np.ones_like(T)}[op]
    outer = np.outer(xv, w) if transposed else np.outer(w, xv)
    exp = dF * outer * (T != 0)
    assert _same_pattern(gA, M)
    assert np.allclose(gA.toarray(), exp)


# -- kernels: O(nnz) memory, packed temporaries, fallbacks ------------------------------


def _dirichlet(bracket: bool):
    n = tl.size("n")
    E = tl.relation("E", n, n)
    W = tl.sparse_tensor("W", E)
    u = tl.tensor("u", n)

    def term(i, j):
        t = W[i, j] * (u[i] - u[j]) * (u[i] - u[j])
        return tl.iverson(E(i, j), t) if bracket else t

    return tl.sum([n, n], term), W, u


@pytest.mark.parametrize("bracket", [False, True])
def test_dirichlet_energy_gradients_match_numpy(bracket):
    loss, W, u = _dirichlet(bracket)
    M = sp.random(90, 90, density=0.06, random_state=4, format="csr")
    M.data = np.abs(M.data)
    uv = np.random.default_rng(5).normal(size=90)
    coo = M.tocoo()
    d = uv[coo.row] - uv[coo.col]
    v, (gu, gW) = tl.value_and_grad(loss, wrt=[u, W])(W=M, u=uv)
    assert np.isclose(v, coo.data @ d**2)
    assert np.allclose(gu, np.bincount(coo.row, 2 * coo.data * d, 90) - np.bincount(coo.col, 2 * coo.data * d, 90))
    assert _same_pattern(gW, M)
    assert np.allclose(gW.toarray(), sp.csr_matrix((d**2, (coo.row, coo.col)), shape=M.shape).toarray())


def _kernel_layout(prog):
    from tensorlang.driver import compile

    ir, spec = compile(prog).lowered()
    return ir, spec


@pytest.mark.parametrize("which", ["lsq", "dirichlet"])
def test_gradient_kernels_hold_no_dense_matrix(which):
    """Memory O(nnz + vectors): every array the gradient kernel allocates or
    takes is one-dimensional (n, m or nnz long); the sparse tensor arrives as
    its values only and no dense relation table is passed."""
    if which == "lsq":
        loss, S, A, x, b = _lsq()
        wrt, sv = [x, A], "A"
    else:
        loss, W, u = _dirichlet(False)
        wrt, sv = [u, W], "W"
    prog = tl.grad(loss, wrt=wrt).program
    ir, spec = _kernel_layout(prog)
    assert all(len(a.shape) == 1 for a in ir.allocs)
    assert all(len(dims) == 1 for _, dims in spec["temporaries"])
    assert spec["dense_relations"] == []
    assert sv not in [name for name, _, _ in spec["inputs"]]  # never densified
    assert [name for name, _ in spec["sparse_values"]].count(sv) >= 1
    assert [k for k, _ in spec["sparse_outputs"]] == [1]  # the cotangent of the sparse tensor is packed


def test_read_off_the_relation_loops_is_still_correct():
    """A[i, i] cannot be driven by S (one index twice): the kernel tests S
    and reads a densified A, and agrees with NumPy."""
    n = tl.size("n")
    S = tl.relation("S", n, n)
    A = tl.sparse_tensor("A", S)
    x = tl.tensor("x", n)
    loss = tl.sum(n, lambda i: A[i, i] * x[i] * x[i])
    M = sp.random(70, 70, density=0.3, random_state=2, format="csr") + sp.eye(70, format="csr") * 0.5
    M = sp.csr_matrix(M)
    xv = np.random.default_rng(0).normal(size=70)
    assert np.isclose(tl.compile(loss)(A=M, x=xv), np.sum(M.diagonal() * xv * xv))
    gA, gx = tl.grad(loss, wrt=[A, x])(A=M, x=xv)
    assert _same_pattern(gA, M)
    assert np.allclose(gA.toarray(), np.diag(xv * xv) * (M.toarray() != 0))
    assert np.allclose(gx, 2 * M.diagonal() * xv)


def test_in_place_change_of_a_scipy_pattern_is_seen():
    loss, S, A, x, b = _lsq()
    M, xv, bv = _data()
    g = tl.grad(loss, wrt=A)
    g(A=M, x=xv, b=bv)
    M.indices[0] = (M.indices[0] + 1) % 30 if M.indices[1] != (M.indices[0] + 1) % 30 else M.indices[0]
    M.has_sorted_indices = False
    M.has_canonical_format = False
    _, _, ref = _ref_grads(M, xv, bv)
    got = g(A=M, x=xv, b=bv)
    assert np.allclose(got.toarray(), ref.toarray())
    M.data[:] = 2.0  # values changed in place: used as they are now
    _, _, ref = _ref_grads(M, xv, bv)
    assert np.allclose(g(A=M, x=xv, b=bv).toarray(), ref.toarray())


# -- cost: nnz symbols and the cheap-gradient theorems ----------------------------------


@pytest.mark.parametrize("which", ["lsq", "dirichlet"])
def test_theorems_6_1_and_6_55_with_sparse_tensors(which):
    """cost(D e) <= 4 cost(e) (Theorem 6.1) and cost(DT e) <= 4 cost(e)
    (Theorem 6.55's bound on the operations; io terms only add to the
    right side), counted on relation data, and the normalized loss's
    symbolic cost is linear in nnz_S (no n·m term)."""
    from tensorlang.passes.pipeline import normalize
    from tensorlang.passes.total_derivative import tangent_inputs, total_derivative
    from tensorlang.sparse import hoist_guards

    if which == "lsq":
        loss, S, A, x, b = _lsq()
        wrt, kw = [x, A], dict(n=60, m=50)
        mask = sp.random(60, 50, density=0.1, random_state=3).toarray() != 0
        kw["S"] = mask
    else:
        loss, W, u = _dirichlet(False)
        wrt, kw = [u, W], dict(n=12)  # the exact count enumerates a 5-deep domain: n^5 points
        kw["E"] = sp.random(12, 12, density=0.3, random_state=3).toarray() != 0
    ssa = normalize(hoist_guards(loss))
    adj = tl.adjoint(loss, wrt=wrt)
    D = total_derivative(ssa, tangent_inputs(ssa, wrt))
    c = tl.cost(ssa, **kw)
    assert tl.cost(D, **kw) <= 4 * c
    assert tl.cost(adj, **kw) <= 4 * c
    if which == "lsq":
        assert "m*n" not in str(tl.symbolic_cost(loss))  # the source as written, too (brackets cover products)
        sym = tl.symbolic_cost(ssa)
        assert "nnz_S" in str(sym)
        assert sympy_degree_in(sym, *sym.free_symbols) == 1  # linear in n and nnz_S: no n·m term


def sympy_degree_in(expr, *syms):
    import sympy

    return sympy.Poly(expr, *syms).total_degree()


def test_example_sparse_fit_recovers_the_values():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "sparse_fit.py"
    spec = importlib.util.spec_from_file_location("sparse_fit_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    losses, err = mod.main(["--n", "600", "--steps", "40"])
    assert losses[-1] < 1e-3 * losses[0]
    assert err < 0.05


def test_sparse_tensor_is_pickled_with_its_relation_and_canonical():
    import pickle

    loss, S, A, x, b = _lsq()
    assert pickle.loads(pickle.dumps(A)) is A
    assert pickle.loads(pickle.dumps(loss)) is loss
    assert tl.canonicalize(loss) is tl.canonicalize(_lsq()[0])
    with pytest.raises(tl.TensorLangError, match="relation"):
        tl.sparse_tensor("B", "S")


def test_float32_sparse_values_and_coords_input_through_tl_compile():
    loss, S, A, x, b = _lsq()
    M, xv, bv = _data(n=70, m=66)
    M32 = M.astype(np.float32)
    val, gx_ref, gA_ref = _ref_grads(M, xv, bv)
    out = tl.compile(loss)(A=M32, x=xv.astype(np.float32), b=bv.astype(np.float32))
    assert isinstance(out, np.float32) and np.isclose(out, val, rtol=1e-4)
    gA = tl.grad(loss, wrt=A)(A=M32, x=xv.astype(np.float32), b=bv.astype(np.float32))
    assert gA.dtype == np.float32 and np.allclose(gA.toarray(), gA_ref.toarray(), rtol=1e-3, atol=1e-3)
    coo = M.tocoo()
    got = tl.compile(loss)(A=(np.stack([coo.row, coo.col], 1), coo.data), x=xv, b=bv)
    assert np.isclose(got, val)


def test_three_way_sparse_tensor():
    n, m, k = tl.sizes("n m k")
    R = tl.relation("R", n, m, k)
    T = tl.sparse_tensor("T", R)
    x, y = tl.tensor("x", k), tl.tensor("y", m)
    out = tl.gen(n, lambda i: tl.sum([m, k], lambda j, l: T[i, j, l] * y[j] * x[l]))
    rng = np.random.default_rng(7)
    coords = np.unique(np.stack([rng.integers(0, 64, 300), rng.integers(0, 65, 300), rng.integers(0, 66, 300)], 1), axis=0)
    vals = rng.normal(size=len(coords))
    xv, yv = rng.normal(size=66), rng.normal(size=65)
    dense = np.zeros((64, 65, 66))
    dense[tuple(coords.T)] = vals
    ref = np.einsum("ijl,j,l->i", dense, yv, xv)
    assert np.allclose(tl.compile(out)(T=(coords, vals), x=xv, y=yv, n=64), ref)
    w = rng.normal(size=64)
    gc, gv = tl.vjp(out, wrt=T)(T=(coords, vals), x=xv, y=yv, n=64, dy=w)
    assert np.array_equal(gc, coords)  # sorted, as np.unique left them
    assert np.allclose(gv, w[coords[:, 0]] * yv[coords[:, 1]] * xv[coords[:, 2]])
