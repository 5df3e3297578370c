"""Row fusion (backend/rowfuse.py; issue #13, quadratic form grad/primal time).

The gradient of a program reading a large matrix A in several loop nests
(the primal's ``A x``, the adjoint's ``Aᵀ r``, the outer-product cotangent
of A) visits A once in the serial kernel: one top-level loop nest reads A
in the fused version of the kernel, where the original reads it twice (a
loop nest and a BLAS call, or two loop nests).  Structure is asserted on the
kernel IR (no timing); values against NumPy on both sides of the run-time
choice (BLAS for a small matrix, the fused loops past ``WITNESS_MIN``).
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.api import compile as backend_compile
from tensorlang.backend.blas import WITNESS_MIN, Gemm
from tensorlang.backend.loopir import If, Loop, walk_stmts
from tensorlang.backend.rowfuse import _matrices, row_fuse
from tensorlang.errors import InputError


def _quadform():
    n = tl.size("n")
    A, x = tl.tensor("A", n, n), tl.tensor("x", n)
    y = tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[j]))
    return tl.let(y, lambda y: tl.sum(n, lambda i: y[i] * y[i])), A, x


def _least_squares():
    """A different program: ||X w - b||² in w alone (X rectangular, no cotangent of X)."""
    m, d = tl.sizes("m d")
    X, w, b = tl.tensor("X", m, d), tl.tensor("w", d), tl.tensor("b", m)
    r = tl.gen(m, lambda i: tl.sum(d, lambda k: X[i, k] * w[k]) - b[i])
    return tl.let(r, lambda r: tl.sum(m, lambda i: r[i] * r[i])), X, w


def _sweeps(stmts, array: str) -> int:
    """Top-level loop nests of ``stmts`` reading ``array``, plus BLAS calls reading it."""
    loops = sum(1 for s in stmts if isinstance(s, Loop) and array in _matrices(s))
    blas = sum(1 for s in walk_stmts(stmts) if isinstance(s, Gemm) and array in s.arrays_read())
    return loops + blas


def _version(ir):
    """The fused version: the top-level If's then-branch (the run-time choice of loops)."""
    tops = [s for s in ir.body if isinstance(s, If)]
    assert len(tops) == 1, "one version test at top level"
    return tops[0]


def _matrix_arg(ir) -> str:
    (name,) = {a for s in walk_stmts(ir.body) if isinstance(s, Loop) for a in _matrices(s)}
    return name


@pytest.mark.parametrize("case", ["quadform", "least_squares"])
def test_one_sweep_over_the_matrix(case):
    loss, A, x = _quadform() if case == "quadform" else _least_squares()
    wrt = [x, A] if case == "quadform" else [x]
    g = tl.grad(loss, wrt=wrt)
    ir = backend_compile(g.program).loop_ir
    a = _matrix_arg(ir)
    # before: the primal's row loop (or BLAS) and Aᵀ r's (BLAS or rows): each choice reads A twice
    fused_choice = [s.orelse for s in ir.body if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then)]
    flat = [t for branch in fused_choice for t in branch] + [s for s in ir.body if not isinstance(s, If)]
    assert _sweeps(flat, a) == 2
    out = row_fuse(ir)
    v = _version(out)
    assert _sweeps(v.then, a) == 1  # the loops' version: one loop nest reads A
    assert not any(isinstance(s, Gemm) for s in walk_stmts(v.then))
    assert any(isinstance(s, Gemm) for s in walk_stmts(v.orelse))  # small sizes keep BLAS


