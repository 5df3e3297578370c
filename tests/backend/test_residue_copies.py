"""Short accumulated slabs keep one private copy per residue (issue #13: the
deconvolution's gradient/primal time; backend/residues.py).

The deconvolution's ``dc[k] = Σ_i x[i - k + m - 1]·dY[i]`` is accumulated as
``for i in range(n): for k in range(m): dc[k] += …`` (interchange.py): with
m = 3 or 16 every iteration of ``i`` waits on the stores of the previous
one.  The kernel now runs it, when c is shorter than ``SHORT`` and
``i`` has at least ``COPIES`` points, into ``COPIES`` copies
of the slab, iteration ``i`` into copy ``i mod COPIES``, and adds the copies
into ``dc`` in copy order, then the remaining points in order.

Structure (the printed serial loop IR: versioned nest, the copies, the
unchanged fallback), values against NumPy and finite differences, and the
documented order of additions done in NumPy, bitwise, on both sides of each
threshold (m = 63 and 64, n below and above ``COPIES``).  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir, serial_passes
from tensorlang.backend.loopir import Alloc, If, Loop, Store, walk_stmts
from tensorlang.backend.residues import COPIES, SHORT, _pattern


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    # the kernel at every size (not the evaluator, which the small sizes here would take)
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


def _deconv():
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["deconv-m16"]
    loss, v = w.program()
    return w, loss, v


def _grad(threads=1):
    w, loss, v = _deconv()
    return w, loss, v, tl.grad(loss, wrt=[v["x"], v["c"]], threads=threads)


def _seq_conv(x, c):
    """y[i] = sum_j x[i - j + m - 1] c[j], terms added from j = 0 up, from 0 (the kernel's tile order)."""
    n, m = len(x) - len(c) + 1, len(c)
    y = np.zeros(n)
    for j in range(m):
        y = y + x[m - 1 - j: m - 1 - j + n] * c[j]
    return y


def _dc_in_kernel_order(x, c, z):
    """dc[k] = Σ_i x[i - k + m - 1]·dY[i] with the additions in the order residues.py documents."""
    n, m = len(z), len(c)
    v0 = _seq_conv(x, c) + (-z)
    dy = v0 + v0
    # X[i, k] = x[n0 + i - k - 1] with n0 = m (the kernel's index), i.e. x[i + m - 1 - k]
    X = np.stack([x[m - 1 - k: m - 1 - k + n] for k in range(m)], axis=1)
    terms = X * dy[:, None]
    dc = np.zeros(m)
    if m < SHORT and n >= COPIES:
        q = (n // COPIES) * COPIES
        W = np.zeros((COPIES, m))
        for r0 in range(0, q, COPIES):  # copy l receives its points in order
            W = W + terms[r0: r0 + COPIES]
        for lane in range(COPIES):
            dc = dc + W[lane]
        rest = range(q, n)
    else:
        rest = range(n)
    for i in rest:
        dc = dc + terms[i]
    return dc


def test_deconv_gradient_short_slab_is_versioned_into_copies():
    w, loss, v, g = _grad()
    k = tl.compile(g.program, threads=1)
    ir = k.loop_ir
    dc = ir.results[1]  # the cotangent of c, accumulated over i for each of its m points
    before = [s for s in walk_stmts(ir.body) if _pattern(s) is not None and s.body[0].body[0].array == dc]
    assert len(before) == 1  # the lowering's nest: for i in range(n): for k in slab: dc[k] += …
    run = serial_passes(ir)
    versions = [s for s in walk_stmts(run.body)
                if isinstance(s, If) and any(x is not None and _pattern(x) is not None and x.body[0].body[0].array == dc
                                             for x in s.orelse)]
    assert len(versions) == 1
    ver = versions[0]
    assert ver.orelse == tuple(before)  # the fallback is the nest as it was
    # the test: the slab is shorter than SHORT and the outer loop has at least COPIES points
    cmps = {(c.op, c.rhs) for c in ver.cond.args}
    assert cmps == {("<", K.Int(SHORT)), (">=", K.Int(COPIES))}
    allocs = [s for s in ver.then if isinstance(s, Alloc)]
    assert len(allocs) == 1 and allocs[0].zero and allocs[0].shape[0].lhs == K.Int(COPIES)
    copies = allocs[0].name
    groups = [s for s in ver.then if isinstance(s, Loop) and s.step == COPIES]
    assert len(groups) == 1
    stores = [s for s in walk_stmts(groups[0].body) if isinstance(s, Store)]
    assert stores and all(s.array == copies for s in stores)  # dc itself is not touched per point
    # every accumulation nest into dc now sits in the version: the copies added in
    # (over COPIES lanes), the remainder, and the fallback
    inside = {id(s) for s in walk_stmts(ver.then + ver.orelse)}
    assert all(id(s) in inside for s in walk_stmts(run.body)
               if _pattern(s) is not None and s.body[0].body[0].array == dc)
    assert printed_ir(ir) is not None  # and it prints (offsets.py, roll.py accept it)
    # the parallel variant has the same copies, in its per-thread split and in its serial fallback
    par = printed_ir(ir, True)
    got = [s for s in walk_stmts(par.body) if isinstance(s, Alloc) and s.zero and isinstance(s.shape[0], K.IBin)
           and s.shape[0].lhs == K.Int(COPIES)]
    assert len(got) >= 2


@pytest.mark.parametrize("n,m", [(2000, 3), (1999, 16), (1000, 63), (1000, 64), (15, 5), (16, 5), (17, 1),
                                 (600, 1030)])
def test_deconv_dc_order_is_the_documented_one_bitwise(n, m):
    # c shorter than SHORT and n >= COPIES: the copies' order; otherwise the nest's own order (i
    # ascending), also for m = 1030, whose second tile's slab is short but c is not (module doc)
    _, _, _, g = _grad()
    rng = np.random.default_rng(n + m)
    d = {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}
    gx, gc = g(**d)
    np.testing.assert_array_equal(gc, _dc_in_kernel_order(d["x"], d["c"], d["z"]))


@pytest.mark.parametrize("n,m", [(1, 1), (5, 3), (16, 2), (31, 7), (1023, 16), (4096 + 17, 3), (3000, 63),
                                 (2048, 64), (2500, 1100)])
def test_deconv_values_against_numpy(n, m):
    w, _, _, g = _grad()
    rng = np.random.default_rng(7 * n + m)
    d = {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}
    for _ in range(2):  # the second call finds the first's values in pooled arrays
        gx, gc = g(**d)
    ref = w.grad_ref(d)
    np.testing.assert_allclose(gx, ref["x"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gc, ref["c"], rtol=1e-10, atol=1e-12)


def test_deconv_dc_against_finite_differences():
    w, loss, v, g = _grad()
    f = tl.compile(loss, threads=1)
    rng = np.random.default_rng(11)
    n, m = 50, 3
    d = {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}
    _, gc = g(**d)
    h = 1e-6
    for k in range(m):
        cp, cm = d["c"].copy(), d["c"].copy()
        cp[k] += h
        cm[k] -= h
        fd = (f(**{**d, "c": cp}) - f(**{**d, "c": cm})) / (2 * h)
        assert abs(fd - gc[k]) <= 1e-6 * max(1.0, abs(gc[k]))


def test_batched_conv_gradient_values():
    # dw[j] = Σ_b Σ_i x[b, i - j + m - 1]·dY[b, i]: the same short slab, inside the batch loop
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["batched-conv"]
    loss, v = w.program()
    g = tl.grad(loss, wrt=[v[k] for k in w.wrt], threads=1)
    ir = tl.compile(g.program, threads=1).loop_ir
    run = printed_ir(ir)
    assert any(isinstance(s, Alloc) and s.shape and isinstance(s.shape[0], K.IBin) and s.shape[0].lhs == K.Int(COPIES)
               for s in walk_stmts(run.body))
    rng = np.random.default_rng(13)
    for B, n, m in ((3, 200, 5), (2, 15, 4), (4, 333, 63)):
        d = w.data({"B": B, "n": n, "m": m}, rng)
        gw = g(**d)  # one input: its gradient
        np.testing.assert_allclose(gw, w.grad_ref(d)["w"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n,m", [(5000, 16), (3000, 7), (40, 3), (100, 3)])
def test_threads_do_not_change_the_gradient(n, m):
    # the parallel variant's chunks cover disjoint tiles and take the same copies: bitwise the serial result
    _, _, _, g2 = _grad(threads=2)
    w, _, _, g1 = _grad(threads=1)
    rng = np.random.default_rng(17 + n)
    d = {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}
    a1, a2 = g1(**d), g2(**d)
    for p, q in zip(a1, a2):
        np.testing.assert_array_equal(p, q)
    np.testing.assert_array_equal(a1[1], _dc_in_kernel_order(d["x"], d["c"], d["z"]))
