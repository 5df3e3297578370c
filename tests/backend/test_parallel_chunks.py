"""The parallel kernel runs the serial kernel's loop nests in per-thread chunks
(issue #13: "with both cores, the large workloads at least 1.6x faster than
single-threaded"; backend/chunks.py).

Structure, on the loop IR (never the source text): the deconvolution's
parallel variant has the serial kernel's tile loop (tile buffer, the loss's
lanes fused into it, ``y`` never stored) inside a parallel loop over thread
chunks, the gradient's tile loops likewise, and its ``dc`` (a sum over
``n`` into ``m`` elements, one tile) as a chunked accumulation into
per-thread copies inside the tile loop.  Values: ``threads=2`` and ``3``
against NumPy, bitwise against the documented chunk order in NumPy (the
loss), bitwise equal over repeated calls, and ``kernel_parallel`` on one
thread bitwise equal to ``kernel_serial``.  The legality checks refuse a
loop whose iterations store to shared elements (isl) and one carrying a
scalar from one iteration to the next.  Never a time.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.chunks import _chunkable, chunk_loops
from tensorlang.backend.codegen import printed_ir
from tensorlang.backend.interchange import TILE
from tensorlang.backend.loopir import AccAdd, Alloc, Assign, Loop, Store, walk_stmts
from tensorlang.backend.roll import LANES
from tests.backend.test_tile_consumers import _data, _deconv, _loaded, _squares, _stored, _y


pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


def _chunk_loops(stmts):
    """The top-level parallel loops over thread chunks (their upper bound a name: the chunk count)."""
    return [s for s in walk_stmts(stmts) if isinstance(s, Loop) and s.parallel and isinstance(s.hi, K.Name)]


def test_primal_parallel_kernel_runs_the_serial_tile_loop_per_chunk():
    loss, _ = _deconv()
    ir = tl.compile(loss, threads=2).loop_ir
    y = _y(ir)
    par = printed_ir(ir, True)
    assert y not in _stored(par.body) and y not in _loaded(par.body)  # tile fusion, as in the serial kernel
    (chunk,) = [s for s in par.body if isinstance(s, Loop) and s.parallel]
    # the tile buffer is allocated per chunk, the tile loop runs in the chunk
    (buf,) = [s for s in chunk.body if isinstance(s, Alloc) and s.shape == (K.Int(TILE),)]
    (tiles,) = [s for s in chunk.body if isinstance(s, Loop)]
    assert buf.name in _stored(tiles.body) and buf.name in _loaded(tiles.body)
    # the loss's LANES partial sums in the tile loop, into per-chunk accumulators
    lanes = [s for s in walk_stmts(tiles.body) if isinstance(s, Loop) and s.step == LANES]
    accs = {a.target for s in lanes for a in s.body if isinstance(a, AccAdd)}
    assert len(accs) == LANES
    assert all(a in {x.target for x in chunk.body if isinstance(x, Assign)} for a in accs)
    assert len(_chunk_loops(par.body)) == 1


def test_gradient_parallel_kernel_chunks_every_nest():
    loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]])
    ir = tl.compile(g.program, threads=2).loop_ir
    y = _y(ir)
    par = printed_ir(ir, True)
    assert y not in _stored(par.body) and y not in _loaded(par.body)
    # three nests (y with dY, dx, dc), each with a chunk loop around its tile loop
    tops = _chunk_loops(par.body)
    assert sum(any(isinstance(s, Loop) for s in c.body) for c in tops) >= 3
    # dc: a chunked accumulation inside the serial tile loop, into [T, m] copies at the chunk index
    inner = [c for top in walk_stmts(par.body) if isinstance(top, Loop) and not top.parallel
             for c in walk_stmts(top.body) if isinstance(c, Loop) and c.parallel]
    assert inner
    copies = {s.array for c in inner for s in walk_stmts(c.body)
              if isinstance(s, Store) and s.index[0] == K.Name(c.var)}
    assert copies


def _loss_in_tile_chunk_order(d, threads) -> float:
    """The parallel loss (chunks.py over tilefuse.py): the tiles in ``threads``
    contiguous runs, each run's four lanes (lane k adds i = 4q + k, the rest to
    lane 0) from 0, each lane's runs added in run order, then lane 0 + ((lane 1
    + lane 2) + lane 3)."""
    sq = [float(s) for s in _squares(d)]
    n = len(sq)
    tiles = (n - 1) // TILE + 1
    q = (n // LANES) * LANES
    lanes = []
    for c in range(threads):
        acc = [0.0] * LANES
        for t in range(tiles * c // threads, tiles * (c + 1) // threads):
            for i in range(t * TILE, min(n, t * TILE + TILE)):
                acc[i % LANES if i < q else 0] += sq[i]
        lanes.append(acc)
    tot = []
    for k in range(LANES):
        s = lanes[0][k]
        for c in range(1, threads):
            s += lanes[c][k]
        tot.append(s)
    rest = tot[1]
    for a in tot[2:]:
        rest = rest + a
    return tot[0] + rest


@pytest.mark.parametrize("n,m", [(5, 3), (TILE + 1, 3), (3 * TILE + 7, 16), (9 * TILE + 5, 64)])
@pytest.mark.parametrize("threads", [2, 3])
def test_parallel_loss_is_the_documented_order_bitwise(n, m, threads):
    loss, _ = _deconv()
    f = tl.compile(loss, threads=threads)
    d = _data(n, m, 5 * n + m)
    got = f(**d)
    # threads=k runs on min(k, Numba's pool) threads (api.py)
    assert got == _loss_in_tile_chunk_order(d, min(threads, numba.config.NUMBA_NUM_THREADS))
    assert f(**d) == got


@pytest.mark.parametrize("n,m", [(3, 10), (TILE + 1, 3), (5 * TILE + 3, 16), (4 * TILE, 64), (2 * TILE + 3, 1100)])
@pytest.mark.parametrize("threads", [2, 3])
def test_parallel_gradient_values(n, m, threads):
    from benchmarks.workloads import _deconv_grad

    loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=threads)
    d = _data(n, m, n + 7 * m)
    gx, gc = g(**d)
    ref = _deconv_grad(d)
    np.testing.assert_allclose(gx, ref["x"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gc, ref["c"], rtol=1e-10, atol=1e-12)
    gx2, gc2 = g(**d)
    assert np.array_equal(gx, gx2) and np.array_equal(gc, gc2)  # deterministic for a thread count


@pytest.mark.parametrize("m", [3, 16, 64])
def test_one_thread_parallel_kernel_is_the_serial_one_bitwise(m, monkeypatch):
    loss, v = _deconv()
    d = _data(20 * TILE + 11, m, m)
    ser_l = tl.compile(loss, threads=1)(**d)
    ser_g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=1)(**d)
    # threads=2 with Numba's pool capped at one: kernel_parallel(..., n_threads=1)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    par_l = tl.compile(loss, threads=2)(**d)
    par_g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=2)(**d)
    assert par_l == ser_l
    assert all(np.array_equal(a, b) for a, b in zip(par_g, ser_g))


# -- the legality checks, on hand-made loop IR ------------------------------------------


def _ir_loop(index, carried=False):
    """``for t in [0, N): for h in [4 t, 4 t + 4): D[index] = D[index] + 1`` (with
    ``carried``: ``s = s2; s2 = h``, a scalar carried across iterations)."""
    t, h = K.Name("t"), K.Name("h")
    st = Store("D", (index,), K.FSum((K.Load("D", (index,), True), K.Float(1.0))))
    body = (Assign("s", K.Name("s2")), Assign("s2", h)) if carried else ()
    inner = Loop("h", K.IBin("*", K.Int(4), t), K.IBin("+", K.IBin("*", K.Int(4), t), K.Int(4)), 1, (st,), "scatter")
    return Loop("t", K.Int(0), K.Name("N"), 1, (inner,) + body, "scatter")


def test_disjoint_slabs_are_chunked_shared_ones_refused():
    own = _ir_loop(K.Name("h"))
    assert _chunkable(own, [own], 0, (), set()) == ((), (), ())
    shared = _ir_loop(K.IBin("-", K.Name("h"), K.Name("t")))  # tile t's last point is tile t+1's first
    assert _chunkable(shared, [shared], 0, (), set()) is None
    assert _chunkable(_ir_loop(K.Name("h"), carried=True), [_ir_loop(K.Name("h"), carried=True)], 0, (), set()) is None


def test_chunk_loops_leaves_refused_loops_alone():
    from tensorlang.backend.loopir import KernelIR

    shared = _ir_loop(K.IBin("-", K.Name("h"), K.Name("t")))
    ir = KernelIR(["N", "D"], [], [shared], [])
    out, handled = chunk_loops(ir)
    assert not handled and out.body == [shared]


def test_shared_accumulated_array_gets_per_chunk_copies():
    """The same loop accumulating into an allocated ``D`` at shared points: copies per chunk (column sums)."""
    shared = _ir_loop(K.IBin("-", K.Name("h"), K.Name("t")))
    d = Alloc("D", (K.IBin("*", K.Int(4), K.Name("N")),), True, "temporary", "D")
    assert _chunkable(shared, [d, shared], 1, (), set(), {"D": d}) == ((), (), ("D",))


@pytest.mark.parametrize("n", [5, 64, 300])
@pytest.mark.parametrize("threads", [2, 3])
def test_laplacian_loss_column_sums_per_chunk(n, threads, monkeypatch):
    """The 5-point Laplacian's loss (column partial sums, colsum.py) chunked: NumPy, repeated calls,
    one thread bitwise the serial kernel."""
    from benchmarks.parallel_bench import laplacian

    loss, _, data = laplacian(n)
    u, f = data["u"], data["f"]
    lap = 4 * u[1:-1, 1:-1] - u[:-2, 1:-1] - u[2:, 1:-1] - u[1:-1, :-2] - u[1:-1, 2:]
    ref = float((lap ** 2).sum() + ((u - f) ** 2).sum())
    k = tl.compile(loss, threads=threads)
    got = k(**data)
    assert abs(got - ref) <= 1e-12 * ref and k(**data) == got
    ser = tl.compile(loss, threads=1)(**data)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    assert tl.compile(loss, threads=2)(**data) == ser
