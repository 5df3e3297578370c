"""A temporary touched only inside one tile loop, read at most one tile back,
kept in a buffer of two tiles (issue #13: the deconvolution's
gradient/primal time; backend/ring.py).

Structure: in the deconvolution gradient's serial kernel for a size class
whose ``dc`` is gathered tile by tile, the fused tile loop reads and writes
``dY`` only through an array chosen by the size test (the two-tile buffer
where it holds, ``dY`` itself where the general side's readers after the
loop run), with the window's offset, in the all-versions kernel too; the
parallel variant keeps ``dY``.  Values: the gradient bitwise as compiled
without the pass and against NumPy at sizes around the tile boundary and on
the general side (``m >= SHORT``).  Legality on hand-built loop IR, run as
plain Python against the unrewritten IR: a read one tile back kept in the
buffer, a read two tiles back refused, an unguarded reader after the loop
refused, a reader on the else side of a size test kept with the test.
Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorlang.backend import codegen
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import printed_ir
from tensorlang.backend.interchange import TILE
from tensorlang.backend.loopir import Alloc, Assign, If, KernelIR, Loop, Store
from tensorlang.backend.ring import ring_temps
from tensorlang.backend.short_slabs import SHORT
from tests.backend.test_tile_consumers import _loaded, _stored, gradient_as_without
from tests.backend.test_tilechain import _gradient_ir

pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


def _version_test(run, dy):
    """The size test of the fused loop's version of ``dc`` (short_slabs.py, tilechain.py)."""
    (loop,) = [s for s in run.body if isinstance(s, Loop) and dy in _stored([s])]
    (cond,) = {s.cond for s in loop.body if isinstance(s, If) and s.general == "orelse" and dy in _loaded([s])}
    return cond


def test_gradient_class_kernel_keeps_dy_in_two_tiles():
    ir, dy = _gradient_ir()
    cond = _version_test(codegen.chain_tiles(codegen.serial_passes(ir)), dy)
    run = printed_ir(ir, False, {cond: True})  # the class of m < SHORT, n >= RUN_MIN
    (loop,) = [s for s in run.body if isinstance(s, Loop)]
    assert dy not in _stored([loop]) and dy not in _loaded([loop])
    # the array the loop uses: the two-tile buffer where the test holds, dY where it fails
    (pick,) = [s for s in run.body if isinstance(s, Assign) and isinstance(s.value, K.Select)]
    ring = pick.value.then.name
    assert pick.value.test == cond and pick.value.orelse == K.Name(dy)
    assert any(isinstance(s, Alloc) and s.name == ring and s.shape == (K.Int(2 * TILE),) for s in run.body)
    assert pick.target in _stored([loop]) and pick.target in _loaded([loop])
    # each tile starts by moving the upper half to the lower half, under the test
    head = loop.body[1]
    assert isinstance(head, If) and head.cond == cond and isinstance(head.then[0], Loop)
    # the general side's reader after the loop still reads dY itself
    after = [s for s in run.body if isinstance(s, If) and dy in _loaded([s])]
    assert after and all(not s.then and s.cond == cond for s in after)


def test_all_versions_kernel_chooses_by_the_test_and_parallel_keeps_dy():
    ir, dy = _gradient_ir()
    cond = _version_test(codegen.chain_tiles(codegen.serial_passes(ir)), dy)
    (pick,) = [s for s in printed_ir(ir).body if isinstance(s, Assign) and isinstance(s.value, K.Select)]
    assert pick.value.test == cond
    par = printed_ir(ir, True)
    assert not any(isinstance(s, Assign) and isinstance(s.value, K.Select) for s in par.body)
    assert dy in _stored(par.body) and dy in _loaded(par.body)


@pytest.mark.parametrize("n,m", [(1, 1), (TILE - 1, 3), (TILE, 3), (TILE + 1, 3), (2 * TILE + 3, 16),
                                 (3 * TILE + 7, 64), (4 * TILE + 5, SHORT - 1), (TILE + 2, SHORT + 3)])
