"""Loop order from access strides, and index offsets LLVM can bound (issue #13 item 3;
backend interchange.py, offsets.py, separate.py).

From the kernel IR: the innermost loop is the one the accesses run along with
stride 1 (a column sum walks rows, the deconvolution accumulates along its
output), and the interior loops of the deconvolution and of the 5-point
Laplacian's gradient carry no predicate.  Values are checked against NumPy,
bit for bit where the order of additions is unchanged.
"""

import re

import numba
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import source
from tensorlang.backend.loopir import If, Loop, Store, loops, walk_stmts
from tensorlang.backend.offsets import hoist_offsets


def _innermost(body):
    return [lp for lp in loops(body) if not any(isinstance(s, Loop) for s in walk_stmts(lp.body))]


def _ir(e):
    return tl.compile(e, threads=1).loop_ir


def _column_sum():
    B, n = tl.sizes("B n")
    Y = tl.tensor("Y", B, n)
    return tl.gen(n, lambda j: tl.sum(B, lambda b: Y[b, j] * Y[b, j])), Y


def test_column_sum_runs_along_rows_and_keeps_each_sum_order():
    e, _ = _column_sum()
    ir = _ir(e)
    out = ir.results[0]
    # (not the loop zeroing each tile's slab of the output as the tile starts, scatter.py)
    (inner,) = [lp for lp in _innermost(ir.body)
                if any(isinstance(s, Store) and s.array == out and not K.is_const(s.value, 0.0) for s in lp.body)]
    st = inner.body[-1]
    # the innermost loop is the output's index: it walks a row of Y (stride 1)
    assert st.index == (K.Name(inner.var),)
    reads = [x for x in _loads(st.value) if x.array != out]
    assert reads and all(x.index[-1] == K.Name(inner.var) for x in reads)
    # the sum index is outside it
    outer = [lp for lp in loops(ir.body) if inner in walk_stmts(lp.body)]
    assert len(outer) == 2 and outer[-1].kind == "scatter"
    Yv = np.random.default_rng(0).normal(size=(37, 2100))
    got = tl.compile(e, threads=1)(Y=Yv)
    want = np.zeros(2100)
    for b in range(37):  # the program's order of additions, per element
        want += Yv[b] * Yv[b]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, (Yv * Yv).sum(axis=0), rtol=1e-13)


def _loads(e, out=None):
    out = [] if out is None else out
    if isinstance(e, K.Load):
        out.append(e)
    if isinstance(e, K.KExpr):
        for v in vars(e).values():
            if isinstance(v, (K.KExpr, tuple)):
                _loads(v, out)
    elif isinstance(e, tuple):
        for x in e:
            _loads(x, out)
    return out


def test_transposed_sum_block_walks_rows():
    B, n = tl.sizes("B n")
    Y = tl.tensor("Y", B, n)
    e = tl.sum([n, B], lambda j, b: Y[b, j] * 2.0)
    ir = _ir(e)
    for lp in _innermost(ir.body):
        for x in _loads(tuple(s.value for s in lp.body if hasattr(s, "value"))):
            if len(x.index) == 2:
                assert x.index[1] == K.Name(lp.var) and x.index[0] != K.Name(lp.var)
    Yv = np.random.default_rng(1).normal(size=(23, 41))
    np.testing.assert_allclose(tl.compile(e, threads=1)(Y=Yv), 2.0 * Yv.sum(), rtol=1e-13)


def test_row_major_product_keeps_its_order():
    # gen[i] sum[j] [j <= i]·A[i, j]·x[j] already runs along rows: no interchange
    n = tl.size("n")
    A, x = tl.tensor("A", n, n), tl.tensor("x", n)
    e = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, A[i, j] * x[j])))
    ir = _ir(e)
    assert not any(lp.kind == "scatter" for lp in loops(ir.body))
    rng = np.random.default_rng(2)
    Av, xv = rng.normal(size=(9, 9)), rng.normal(size=9)
    np.testing.assert_allclose(tl.compile(e, threads=1)(A=Av, x=xv), np.tril(Av) @ xv, rtol=1e-13)


def _deconv():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.let(conv, lambda y: tl.sum(n, lambda i: (y[i] - z[i]) ** 2))
    return loss, x, c, z


