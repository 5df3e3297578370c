"""Short accumulated slabs keep one private copy per residue (issue #13: the
deconvolution's gradient/primal time; backend/residues.py).

The deconvolution's ``dc[k] = Σ_i x[i - k + m - 1]·dY[i]`` is accumulated as
``for i in range(n): for k in range(m): dc[k] += …`` (interchange.py): with
m = 3 or 16 every iteration of ``i`` waits on the stores of the previous
one.  The kernel now runs it, when c is shorter than ``SHORT`` and
``i`` has at least ``RUN_MIN`` points, into ``COPIES`` copies
of the slab, iteration ``i`` into copy ``i mod COPIES``; the points past the
last whole group go into ``dc`` in order, then the copies in copy order.

Structure (the serial loop IR: the copies under a run-time test, the nest
printed once for the points past the last whole group, the copies' sum),
values against NumPy and finite differences, and the documented order of
additions done in NumPy, bitwise, on both sides of each threshold (m = 63
and 64, n = RUN_MIN - 1 and RUN_MIN; n below SHORT with m >= RUN_MIN, where y's
accumulation over m takes copies too).
threads=2 stays bitwise threads=1.  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir, serial_passes
from tensorlang.backend.loopir import Alloc, If, Loop, Store, walk_stmts
from tensorlang.backend.residues import COPIES, RUN_MIN, SHORT, _pattern


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


def _accumulate(terms, extent):
    """``Σ_r terms[r]`` (over the first axis) in the order residues.py documents for an
    accumulated array of ``extent`` elements, from 0."""
    n = len(terms)
    out = np.zeros(terms.shape[1:])
    q = (n // COPIES) * COPIES if extent < SHORT and n >= RUN_MIN else 0
    for r in range(q, n):  # the points past the last whole group (all of them without copies), in order
        out = out + terms[r]
    if q:
        W = np.zeros((COPIES,) + terms.shape[1:])
        for r0 in range(0, q, COPIES):  # copy l receives the points r = l mod COPIES, in order
            W = W + terms[r0: r0 + COPIES]
        for lane in range(COPIES):
            out = out + W[lane]
    return out


def _dc_in_kernel_order(x, c, z):
    """dc[k] = Σ_i x[i - k + m - 1]·dY[i], every sum in the kernel's order (y's too: y[i] =
    Σ_j x[i - j + m - 1]·c[j] is accumulated over j, in copies when n < SHORT and m >= RUN_MIN)."""
    n, m = len(z), len(c)
    y = _accumulate(np.stack([x[m - 1 - j: m - 1 - j + n] * c[j] for j in range(m)]), n)
    v0 = y + (-z)
    dy = v0 + v0
    # X[i, k] = x[n0 + i - k - 1] with n0 = m (the kernel's index), i.e. x[i + m - 1 - k]
    X = np.stack([x[m - 1 - k: m - 1 - k + n] for k in range(m)], axis=1)
    return _accumulate(X * dy[:, None], m)


def _nests_into(stmts, arr):
    return [s for s in walk_stmts(stmts) if _pattern(s) is not None and s.body[0].body[0].array == arr]


def test_deconv_gradient_short_slab_goes_into_copies():
    w, loss, v, g = _grad()
    k = tl.compile(g.program, threads=1)
    ir = k.loop_ir
    dc = ir.results[1]  # the cotangent of c, accumulated over i for each of its m points
    (before,) = _nests_into(ir.body, dc)  # the lowering's nest: for i in range(n): for k in slab: dc[k] += …
    run = serial_passes(ir)
    def is_test(s):
        args = getattr(s.cond, "args", ()) if isinstance(s, If) else ()
        return all(isinstance(c, K.Cmp) for c in args) and \
            {(c.op, c.rhs) for c in args} == {("<", K.Int(SHORT)), (">=", K.Int(RUN_MIN))}

    tests = [s for s in walk_stmts(run.body) if is_test(s)]
    assert len(tests) == 4  # copies then their sum, for y's nest and for dc's
    into_dc = [t for t in tests if any(isinstance(x, Store) and x.array == dc for x in walk_stmts(t.then))]
    assert len(into_dc) == 1  # the copies' sum into dc, element by element
    (fill,) = [t for t in tests if any(isinstance(x, Alloc) for x in t.then)
               and t.cond.args[0].lhs == k.loop_ir.allocs[[a.name for a in ir.allocs].index(dc)].shape[0]]
    (alloc,) = [x for x in fill.then if isinstance(x, Alloc)]
    assert alloc.zero and alloc.shape[0] == K.IBin("*", K.Int(COPIES), alloc.shape[0].rhs)
    (groups,) = [x for x in fill.then if isinstance(x, Loop)]
    assert groups.step == COPIES and (groups.lo, groups.var != before.var) == (before.lo, True)
    stores = [x for x in walk_stmts(groups.body) if isinstance(x, Store)]
    assert stores and all(x.array == alloc.name for x in stores)  # dc itself is not touched per point
    # the nest is printed once, from the first point past the whole groups
    (rest,) = _nests_into(run.body, dc)
    assert rest.body == before.body and rest.hi == before.hi and rest.lo != before.lo
    # the parallel variant has the same copies, in its per-thread split and in its serial fallback
    par = printed_ir(ir, True)
    got = [x for x in walk_stmts(par.body) if isinstance(x, Alloc) and x.zero and isinstance(x.shape[0], K.IBin)
           and x.shape[0].lhs == K.Int(COPIES)]
    assert len(got) >= 2
    assert printed_ir(ir) is not None  # and it prints (offsets.py, roll.py accept it)


@pytest.mark.parametrize("n,m", [(2000, 3), (1999, 16), (1100, 63), (1100, 64), (15, 5), (16, 5), (17, 1),
                                 (RUN_MIN - 1, 5), (RUN_MIN, 5), (40, RUN_MIN + 3),
                                 (600, 1030)])
def test_deconv_dc_order_is_the_documented_one_bitwise(n, m):
    # c shorter than SHORT and n >= RUN_MIN: the copies' order; otherwise the nest's own order (i
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
    # the parallel variant's chunks cover disjoint tiles and take the same copies: dx bitwise the
    # serial result; dc (one tile, its sum over n in per-thread copies, chunks.py) to rounding,
    # the same on every call
    _, _, _, g2 = _grad(threads=2)
    w, _, _, g1 = _grad(threads=1)
    rng = np.random.default_rng(17 + n)
    d = {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}
    a1, a2 = g1(**d), g2(**d)
    np.testing.assert_array_equal(a1[0], a2[0])
    np.testing.assert_allclose(a2[1], a1[1], rtol=1e-12)
    assert np.array_equal(g2(**d)[1], a2[1])
    np.testing.assert_array_equal(a1[1], _dc_in_kernel_order(d["x"], d["c"], d["z"]))
