"""Code a cold first call compiles for nothing (issue #14 item 6).

Numba types, lowers and hands to LLVM every line of the serial kernel, at
a few milliseconds a line, whether or not the line can ever run.  Checked
here on the structure (loop IR, printed source), values against NumPy:

* a tiled accumulation whose tile loop runs every tile at every size
  zeroes its output only tile by tile, with no whole-array zeroing guarded
  by the sizes at which some point has no term (scatter.py);
* a reduction of fewer than ``LANES`` iterations at every size (the n-body's
  sums over 3 coordinates) gets no partial-sum lanes, whose loop could
  never run (codegen.py);
* a constant assignment overwritten before any read is not printed
  (deadinit.py);
* the serial kernel's unit-step loops are ``while`` loops, not ``range``
  iterators (codegen.py ``_while``): the same counted loops for LLVM, less for Numba
  to type and lower; the parallel variant keeps ``prange``/``range``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import LANES, _lanes_never_run
from tensorlang.backend.deadinit import drop_dead_inits
from tensorlang.backend.loopir import AccAdd, Assign, Break, If, KernelIR, Loop, Store, walk_stmts


def _workload(name):
    from benchmarks.workloads import BY_NAME

    w = BY_NAME[name]
    loss, v = w.program()
    return w, tl.grad(loss, wrt=[v[k] for k in w.wrt])


def _serial(src: str) -> str:
    return src.split("def kernel_serial")[1].split("def kernel_parallel")[0]


def _zeroing_guards(ir) -> list:
    """Top-level ``if`` statements whose branch zeroes an array (``a[..] = 0.0`` loops)."""
    return [s for s in ir.body if isinstance(s, If)
            and any(isinstance(t, Store) and K.is_const(t.value, 0.0) for t in walk_stmts(s.then))]


@pytest.mark.parametrize("name", ["deconv-m16", "batched-conv"])
def test_tiled_accumulations_zero_only_per_tile(name):
    """The tile loops run ``range(0, (n - 1) // 1024 + 1)`` whatever the other
    sizes are, so each slab is zeroed as its tile starts even at sizes where
    some output element has no term (m = 0): no whole-array zeroing under a
    size test before them.  Values at small and tile-edge sizes against the
    workload's NumPy gradient."""
    w, g = _workload(name)
    ir = tl.compile(g.program).loop_ir
    assert not _zeroing_guards(ir)
    tiles = [s for s in ir.body if isinstance(s, Loop) and s.kind == "scatter"]
    assert len(tiles) == (3 if name.startswith("deconv") else 2)
    rng = np.random.default_rng(11)
    cases = [(1, 1), (2, 1), (1, 3), (5, 3), (1023, 2), (1024, 1), (1025, 16), (1030, 1100)]
    for n, m in cases:
        sizes = dict(w.quick, n=n, m=m)
        d = w.make_data(sizes, seed=int(rng.integers(1 << 30)))
        for _ in range(2):  # pooled temporaries keep the previous call's values
            got = g(**d)
        got = (got,) if len(w.wrt) == 1 else got
        ref = w.grad_ref(d)
        for k, a in zip(w.wrt, got):
            np.testing.assert_allclose(a, ref[k], rtol=1e-10, atol=1e-12)


def test_no_lanes_where_their_loop_cannot_run():
    """A sum over 3 coordinates: fewer iterations than LANES at every size,
    printed as one plain loop (the n-body's distances); a sum over ``n``
    keeps its lanes."""
    assert _lanes_never_run(K.Int(0), K.IBin("+", K.Int(2), K.Int(1)))
    assert not _lanes_never_run(K.Int(0), K.Int(LANES))
    assert not _lanes_never_run(K.Int(0), K.Name("n0"))
    n = tl.size("n")
    p = tl.tensor("p", n, 3)
    e = tl.gen(n, lambda i: tl.sum(3, lambda k: p[i, k] * p[i, k]) + tl.sum(n, lambda j: p[j, 0]))
    k = tl.compile(e)
    src = _serial(k.source)
    assert src.count("_a1 = F(0.0)") == 1  # the sum over n only
    pv = np.random.default_rng(2).normal(size=(7, 3))
    np.testing.assert_allclose(k(p=pv), (pv * pv).sum(1) + pv[:, 0].sum(), rtol=1e-13)


def _ir(body) -> KernelIR:
    return KernelIR([], [], list(body), [], {}, set())


def test_dead_inits_dropped_only_when_overwritten_unread():
    v, x = "v0", K.Name("x0")
    set_v = Assign(v, K.FSum((x, K.Float(1.0))))
    got = drop_dead_inits(_ir([Assign(v, K.Float(0.0)), Store("t0", (K.Int(0),), x), set_v])).body
    assert got == [Store("t0", (K.Int(0),), x), set_v]
    kept = [
        [Assign(v, K.Float(0.0)), AccAdd(v, x), set_v],  # read first
        [Assign(v, K.Float(0.0)), Store("t0", (K.Int(0),), K.Name(v)), set_v],
        [Assign(v, K.Float(0.0)), Assign(v, K.FSum((K.Name(v), x)))],  # the new value reads it
        [Assign(v, K.Float(0.0)), If(K.Cmp("<", x, K.Int(1)), (Assign(v, x),)), set_v],  # nested write
        [Assign(v, K.Float(0.0)), If(K.Cmp("<", x, K.Int(1)), (Break(),)), set_v],  # may not get there
        [Assign(v, K.Float(0.0))],
    ]
    for body in kept:
        assert drop_dead_inits(_ir(body)).body == body
    nested = Loop("i0", K.Int(0), K.Name("n0"), 1, (Assign(v, K.Float(0.0)), set_v, Store("t0", (K.Name("i0"),), K.Name(v))), "gen")
    assert drop_dead_inits(_ir([nested])).body[0].body == (set_v, nested.body[2])


_DEAD = re.compile(r"^( +)(\w+) = F\([^()]*\)\n\1\2 = ", re.M)


@pytest.mark.parametrize("name", ["nbody", "quadform", "logreg"])
def test_printed_kernels_have_no_overwritten_constants(name):
    """``v = F(c)`` directly followed by another ``v = ...``: none in the
    serial kernel.  Values against NumPy."""
    w, g = _workload(name)
    k = tl.compile(g.program)
    assert not _DEAD.search(_serial(k.source))
    d = w.make_data(dict(w.quick))
    got = g(**d)
    got = (got,) if len(w.wrt) == 1 else got
    for key, a in zip(w.wrt, got):
        np.testing.assert_allclose(a, w.grad_ref(d)[key], rtol=1e-9, atol=1e-12)


def test_serial_loops_are_while_loops():
    """No ``range`` in the serial kernel but the lanes' stepped loops (which
    LLVM counts only as ``range`` loops), the parallel variant keeps ``prange``; values at sizes that leave loops empty,
    partial lane groups and tile edges, against NumPy."""
    n, m = tl.sizes("n m")
    a = tl.tensor("a", n, m)
    x = tl.tensor("x", m)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: a[i, j] * x[j]))
    k = tl.compile(tl.gen(n, lambda i: y[i] * 2.0), threads=2)
    src = k.source
    fors = [ln.strip() for ln in _serial(src).splitlines() if ln.strip().startswith("for ")]
    assert fors and all(re.fullmatch(rf"for (\w+) in range\(\1_l, \1_h, {LANES}\):", f) for f in fors)  # lanes only
    assert "while " in _serial(src) and "prange(" in src.split("def kernel_parallel")[1]
    rng = np.random.default_rng(4)
    for nn, mm in [(0, 3), (3, 0), (1, 1), (2, 3), (5, 4), (7, 9), (33, 1027)]:
        av, xv = rng.normal(size=(nn, mm)), rng.normal(size=mm)
        np.testing.assert_allclose(k(a=av, x=xv), 2.0 * (av @ xv), rtol=1e-12, atol=1e-12)