def test_deconvolution_accumulates_along_its_output_and_matches_numpy():
    loss, x, c, z = _deconv()
    g = tl.grad(loss, wrt=[x, c])
    ir = _ir(g.program)
    acc = [lp for lp in _innermost(ir.body) if lp.kind == "scatter"]
    assert acc  # the convolution and dx: the output index innermost, no predicate
    for lp in acc:
        (st,) = [s for s in lp.body if isinstance(s, Store)]
        assert st.index == (K.Name(lp.var),)
        assert not any(isinstance(s, If) for s in walk_stmts(lp.body))
    rng = np.random.default_rng(3)
    for nn, mm in ((1, 1), (5, 3), (3000, 16), (2500, 7)):
        xx, cc, zz = rng.normal(size=nn + mm - 1), rng.normal(size=mm), rng.normal(size=nn)
        r = 2.0 * (np.convolve(xx, cc, mode="valid") - zz)
        gx, gc = tl.compile(g.program, threads=1)(x=xx, c=cc, z=zz)
        np.testing.assert_allclose(gx, np.convolve(r, cc[::-1], mode="full"), rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(gc, np.correlate(xx, r, mode="valid")[::-1], rtol=1e-11, atol=1e-11)
        got = tl.compile(loss, threads=1)(x=xx, c=cc, z=zz)
        assert got == pytest.approx(float(((np.convolve(xx, cc, mode="valid") - zz) ** 2).sum()), rel=1e-12)


def test_offsets_are_hoisted_as_nonnegative_bases():
    loss, *_ = _deconv()
    ir = hoist_offsets(_ir(loss))
    (lp,) = [lp for lp in _innermost(ir.body) if lp.kind == "scatter"]
    # x[i - j + m - 1] in `for i`: read as x[(i - lo) + b], b = max(0, ...) computed before the loop
    (st,) = [s for s in lp.body if isinstance(s, Store)]
    idx = [x.index[0] for x in _loads(st.value) if x.array != st.array and isinstance(x.index[0], K.IBin)]
    assert idx and all(isinstance(i.rhs, K.Name) and i.rhs.name.startswith(lp.var + "_b") for i in idx)


def test_deconvolution_inner_loop_is_vectorised_by_llvm():
    loss, x, c, z = _deconv()
    k = tl.compile(loss, threads=1)
    rng = np.random.default_rng(4)
    k(x=rng.normal(size=40), c=rng.normal(size=5), z=rng.normal(size=36))
    cached = next(iter(k._plans.values())).fn  # the entry the call ran (its size class's), recompiled to read its LLVM IR
    fn = numba.njit(nogil=True, error_model="numpy")(cached.py_func)
    fn.compile(cached.signatures[0])
    llvm = fn.inspect_llvm(cached.signatures[0])
    assert re.search(r"<\d+ x double>", llvm)  # SIMD lanes (AVX2: <4 x double>)


def test_laplacian_gradient_interior_and_image_adjoint_interior():
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    M = tl.relation("M", n, n)
    k = n - 2
    lap = tl.gen([k, k], lambda i, j: u[i, j + 1] + u[i + 2, j + 1] + u[i + 1, j] + u[i + 1, j + 2] - 4.0 * u[i + 1, j + 1])
    loss = tl.let(lap, lambda L: tl.sum([k, k], lambda i, j: tl.iverson(M(i + 1, j + 1), u[i + 1, j + 1] ** 2) + L[i, j] ** 2))
    g = tl.grad(loss, wrt=[u])
    ir = _ir(g.program)
    out = ir.results[0]
    writers = [lp for lp in _innermost(ir.body) if any(isinstance(s, Store) and s.array == out for s in walk_stmts(lp.body))]
    # the interior copy has no branch: no affine bracket (separated), and the
    # relation's mask selects a value computed at every point (lower.unguarded)
    interior = [lp for lp in writers if not any(isinstance(s, If) for s in walk_stmts(lp.body))
                and str(lp.body).count("Load(") >= 7]
    assert interior and "Select(" in str(interior[0].body)
    rng = np.random.default_rng(5)
    uu, mm = rng.normal(size=(9, 9)), rng.random((9, 9)) < 0.6
    s = 2.0 * (uu[:-2, 1:-1] + uu[2:, 1:-1] + uu[1:-1, :-2] + uu[1:-1, 2:] - 4.0 * uu[1:-1, 1:-1])
    want = np.zeros_like(uu)
    want[1:-1, 1:-1] += -4.0 * s + np.where(mm[1:-1, 1:-1], 2.0 * uu[1:-1, 1:-1], 0.0)
    want[:-2, 1:-1] += s
    want[2:, 1:-1] += s
    want[1:-1, :-2] += s
    want[1:-1, 2:] += s
    np.testing.assert_allclose(tl.compile(g.program, threads=1)(u=uu, M=mm), want, rtol=1e-12, atol=1e-12)


def test_mask_whose_read_needs_the_relation_stays_a_branch():
    # x[i] is in bounds only where R(i) holds (i < n): computed under the test
    n = tl.size("n")
    x = tl.tensor("x", n)
    R = tl.relation("R", n)
    e = tl.gen(n + 3, lambda i: tl.iverson(R(i), x[i] * 2.0) + 1.0)
    ir = _ir(e)
    assert any(isinstance(s, If) for s in walk_stmts(ir.body))
    xv, rv = np.arange(6.0), np.array([True, False, True, True, False, True])
    np.testing.assert_array_equal(tl.compile(e, threads=1)(x=xv, R=rv), np.r_[np.where(rv, 2.0 * xv, 0.0), [0.0, 0.0, 0.0]] + 1.0)
    # in bounds without the relation (i < n): selected, no branch
    f = tl.gen(n, lambda i: tl.iverson(R(i), x[i] * 2.0) + 1.0)
    assert not any(isinstance(s, If) for s in walk_stmts(_ir(f).body))
    np.testing.assert_array_equal(tl.compile(f, threads=1)(x=xv, R=rv), np.where(rv, 2.0 * xv, 0.0) + 1.0)
    # inside a sum: the same (the term selected only when its reads need no relation)
    s = tl.sum(n + 3, lambda i: tl.iverson(R(i), x[i] * x[i]) + 1.0)
    assert tl.compile(s, threads=1)(x=xv, R=rv) == pytest.approx(float((xv[rv] ** 2).sum()) + 9.0)


def test_masked_sum_selects_nan_free():
    # a masked-out term may be inf or nan where the mask fails: the select drops it
    n = tl.size("n")
    x = tl.tensor("x", n)
    R = tl.relation("R", n)
    s = tl.sum(n, lambda i: tl.iverson(R(i), tl.log(x[i])) + 0.0 * x[i])
    xv, rv = np.array([1.0, -1.0, 0.0, np.e]), np.array([True, False, False, True])
    assert tl.compile(s, threads=1)(x=xv, R=rv) == pytest.approx(1.0)
