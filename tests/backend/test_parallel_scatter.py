"""Issue #13 item 4: scatter loops (backend scatter.py) in parallel.

An accumulating loop ``D[h(y)] += term(y)`` writes shared elements; its
parallel variant (codegen ``split_scatters``) gives each thread a private
slice of a ``[T, ...]`` buffer over a contiguous, work-balanced run of the
outer loop, then adds the slices in chunk order.  Checked here, on the
n-body gradient and on a sparse least-squares gradient (``A^T r`` run over
the relation in row order):

* the kernel IR of the parallel variant has a parallel chunk loop writing
  per-thread slices (found on the loop IR, not on source text), and a small
  output keeps the serial loop only (the rule is decided at run time);
* two threads against one thread and against NumPy / SciPy: equal to
  rounding; two runs with two threads: bitwise equal.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tensorlang as tl
from tests.nbody import nbody, nbody_grad_ref
from tensorlang.backend import kir as K
from tensorlang.backend.codegen import split_scatters
from tensorlang.backend.loopir import Alloc, Loop, Store, walk_stmts





def _least_squares():
    n, m = tl.sizes("n m")
    S = tl.relation("S", n, m)
    A = tl.sparse_tensor("A", S)
    x, b = tl.tensor("x", m), tl.tensor("b", n)
    r = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j]) - b[i])
    loss = tl.let(r, lambda r: tl.sum(n, lambda i: r[i] * r[i]))
    return loss, x


def _split_parts(ir):
    """The parallel variant's scatter splits, from the loop IR: the parallel
    loops over thread chunks (each storing, at its own chunk index, into
    arrays allocated with the chunk count as first extent), and those arrays."""
    body = split_scatters(ir)
    allocs = [s for s in walk_stmts(body) if isinstance(s, Alloc)]
    chunks, slabs = [], set()
    for c in walk_stmts(body):
        if not (isinstance(c, Loop) and c.parallel):
            continue
        mine = {a.name for a in allocs if a.shape and a.shape[0] == c.hi and a.zero and a.role == "temporary"
                and not a.pooled}
        # an accumulation s[c, ...] = s[c, ...] + term into a zeroed temporary
        hit = {s.array for s in walk_stmts(c.body) if isinstance(s, Store) and s.array in mine
               and s.index[0] == K.Name(c.var) and isinstance(s.value, K.FSum)
               and s.value.terms[0] == K.Load(s.array, s.index)}
        if hit:
            chunks.append(c)
            slabs |= hit
    parts = {s.array for c in chunks for s in walk_stmts(c.body) if isinstance(s, Store)}
    return chunks, parts, slabs


def test_nbody_gradient_has_a_parallel_scatter_variant():
    loss, p = nbody()
    ir = tl.compile(tl.grad(loss, wrt=[p]).program, threads=2).loop_ir
    assert any(lp.kind == "scatter" and not lp.parallel for lp in walk_stmts(ir.body) if isinstance(lp, Loop))
    chunks, parts, slabs = _split_parts(ir)
    assert len(chunks) == 1
    # every store in the chunk goes to a per-thread slice (or a private local)
    # allocated with the thread count as its first extent
    assert len(slabs) == 2 and slabs <= parts


def test_nbody_two_threads_vs_one():
    loss, p = nbody()
    x = np.random.default_rng(7).uniform(-1, 1, (700, 3))
    g1 = tl.grad(loss, wrt=[p], threads=1)
    g2 = tl.grad(loss, wrt=[p], threads=2)
    a1, a2, a2b = g1(p=x), g2(p=x), g2(p=x)
    np.testing.assert_allclose(a2, a1, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(a2, nbody_grad_ref(x), rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(a2, a2b)  # bitwise, the same thread count
    assert not np.array_equal(a2, a1)  # the chunked order did run (sums differ by rounding)


def test_small_nbody_keeps_the_serial_order():
    # n = 20: 2 x 20 x 3 outputs x 2 threads x 4 > the ~210 pair iterations: serial
    loss, p = nbody()
    x = np.random.default_rng(8).uniform(-1, 1, (20, 3))
    a1 = tl.grad(loss, wrt=[p], threads=1)(p=x)
    a2 = tl.grad(loss, wrt=[p], threads=2)(p=x)
    np.testing.assert_array_equal(a2, a1)
    np.testing.assert_allclose(a2, nbody_grad_ref(x), rtol=1e-12, atol=1e-12)


def test_sparse_least_squares_two_threads_vs_one():
    sp = pytest.importorskip("scipy.sparse")
    loss, x = _least_squares()
    g1, g2 = tl.grad(loss, wrt=[x], threads=1), tl.grad(loss, wrt=[x], threads=2)
    ir = tl.compile(g2.program, threads=2).loop_ir
    chunks, parts, slabs = _split_parts(ir)
    assert len(chunks) == 1 and len(slabs) == 1
    M = sp.random(600, 500, density=0.1, random_state=5, format="csr")
    rng = np.random.default_rng(5)
    xv, bv = rng.normal(size=500), rng.normal(size=600)
    a1, a2, a2b = g1(A=M, x=xv, b=bv), g2(A=M, x=xv, b=bv), g2(A=M, x=xv, b=bv)
    want = 2 * (M.T @ (M @ xv - bv))
    np.testing.assert_allclose(a1, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a2, a1, rtol=1e-11, atol=1e-11)
    np.testing.assert_array_equal(a2, a2b)
    assert not np.array_equal(a2, a1)


def _hand_ir(term):
    """for i0 in range(n0): t0[x0[i0]] = t0[x0[i0]] + term (a scatter, by hand)."""
    from tensorlang.backend.loopir import KernelIR

    at = (K.Load("x0", (K.Name("i0"),)),)
    st = Store("t0", at, K.FSum((K.Load("t0", at), term)))
    alloc = Alloc("t0", (K.Name("n1"),), True, "output", "d")
    lp = Loop("i0", K.Int(0), K.Name("n0"), 1, (st,), "scatter")
    return KernelIR(["n0", "n1", "x0", "x1"], [alloc], [alloc, lp], [K.Name("t0")])


def test_only_pure_accumulations_are_split():
    ok = _hand_ir(K.Load("x1", (K.Name("i0"),)))
    chunks, _, slabs = _split_parts(ok)
    assert len(chunks) == 1 and len(slabs) == 1
    # the accumulated array read elsewhere in the loop (a loop-carried value): serial only
    carried = _hand_ir(K.Load("t0", (K.Name("i0"),)))
    assert split_scatters(carried) == list(carried.body)
    # a plain store into the shared array: serial only
    plain = _hand_ir(K.Float(1.0))
    lp = plain.body[1]
    plain.body[1] = replace(lp, body=(Store("t0", (K.Name("i0"),), K.Float(1.0)),))
    assert split_scatters(plain) == list(plain.body)