@pytest.mark.parametrize("n", [40, int(np.ceil(np.sqrt(WITNESS_MIN))) + 3])
def test_quadform_values(n):
    """Both sides of the choice (BLAS at n = 40, the fused loops past WITNESS_MIN)."""
    loss, A, x = _quadform()
    g = tl.grad(loss, wrt=[x, A])
    vg = tl.value_and_grad(loss, wrt=[x, A])
    rng = np.random.default_rng(3)
    Av = rng.normal(size=(n, n)) / np.sqrt(n)
    xv = rng.normal(size=n)
    y = Av @ xv
    gx, gA = g(A=Av, x=xv)
    np.testing.assert_allclose(gx, 2.0 * Av.T @ y, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gA, 2.0 * np.outer(y, xv), rtol=1e-12, atol=0)
    val, (gx2, gA2) = vg(A=Av, x=xv)
    assert val == pytest.approx(float(y @ y), rel=1e-12)
    np.testing.assert_allclose(gx2, gx, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(gA2, gA)
    # the parallel variant (not fused; vᵀA's row loop in per-thread chunks)
    gx3, gA3 = tl.grad(loss, wrt=[x, A], threads=2)(A=Av, x=xv)
    np.testing.assert_allclose(gx3, 2.0 * Av.T @ y, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gA3, 2.0 * np.outer(y, xv), rtol=1e-12, atol=0)


@pytest.mark.parametrize("m,d", [(30, 7), (WITNESS_MIN // 64 + 5, 64)])
def test_least_squares_values(m, d):
    loss, X, w = _least_squares()
    g = tl.grad(loss, wrt=w)
    rng = np.random.default_rng(4)
    Xv, wv, bv = rng.normal(size=(m, d)), rng.normal(size=d), rng.normal(size=m)
    got = g(X=Xv, w=wv, b=bv)
    np.testing.assert_allclose(got, 2.0 * Xv.T @ (Xv @ wv - bv), rtol=1e-10, atol=1e-9)


def test_non_finite_matrix_still_refused():
    """The fused version keeps A's finiteness witness (blas.py): a NaN in A is an InputError."""
    loss, A, x = _quadform()
    g = tl.grad(loss, wrt=[x, A])
    n = int(np.ceil(np.sqrt(WITNESS_MIN))) + 3
    Av = np.ones((n, n))
    Av[n // 2, 7] = np.nan
    with pytest.raises(InputError, match="A"):
        g(A=Av, x=np.zeros(n))


@pytest.mark.parametrize("n, m", [(3, 4), (70, 66)])
def test_a_second_product_with_the_same_matrix(n, m):
    # (A x)·(A z): the second GEMV's matrix is already witnessed by the first,
    # so it has no witness of its own, and its loops were taken for the
    # row-order vᵀA with the operands swapped: Numba refused the kernel
    # (found by tests/sparse' jvp through a sparse tangent)
    nn, mm = tl.sizes("n m")
    A = tl.tensor("A", nn, mm)
    x, z = tl.tensor("x", mm), tl.tensor("z", mm)
    ax = tl.gen(nn, lambda i: tl.sum(mm, lambda j: A[i, j] * x[j]))
    az = tl.gen(nn, lambda i: tl.sum(mm, lambda j: A[i, j] * z[j]))
    loss = tl.let(ax, lambda p: tl.let(az, lambda q: tl.sum(nn, lambda i: p[i] * q[i])))
    rng = np.random.default_rng(0)
    Av, xv, zv = rng.normal(size=(n, m)), rng.normal(size=m), rng.normal(size=m)
    val, (gA, gx) = tl.value_and_grad(loss, wrt=[A, x])(A=Av, x=xv, z=zv)
    p, q = Av @ xv, Av @ zv
    np.testing.assert_allclose(val, p @ q, rtol=1e-12)
    np.testing.assert_allclose(gx, Av.T @ q, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gA, np.outer(q, xv) + np.outer(p, zv), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["quadform", "least_squares"])
def test_the_blas_side_keeps_no_dead_loops(case):
    """The else branch of the version runs only when the one BLAS choice holds
    (blas.py writes the tests of ``A x`` and ``vᵀA`` over one matrix alike,
    rectangular X included): it keeps the BLAS calls and none of the loops
    over the matrix, which Numba would compile for nothing (issue #14 item 6)."""
    loss, A, x = _quadform() if case == "quadform" else _least_squares()
    wrt = [x, A] if case == "quadform" else [x]
    ir = backend_compile(tl.grad(loss, wrt=wrt).program).loop_ir
    choices = {s.cond for s in ir.body if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then)}
    assert len(choices) == 1  # Ax and vᵀA: one size test
    a = _matrix_arg(ir)
    v = _version(row_fuse(ir))
    assert _sweeps(v.orelse, a) == 2  # two BLAS calls ...
    assert not any(isinstance(s, Loop) and a in _matrices(s) for s in walk_stmts(v.orelse))  # ... and no loops
    assert not any(isinstance(s, If) for s in v.orelse)  # no choice left to make
