"""Consumers of a tiled accumulation run inside its tile loop (issue #13: the
deconvolution primal within 2x of the machine's limit; backend/tilefuse.py).

The deconvolution's ``y = gen[i] Σ_j x[i - j + m - 1]·c[j]`` is accumulated
one tile of ``y`` at a time (interchange.py, scatter.py); its loss
``Σ_i (y[i] - z[i])²`` (and, in the gradient, ``dY = 2 (y - z)``) reads
``y`` once, at its own point.  The serial kernel now runs that consumer at
the end of each tile, on a tile buffer: ``y`` is never stored.

Structure (the serial loop IR: one top-level loop, no store into ``y``, a
tile buffer of ``TILE`` elements; the parallel variant runs it per thread
chunk, chunks.py), the
loss's order of additions done in NumPy, bitwise (codegen's four lanes
over ``[0, n)``, carried across tiles), at sizes around the tile boundary
(n < TILE, = TILE, = TILE + 1, m = 1, m > n, n below short_slabs.SHORT where
``y`` is gathered), the gradient against NumPy, ``threads=2`` in its
order in test_parallel_chunks.py, and the legality checks refusing what
they must (a consumer at a shifted point, a partial range, an access out
of its tile's slab, proved with isl).  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import codegen
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir
from tensorlang.backend.interchange import TILE
from tensorlang.backend.loopir import AccAdd, Alloc, Assign, KernelIR, Loop, Store, walk_stmts
from tests.backend.test_short_slabs import gathered_order
from tensorlang.backend.roll import LANES
from tensorlang.backend.tilefuse import tile_consumers


pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


def _deconv():
    from benchmarks.workloads import _deconv_program

    return _deconv_program()


def _data(n, m, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}


def gradient_as_without(monkeypatch, n, m, seed, patches: dict, tag: str):
    """The deconvolution gradient at (n, m), one thread: bitwise as compiled with
    ``patches`` ({(module, name): value}, a pass switched off) and against NumPy."""
    from benchmarks.workloads import _deconv_grad

    from tensorlang.backend import api, codegen

    loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=1)
    d = _data(n, m, seed)
    with monkeypatch.context() as mp:
        for (mod, name), value in patches.items():
            mp.setattr(mod, name, value)
        mp.setattr(codegen, "_PASSED", {})
        mp.setattr(api, "CODEGEN_VERSION", api.CODEGEN_VERSION + tag)
        want = tl.compile(g.program, threads=1)(**d)  # compiled here, at these sizes, without the pass
    got = tl.compile(g.program, threads=1)(**d)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    ref = _deconv_grad(d)
    np.testing.assert_allclose(got[0], ref["x"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], ref["c"], rtol=1e-10, atol=1e-12)


def _y_in_kernel_order(x, c, n):
    """y[i] = Σ_j x[i - j + m - 1]·c[j] accumulated over j from 0 (gathered, short_slabs.py, when n < SHORT)."""
    m = len(c)
    return gathered_order(np.stack([x[m - 1 - j: m - 1 - j + n] * c[j] for j in range(m)]), n)


def _squares(d):
    v = _y_in_kernel_order(d["x"], d["c"], len(d["z"])) + (-d["z"])
    return v * v


def _loss_in_lane_order(d) -> float:
    """Σ_i sq[i] in codegen's lanes over [0, n): lane k adds i = 4q + k, the remainder goes to
    lane 0, then lane 0 + ((lane 1 + lane 2) + lane 3)."""
    sq = [float(s) for s in _squares(d)]
    acc = [0.0] * LANES
    q = (len(sq) // LANES) * LANES
    for i in range(q):
        acc[i % LANES] += sq[i]
    for i in range(q, len(sq)):
        acc[0] += sq[i]
    rest = acc[1]
    for a in acc[2:]:
        rest = rest + a
    return acc[0] + rest


def _stored(stmts) -> set:
    return {s.array for s in walk_stmts(stmts) if isinstance(s, Store)}


def _loaded(stmts) -> set:
    out: set = set()

    def go(e):
        if isinstance(e, K.Load):
            out.add(e.array)
        if isinstance(e, tuple):
            for x in e:
                go(x)
        elif isinstance(e, K.KExpr) and not isinstance(e, (K.Int, K.Bool, K.Float, K.Name)):
            for f in e.__dataclass_fields__:
                go(getattr(e, f))

    for s in walk_stmts(stmts):
        for f in ("lo", "hi", "cond", "value", "index"):
            if hasattr(s, f):
                go(getattr(s, f))
    return out


def _y(ir) -> str:
    (name,) = [a.name for a in ir.allocs if a.binding == "y"]
    return name


def test_primal_serial_kernel_never_stores_y():
    loss, _ = _deconv()
    ir = tl.compile(loss, threads=1).loop_ir
    y = _y(ir)
    assert y in _stored(ir.body)  # the lowering accumulates y, then the loss reads it (two passes)
    run = printed_ir(ir)
    assert y not in _stored(run.body) and y not in _loaded(run.body)
    tops = [s for s in run.body if isinstance(s, Loop)]
    assert len(tops) == 1  # one pass: the tile loop, the loss at the end of each tile
    (buf,) = [s for s in run.body if isinstance(s, Alloc) and s.shape == (K.Int(TILE),)]
    assert buf.name in _stored(tops[0].body) and buf.name in _loaded(tops[0].body)
    # the loss's sum in LANES partial sums: a stepped loop inside the tile loop
    assert any(s.step == LANES and any(isinstance(x, AccAdd) for x in s.body) for s in walk_stmts(tops[0].body)
               if isinstance(s, Loop))
    # the parallel variant runs this loop nest per thread chunk (chunks.py; test_parallel_chunks.py)
    par = printed_ir(ir, True)
    assert y not in _stored(par.body) and y not in _loaded(par.body)


@pytest.mark.parametrize("n,m", [(1, 1), (3, 10), (5, 3), (63, 4), (64, 4), (TILE - 1, 3), (TILE, 1), (TILE, 16),
                                 (TILE + 1, 3), (2 * TILE + 1, 5), (3 * TILE + 7, 2), (TILE + 2, 1100)])
def test_primal_is_the_documented_order_bitwise(n, m):
    loss, _ = _deconv()
    f = tl.compile(loss, threads=1)
    d = _data(n, m, 3 * n + m)
    got = f(**d)
    assert got == _loss_in_lane_order(d)
    y = np.convolve(d["x"], d["c"], mode="valid")
    assert abs(got - float(((y - d["z"]) ** 2).sum())) <= 1e-12 * max(1.0, abs(got))
    assert f(**d) == got  # a second call (pooled arrays hold the first call's values)


def test_float32_primal():
    loss, _ = _deconv()
    f = tl.compile(loss, threads=1)
    d = {k: v.astype(np.float32) for k, v in _data(TILE + 5, 7, 1).items()}
    got = f(**d)
    assert isinstance(got, np.float32) or np.asarray(got).dtype == np.float32
    y = np.convolve(d["x"].astype(np.float64), d["c"].astype(np.float64), mode="valid")
    ref = float(((y - d["z"]) ** 2).sum())
    assert abs(float(got) - ref) <= 1e-4 * ref


def test_gradient_serial_kernel_never_stores_y():
    loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]])
    ir = tl.compile(g.program, threads=1).loop_ir
    y = _y(ir)
    run = printed_ir(ir)
    assert y in _stored(ir.body)
    assert y not in _stored(run.body) and y not in _loaded(run.body)
    (dy,) = [a.name for a in ir.allocs if a.binding == "dY"]
    # dY = 2 (y - z) is read by both later nests: written, per tile (or, where the
    # size test of dc's version holds, into two tiles: ring.py, tests/backend/test_ring.py)
    assert dy in _stored(codegen._variant_passes(ir, False).body)


@pytest.mark.parametrize("n,m", [(1, 1), (3, 10), (TILE - 1, 3), (TILE, 16), (TILE + 1, 3), (2 * TILE + 3, 64)])
def test_gradient_values(n, m):
    from benchmarks.workloads import _deconv_grad

    loss, v = _deconv()
    for threads in (1, 2):
        g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=threads)
        d = _data(n, m, n + 7 * m)
        gx, gc = g(**d)
        ref = _deconv_grad(d)
        np.testing.assert_allclose(gx, ref["x"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gc, ref["c"], rtol=1e-10, atol=1e-12)


def test_value_and_grad_values():
    from benchmarks.workloads import _deconv_grad

    loss, v = _deconv()
    vg = tl.value_and_grad(loss, [v["x"], v["c"]])
    for n, m in ((TILE + 1, 3), (70, 5)):
        d = _data(n, m, n + m)
        val, (gx, gc) = vg(**d)
        y = np.convolve(d["x"], d["c"], mode="valid")
        assert abs(val - float(((y - d["z"]) ** 2).sum())) <= 1e-12 * val
        ref = _deconv_grad(d)
        np.testing.assert_allclose(gx, ref["x"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gc, ref["c"], rtol=1e-10, atol=1e-12)


def _conv(n, m):
    x = tl.tensor("x", n + m - 1)
    c = tl.tensor("c", m)
    return x, c, tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))


def test_a_consumer_at_a_shifted_point_is_not_fused():
    # Σ_{i < n-1} (y[i+1] - y[i])²: reads y off its own point, over [0, n-1): y stays an array
    n, m = tl.sizes("n m")
    x, c, conv = _conv(n, m)
    loss = tl.let(conv, lambda y: tl.sum(n - 1, lambda i: (y[i + 1] - y[i]) ** 2))
    f = tl.compile(loss, threads=1)
    ir = f.loop_ir
    (y,) = [a.name for a in ir.allocs if a.binding == "y"]
    assert y in _stored(printed_ir(ir).body)
    rng = np.random.default_rng(2)
    for nn, mm in ((TILE + 1, 3), (10, 4)):
        d = {"x": rng.normal(size=nn + mm - 1), "c": rng.normal(size=mm)}
        yy = np.convolve(d["x"], d["c"], mode="valid")
        ref = float((np.diff(yy) ** 2).sum())
        assert abs(f(**d) - ref) <= 1e-12 * ref


def test_two_consumers_fuse_together():
    # Σ y[i]² and Σ y[i]·z[i]: both read y at their own point; both run in the tile loop
    n, m = tl.sizes("n m")
    x, c, conv = _conv(n, m)
    z = tl.tensor("z", n)
    loss = tl.let(conv, lambda y: tl.sum(n, lambda i: y[i] * y[i]) + tl.sum(n, lambda i: y[i] * z[i]))
    f = tl.compile(loss, threads=1)
    ir = f.loop_ir
    (y,) = [a.name for a in ir.allocs if a.binding == "y"]
    run = printed_ir(ir)
    assert y not in _stored(run.body) and len([s for s in run.body if isinstance(s, Loop)]) == 1
    rng = np.random.default_rng(4)
    for nn, mm in ((TILE + 3, 3), (2 * TILE, 1), (7, 9)):
        d = {"x": rng.normal(size=nn + mm - 1), "c": rng.normal(size=mm), "z": rng.normal(size=nn)}
        yy = np.convolve(d["x"], d["c"], mode="valid")
        ref = float((yy * yy).sum() + (yy * d["z"]).sum())
        assert abs(f(**d) - ref) <= 1e-12 * max(1.0, abs(ref))


# -- the pass on hand-built loop IR: what the legality checks refuse -------------------


def _tile_ir(write_off=0, hi_cut=0, cons_hi=None, tile=8, n_cut=0):
    """for t: zero D's slab; for h in [8t, min(n - n_cut, 8t + 8) - hi_cut): D[h + write_off] +=
    x[h]; then acc = Σ_{i < cons_hi} D[i]."""
    N, t, h, z, i = K.Name("n0"), K.Name("i0"), "i1", "i2", "i3"
    lo = K.IBin("*", K.Int(tile), t)
    hi = K.MinMax("min", (N, K.IBin("+", lo, K.Int(tile))))
    zero = Loop(z, lo, hi, 1, (Store("t0", (K.Name(z),), K.Float(0.0)),), "gen")
    at = (K.int_add(K.Name(h), K.Int(write_off)),)
    h_hi = K.MinMax("min", (K.IBin("-", N, K.Int(n_cut)), K.IBin("+", lo, K.Int(tile)))) if n_cut else hi
    acc = Loop(h, lo, K.IBin("-", h_hi, K.Int(hi_cut)) if hi_cut else h_hi, 1,
               (Store("t0", at, K.FSum((K.Load("t0", at), K.Load("x0", (K.Name(h),))))),), "scatter")
    n_tiles = K.IBin("+", K.IBin("//", K.IBin("-", N, K.Int(1)), K.Int(tile)), K.Int(1))
    alloc = Alloc("t0", (N,), False, "temporary", "y", True)
    body = [alloc, Loop("i0", K.Int(0), n_tiles, 1, (zero, acc), "scatter"), Assign("v0", K.Float(0.0)),
            Loop(i, K.Int(0), cons_hi or N, 1, (AccAdd("v0", K.Load("t0", (K.Name(i),))),), "sum")]
    return KernelIR(["n0", "x0", "t0"], [alloc], body, ["v0"])


@pytest.mark.parametrize("kw", [{}, {"write_off": 1, "hi_cut": 1}])  # D[h + 1] for h < the slab's end - 1: inside
def test_hand_ir_fuses_when_every_check_holds(kw):
    run = tile_consumers(_tile_ir(**kw))
    assert "t0" not in _stored(run.body) and "t0" not in _loaded(run.body)
    assert len([s for s in run.body if isinstance(s, Loop)]) == 1


@pytest.mark.parametrize("kw", [
    {"write_off": 1, "n_cut": 1},  # D[h + 1] for h < min(n - 1, 8t + 8): into the next tile's slab
    {"write_off": -1},  # D[h - 1]: the first point writes into the previous slab (or D[-1])
    {"cons_hi": K.IBin("-", K.Name("n0"), K.Int(1))},  # the consumer misses D's last point
])
def test_hand_ir_refused(kw):
    ir = _tile_ir(**kw)
    assert tile_consumers(ir) is ir
