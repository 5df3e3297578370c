"""Short accumulated slabs are gathered again, tile by tile of the outer
index (issue #13: the deconvolution's gradient/primal time;
backend/short_slabs.py).

The deconvolution's ``dc[k] = Σ_i x[i - k + m - 1]·dY[i]`` is accumulated as
``for i in range(n): for k in range(m): dc[k] += …`` (interchange.py): with
m = 3 or 16 every iteration of ``i`` waits on the stores of the previous
one.  When c is shorter than ``SHORT`` and ``i`` has at least ``RUN_MIN``
points, the kernel instead runs, for each tile of ``TILE`` points of ``i``,
each ``dc[k]``'s dot product over the tile in ``LANES`` partial sums and
adds it to ``dc[k]``.

Structure (the serial loop IR: the gathers under a run-time test, no
private copies, the nest printed once after them), values against NumPy and
finite differences, and the documented order of additions done in NumPy,
bitwise, on both sides of each threshold (m = SHORT - 1 and SHORT, n = RUN_MIN - 1 and
RUN_MIN, tiles of i ending inside and at a group of lanes; n below SHORT
with m >= RUN_MIN, where y's accumulation over m is gathered too).
threads=2 stays bitwise threads=1 on dx.  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir, serial_passes
from tensorlang.backend.interchange import TILE
from tensorlang.backend.loopir import AccAdd, Alloc, Assign, If, Loop, Store, walk_stmts
from tensorlang.backend.short_slabs import LANES, RUN_MIN, SHORT, slab_nest


def gathered_order(terms, extent):
    """``Σ_r terms[r]`` (over the first axis, from 0) in the order short_slabs.py documents
    for an accumulated array of ``extent`` elements: when it is shorter than ``SHORT`` and
    there are at least ``RUN_MIN`` points, per tile of ``TILE`` points ``LANES`` partial sums
    (lane ``k`` adds the points ``LANES q + k``, the rest of the tile goes to lane 0, then
    lane 0 + (((lane 1 + lane 2) + lane 3) + ...)), each tile's sum added in tile order;
    else every point in order."""
    n = len(terms)
    out = np.zeros(terms.shape[1:])
    if not (extent < SHORT and n >= RUN_MIN):
        for r in range(n):
            out = out + terms[r]
        return out
    for rb in range(0, n, TILE):
        re = min(n, rb + TILE)
        hi = rb + ((re - rb) // LANES) * LANES
        lanes = [np.zeros(terms.shape[1:]) for _ in range(LANES)]
        for r0 in range(rb, hi, LANES):
            for k in range(LANES):
                lanes[k] = lanes[k] + terms[r0 + k]
        for r in range(hi, re):
            lanes[0] = lanes[0] + terms[r]
        rest = lanes[1]
        for k in range(2, LANES):
            rest = rest + lanes[k]
        out = out + (lanes[0] + rest)
    return out


pytestmark = pytest.mark.usefixtures("compiled_runtime")


def _deconv():
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["deconv-m16"]
    loss, v = w.program()
    return w, loss, v


def _grad(threads=1):
    w, loss, v = _deconv()
    return w, loss, v, tl.grad(loss, wrt=[v["x"], v["c"]], threads=threads)


def _dc_in_kernel_order(x, c, z):
    """dc[k] = Σ_i x[i - k + m - 1]·dY[i], every sum in the kernel's order (y's too: y[i] =
    Σ_j x[i - j + m - 1]·c[j] is accumulated over j, gathered when n < SHORT and m >= RUN_MIN)."""
    n, m = len(z), len(c)
    y = gathered_order(np.stack([x[m - 1 - j: m - 1 - j + n] * c[j] for j in range(m)]), n)
    v0 = y + (-z)
    dy = v0 + v0
    # X[i, k] = x[n0 + i - k - 1] with n0 = m (the kernel's index), i.e. x[i + m - 1 - k]
    X = np.stack([x[m - 1 - k: m - 1 - k + n] for k in range(m)], axis=1)
    return gathered_order(X * dy[:, None], m)


def _nests_into(stmts, arr):
    return [s for s in walk_stmts(stmts) if slab_nest(s) is not None and s.body[0].body[0].array == arr]


def _is_test(s):
    args = getattr(s.cond, "args", ()) if isinstance(s, If) else ()
    return all(isinstance(c, K.Cmp) for c in args) and \
        {(c.op, c.rhs) for c in args} == {("<", K.Int(SHORT)), (">=", K.Int(RUN_MIN))}


def test_deconv_gradient_short_slab_is_gathered_per_tile():
    w, loss, v, g = _grad()
    k = tl.compile(g.program, threads=1)
    ir = k.loop_ir
    dc = ir.results[1]  # the cotangent of c, accumulated over i for each of its m points
    (before,) = _nests_into(ir.body, dc)  # the lowering's nest: for i in range(n): for k in slab: dc[k] += …
    run = serial_passes(ir)
    tests = [s for s in walk_stmts(run.body) if _is_test(s)]
    assert len(tests) == 2  # one for y's nest, one for dc's
    (into_dc,) = [t for t in tests if any(isinstance(x, Store) and x.array == dc for x in walk_stmts(t.then))]
    assert not any(isinstance(x, Alloc) for x in walk_stmts(into_dc.then))  # no private copies
    # dc is a result: its gathers run with the tiles of i outermost (a top-level loop
    # tilechain.py can run inside dY's producer), after every slab of dc is zeroed
    zero_slabs, tiles = into_dc.then
    assert isinstance(zero_slabs, Loop) and dc in {x.array for x in walk_stmts([zero_slabs]) if isinstance(x, Store)}
    assert (tiles.lo, tiles.step) == (K.Int(0), 1)  # the tile index, unit step
    rb, re, per_slab = tiles.body
    assert rb.value == K.IBin("+", before.lo, K.IBin("*", K.Int(TILE), K.Name(tiles.var)))
    assert re.value == K.MinMax("min", (before.hi, K.IBin("+", K.Name(rb.target), K.Int(TILE))))
    (elements,) = [x for x in per_slab.body if isinstance(x, Loop)]
    assert (elements.lo, elements.hi) == (before.body[0].lo, before.body[0].hi)  # each element of the slab
    zero, dot, store = elements.body
    assert isinstance(zero, Assign) and zero.value == K.Float(0.0)
    assert dot.kind == "sum" and dot.lanes == LANES and dot.step == 1 and dot.var == before.var
    assert len(dot.body) == 1 and isinstance(dot.body[0], AccAdd) and dot.body[0].target == zero.target
    assert (dot.lo, dot.hi) == (K.Name(rb.target), K.Name(re.target))  # the tile's points of i
    assert isinstance(store, Store) and store.array == dc  # dc is written once per element and tile
    assert store.value == K.FSum((K.Load(dc, store.index, True), K.Name(zero.target)))
    # the general side: the slab loop as it was, its nest over all of i (jammed by two
    # when printed, jam.py: pairs of points of i, then at most one point as a test)
    (general,) = [s for s in walk_stmts(printed_ir(ir).body) if isinstance(s, If) and s.cond == into_dc.cond
                  and any(isinstance(x, Store) and x.array == dc for x in walk_stmts(s.orelse))]
    (rest,) = [s for s in walk_stmts(general.orelse) if isinstance(s, Loop) and s.step == 2
               and any(isinstance(x, Store) and x.array == dc for x in walk_stmts(s.body))]
    assert rest.var == before.var and rest.lo == before.lo
    # the parallel variant gathers too, and it prints (offsets.py, roll.py accept it)
    par = printed_ir(ir, True)
    assert any(isinstance(x, Loop) and x.lanes == LANES for x in walk_stmts(par.body))
    assert "_a%d" % (LANES - 1) in k.source  # codegen printed the requested lanes
    assert printed_ir(ir) is not None


@pytest.mark.parametrize("n,m", [(2000, 3), (1999, 16), (1100, 63), (1100, 1023), (1100, 1024), (15, 5), (16, 5), (17, 1),
                                 (RUN_MIN - 1, 5), (RUN_MIN, 5), (40, RUN_MIN + 3),
                                 (2 * TILE + LANES + 3, 7), (2 * TILE, 16), (TILE + 5, 63),
                                 (600, 1030)])
def test_deconv_dc_order_is_the_documented_one_bitwise(n, m):
    # c shorter than SHORT and n >= RUN_MIN: the gathers' order; otherwise the nest's own order (i
    # ascending), also for m = 1030, whose second tile's slab is short but c is not (module doc);
    # n = 2 TILE + LANES + 3 and 2 TILE: a last tile with and without a group of lanes
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
    assert any(isinstance(s, Loop) and s.lanes == LANES for s in walk_stmts(run.body))
    rng = np.random.default_rng(13)
    for B, n, m in ((3, 200, 5), (2, 15, 4), (4, 333, 63), (2, RUN_MIN + 2 * LANES + 1, 16), (3, TILE + 700, 5)):
        d = w.data({"B": B, "n": n, "m": m}, rng)
        gw = g(**d)  # one input: its gradient
        np.testing.assert_allclose(gw, w.grad_ref(d)["w"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n,m", [(5000, 16), (3000, 7), (40, 3), (100, 3)])
def test_threads_do_not_change_the_gradient(n, m):
    # the parallel variant's chunks cover disjoint tiles and gather as the serial kernel does: dx
    # bitwise the serial result; dc (one tile, its sum over n in per-thread copies, chunks.py) to rounding,
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
