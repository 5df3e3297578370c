"""A later tile loop runs inside an earlier one when each of its tiles reads
only what the earlier loop's tiles up to the same one wrote (issue #13: the
deconvolution's gradient/primal time; backend/tilechain.py, with
short_slabs.py's gathers over tiles of ``r`` as a top-level loop).

Structure: the deconvolution gradient's serial loop IR has one top-level
loop that writes ``dY = 2 (y - z)`` and every loop that reads it (``dx``'s
gather and ``dc``'s dot products, the latter as a size-class version whose
general side is the unfused nest); the parallel variant takes ``dc``'s dot
products into the chunked loop that writes ``dY`` and leaves ``dx``'s
gather (a halo from the tile before) a loop of its own.  Values: the gradient
bitwise as compiled without the two changes, and against NumPy, at sizes
around the tile boundary, below ``RUN_MIN`` and at ``m >= SHORT`` (the
general side).  Legality on hand-built loop IR: a read of a later tile, a
scalar left for the later loop, a write the earlier loop reads, each
refused; distance 0 and a halo from the tile before fused.  Never a time.
"""

from __future__ import annotations

import pytest

import tensorlang as tl
from tensorlang.backend import codegen, short_slabs
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir
from tensorlang.backend.interchange import TILE
from tensorlang.backend.loopir import Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts
from tensorlang.backend.tilechain import chain_tiles
from tests.backend.test_tile_consumers import _deconv, _loaded, _stored, gradient_as_without

pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


def _gradient_ir():
    loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]])
    ir = tl.compile(g.program, threads=1).loop_ir
    (dy,) = [a.name for a in ir.allocs if a.binding == "dY"]
    return ir, dy


def test_gradient_serial_kernel_reads_dy_in_the_loop_that_writes_it():
    ir, dy = _gradient_ir()
    run = codegen._variant_passes(ir, False)  # before ring.py keeps dY in two tiles (tests/backend/test_ring.py)
    tops = [s for s in run.body if isinstance(s, (Loop, If))]
    writers = [s for s in tops if dy in _stored([s])]
    assert len(writers) == 1 and isinstance(writers[0], Loop)
    fused = writers[0]
    readers = [s for s in tops if dy in _loaded([s]) and s is not fused]
    # the only other reader: the general side of the dot products' version (the unfused nest)
    assert all(isinstance(s, If) and s.general == "orelse" and not s.then for s in readers), readers
    # inside the fused loop: the tile's own part, dx's gather, dc's dot products under the version test
    parts = fused.body
    assert len(parts) == 3 and all(isinstance(p, If) for p in parts)
    assert dy in _stored(parts[0].then) and dy in _loaded(parts[1].then)
    assert parts[2].general == "orelse" and dy in _loaded(parts[2].then)
    assert fused.hi == K.MinMax("max", tuple(p.cond.rhs for p in parts[:2]) + (parts[2].then[0].cond.rhs,))
    assert parts[2].cond == readers[0].cond  # one test, decided alike by a size class


def test_parallel_variant_chains_only_same_tile_reads():
    ir, dy = _gradient_ir()
    par = printed_ir(ir, True)
    tops = [s for s in par.body if isinstance(s, (Loop, If))]
    # dx (a halo from the tile before) is a loop of its own; dc's dot products run in the
    # chunked loop that writes dY (per-thread chunks of tiles: a prange over the chunks)
    writers = [s for s in tops if dy in _stored([s])]
    assert len(writers) == 1
    assert any(isinstance(x, Loop) and x.parallel for x in walk_stmts([writers[0]]))
    (dc,) = [r for r in ir.results if r != ir.results[0]]
    assert dc in _stored([writers[0]])
    dx = ir.results[0]
    assert dx not in _stored([writers[0]])


@pytest.mark.parametrize("n,m", [(1, 1), (3, 10), (TILE - 1, 3), (TILE, 3), (TILE + 1, 3), (2 * TILE + 3, 16),
                                 (3 * TILE + 7, 64), (5 * TILE, 2), (TILE + 2, 1100)])