def test_gradient_bitwise_as_without_the_pass(monkeypatch, n, m):
    gradient_as_without(monkeypatch, n, m, 7 * n + m, {(codegen, "ring_temps"): lambda ir: ir}, "-noring-test")


# -- legality on hand-built loop IR, run as plain Python ----------------------------------

KT = 8  # the hand-built loop's tile
N, U, I, J = K.Name("n0"), K.Name("u"), K.Name("i"), K.Name("j")


def _tile_loop(var, body):
    """``for var in [K u, min(n0, K u + K)): body``."""
    lo = K.IBin("*", K.Int(KT), U)
    return Loop(var, lo, K.MinMax("min", (N, K.IBin("+", lo, K.Int(KT)))), 1, tuple(body), "gen")


def _ir(back: int, after=()):
    """Tiles of ``KT``: ``t0[i] = 2 x0[i]``, then ``t1[j] = t0[j] + t0[j - back]`` (``j >= back``)."""
    write = _tile_loop("i", [Store("t0", (I,), K.FMul(K.Float(2.0), K.Load("x0", (I,), True)))])
    prev = K.IBin("-", J, K.Int(back))
    read = _tile_loop("j", [Store("t1", (J,), K.Load("t0", (J,), True)),
                            If(K.Cmp(">=", J, K.Int(back)),
                               (Store("t1", (J,), K.FSum((K.Load("t1", (J,), True), K.Load("t0", (prev,), True)))),))])
    tiles = K.IBin("//", K.IBin("+", N, K.Int(KT - 1)), K.Int(KT))
    allocs = [Alloc("t0", (N,), False, "temporary", "A"), Alloc("t1", (N,), True, "output", "B")]
    body = [allocs[0], allocs[1], Loop("u", K.Int(0), tiles, 1, (write, read), "gen"), *after]
    return KernelIR(["n0", "x0"], allocs, body, ["t1"])


def _run(ir, n):
    src = codegen.source(ir, "float64", cache=False)
    ns: dict = {}
    exec(compile(src, "<kernel>", "exec"), ns)
    (out,) = ns["kernel_serial"].py_func(n, np.arange(1.0, n + 1.0))
    return out


def _ringed(ir) -> bool:
    return any(isinstance(s, Alloc) and s.shape == (K.Int(2 * KT),) for s in ring_temps(ir).body)


@pytest.mark.parametrize("back", [1, KT - 1, KT])
def test_a_read_up_to_one_tile_back_is_kept_in_two_tiles(back):
    ir = _ir(back)
    out = ring_temps(ir)
    assert _ringed(ir) and "t0" not in _loaded(out.body[2:]) and "t0" not in _stored(out.body[2:])
    for n in (0, 1, KT - 1, KT, KT + 1, 3 * KT + 5):
        np.testing.assert_array_equal(_run(out, n), _run(ir, n))


def test_a_read_two_tiles_back_is_refused():
    assert not _ringed(_ir(KT + 1))


def test_a_reader_after_the_loop_is_refused():
    after = (Loop("k", K.Int(0), N, 1, (Store("t1", (K.Name("k"),), K.Load("t0", (K.Name("k"),), True)),), "gen"),)
    assert not _ringed(_ir(1, after))


def test_a_reader_on_the_else_side_of_a_size_test_keeps_the_test():
    small = K.Cmp("<", N, K.Int(20))
    reader = Loop("k", K.Int(0), N, 1, (Store("t1", (K.Name("k"),), K.Load("t0", (K.Name("k"),), True)),), "gen")
    ir = _ir(3, (If(small, (), (reader,)),))
    out = ring_temps(ir)
    assert _ringed(ir)
    (pick,) = [s for s in out.body if isinstance(s, Assign)]
    assert pick.value.test == small and pick.value.orelse == K.Name("t0")
    for n in (5, KT + 3, 19, 20, 3 * KT + 1):  # both sides of the test
        np.testing.assert_array_equal(_run(out, n), _run(ir, n))