def test_gradient_bitwise_as_without_the_pass(monkeypatch, n, m):
    patches = {(codegen, "chain_tiles"): lambda ir, **k: ir, (short_slabs, "_tile_of"): lambda *a: None}
    gradient_as_without(monkeypatch, n, m, 11 * n + m, patches, "-nochain-test")


# -- legality on hand-built loop IR ------------------------------------------------------

N = K.Name("n0")
T_VAR, U_VAR = "i0", "i1"


def _ir(t_body, l_body, between=()):
    """``for i0 in [0, n0): t_body; between; for i1 in [0, n0): l_body`` over x0 (input), t0, t1."""
    allocs = [Alloc("t0", (N,), False, "temporary", "A"), Alloc("t1", (N,), False, "output", "B")]
    body = [allocs[0], Loop(T_VAR, K.Int(0), N, 1, tuple(t_body), "gen"), *between, allocs[1],
            Loop(U_VAR, K.Int(0), N, 1, tuple(l_body), "gen")]
    return KernelIR(["n0", "x0"], allocs, body, ["t1"])


def _ld(a, ix):
    return K.Load(a, (ix,), True)


def _tops(ir):
    return [s for s in ir.body if isinstance(s, Loop)]


I, U = K.Name(T_VAR), K.Name(U_VAR)
WRITE_A = Store("t0", (I,), _ld("x0", I))


def test_a_read_of_the_same_tile_is_fused():
    ir = _ir([WRITE_A], [Store("t1", (U,), _ld("t0", U))])
    out = chain_tiles(ir)
    (loop,) = _tops(out)
    assert isinstance(loop.body[1], If) and "t0" in _loaded(loop.body[1].then)


def test_a_halo_from_the_tile_before_is_fused():
    prev = K.IBin("-", U, K.Int(1))
    guarded = If(K.Cmp(">=", U, K.Int(1)), (Store("t1", (U,), _ld("t0", prev)),))
    assert len(_tops(chain_tiles(_ir([WRITE_A], [guarded])))) == 1


def test_a_read_of_a_later_tile_is_not_fused():
    nxt = K.IBin("+", U, K.Int(1))
    guarded = If(K.Cmp("<", nxt, N), (Store("t1", (U,), _ld("t0", nxt)),))
    assert len(_tops(chain_tiles(_ir([WRITE_A], [guarded])))) == 2


def test_an_index_read_from_data_is_not_fused():
    # B[u] = A[x0[u]]: the index is a value, not a point isl can bound
    ix = K.Load("x0", (U,), True)
    assert len(_tops(chain_tiles(_ir([WRITE_A], [Store("t1", (U,), K.Load("t0", (ix,), True))])))) == 2


def test_a_scalar_left_for_the_later_loop_is_not_fused():
    t_body = [Assign("v0", I), WRITE_A]
    l_body = [Store("t1", (U,), K.FSum((_ld("t0", U), K.Name("v0"))))]
    assert len(_tops(chain_tiles(_ir(t_body, l_body)))) == 2


def test_a_write_the_earlier_loop_reads_is_not_fused():
    t_body = [Store("t0", (I,), _ld("t1", I))]
    l_body = [Store("t1", (U,), _ld("x0", U))]
    assert len(_tops(chain_tiles(_ir(t_body, l_body)))) == 2


def test_a_statement_between_that_both_need_is_not_fused():
    # v1 = t0[0] after T, read by L: it must stay between them
    between = (Assign("v1", _ld("t0", K.Int(0))),)
    l_body = [Store("t1", (U,), K.FSum((_ld("t0", U), K.Name("v1"))))]
    assert len(_tops(chain_tiles(_ir([WRITE_A], l_body, between)))) == 2


def test_independent_loops_are_left_to_hfuse():
    assert len(_tops(chain_tiles(_ir([WRITE_A], [Store("t1", (U,), _ld("x0", U))])))) == 2
