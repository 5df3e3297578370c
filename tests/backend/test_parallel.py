"""Issue #13 item 4: multi-core kernels (paper Section 4.3's loops, in parallel).

The parallel variant runs the outer loops of top-level gens with ``prange``
and splits a top-level reduction into ``T`` contiguous chunks (``T`` the
thread count) whose partial sums are added in chunk order.  Checked here:

* the split reduction's exact floating-point value, computed independently
  in Python with the same chunks and lanes (bitwise equal), and within
  rounding of NumPy's;
* the same thread count gives bitwise the same result on every call;
  ``threads=1`` is the serial kernel;
* gradients with two threads against NumPy;
* the reduction detection on the loop IR (not on source text), the work
  estimate by hand count, the automatic choice and ``threads=`` validation.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import api as backend_api
from tensorlang.backend.codegen import reductions
from tensorlang.driver import prepare  # the route "compile" up to the kernel


def sumsq():
    n = tl.size("n")
    x = tl.tensor("x", n)
    return tl.sum(n, lambda i: x[i] * x[i]), x


LANES = 4  # codegen.LANES: an innermost reduction keeps four partial sums


def lane_sum(acc: float, terms) -> float:
    """An innermost reduction loop's order of additions, by hand: lane 0 is
    ``acc`` and takes terms 0, 4, 8, ... and the remainder, lane k (from 0.0)
    terms k, k + 4, ...; then acc += ((lane1 + lane2) + lane3)."""
    terms = [float(t) for t in terms]
    full = len(terms) // LANES * LANES
    lanes = [0.0] * LANES
    for q in range(0, full, LANES):
        acc += terms[q]
        for k in range(1, LANES):
            lanes[k] += terms[q + k]
    for t in terms[full:]:
        acc += t
    rest = lanes[1]
    for k in range(2, LANES):
        rest = rest + lanes[k]
    return acc + rest


def chunked_sum_of_squares(xs: np.ndarray, T: int) -> float:
    """The split reduction's order of additions, by hand: chunk k covers
    [N k // T, N (k+1) // T), summed from 0.0 (``lane_sum``), the partial
    sums then added to 0.0 in chunk order."""
    N = len(xs)
    acc = 0.0
    for k in range(T):
        lo, hi = N * k // T, N * (k + 1) // T
        acc += lane_sum(0.0, [float(xs[i]) * float(xs[i]) for i in range(lo, hi)])
    return acc


def rounding_sensitive(n: int, seed: int = 0) -> np.ndarray:
    """Values whose sum of squares depends on the order of additions."""
    for s in range(seed, seed + 20):  # the first seed whose two orders differ
        xs = np.random.default_rng(s).standard_normal(n)
        if chunked_sum_of_squares(xs, 1) != chunked_sum_of_squares(xs, 2):
            return xs
    raise AssertionError("no rounding-sensitive data found")


def test_split_reduction_has_the_chunked_order_exactly():
    loss, _ = sumsq()
    xs = rounding_sensitive(1001)
    k1, k2 = tl.compile(loss, threads=1), tl.compile(loss, threads=2)
    serial, par = k1(x=xs), k2(x=xs)
    assert serial == chunked_sum_of_squares(xs, 1)
    assert par == chunked_sum_of_squares(xs, 2)
    assert par == pytest.approx(float(np.dot(xs, xs)), rel=1e-12)
    assert all(k2(x=xs) == par for _ in range(20))  # the same result for the same thread count


def test_reduction_is_found_on_the_loop_ir():
    loss, _ = sumsq()
    ir = tl.compile(loss, threads=2).loop_ir
    red = reductions(ir)
    assert len(red) == 1
    (accs,) = red.values()
    assert len(accs) == 1
    # a gen's outer loop is parallel itself and no reduction
    n = tl.size("n")
    x = tl.tensor("x", n)
    g = tl.gen(n, lambda i: tl.sum(n, lambda j: x[i] * x[j]))
    assert reductions(tl.compile(g, threads=2).loop_ir) == {}


def deconv():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    return tl.sum(n, lambda i: (y[i] - z[i]) ** 2), x, c


def test_two_threads_value_and_grad_against_numpy():
    loss, x, c = deconv()
    rng = np.random.default_rng(1)
    N, M = 3000, 7
    d = dict(x=rng.standard_normal(N + M - 1), c=rng.standard_normal(M), z=rng.standard_normal(N))
    y = np.convolve(d["x"], d["c"], mode="valid")
    r = 2 * (y - d["z"])
    want_gx = np.convolve(r, d["c"][::-1], mode="full")
    want_gc = np.correlate(d["x"], r, mode="valid")[::-1]
    vg2 = tl.value_and_grad(loss, wrt=[x, c], threads=2)
    vg1 = tl.value_and_grad(loss, wrt=[x, c], threads=1)
    v2, (gx2, gc2) = vg2(**d)
    v1, (gx1, gc1) = vg1(**d)
    assert v2 == pytest.approx(float(np.sum((y - d["z"]) ** 2)), rel=1e-12)
    assert v2 == pytest.approx(v1, rel=1e-13)
    for a, b in ((gx2, want_gx), (gc2, want_gc), (gx1, want_gx), (gc1, want_gc)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    # gens are written element by element: dx does not depend on the threads; dc (a sum over
    # n, chunks.py) to rounding, the same on every call
    np.testing.assert_array_equal(gx2, gx1)
    np.testing.assert_allclose(gc2, gc1, rtol=1e-13, atol=0)
    assert np.array_equal(vg2(**d)[1][1], gc2)
    v2b, (gx2b, _) = vg2(**d)
    assert v2b == v2
    np.testing.assert_array_equal(gx2b, gx2)


def test_bracketed_and_nested_reductions_split_correctly():
    """A bracket narrows the reduction's loops (bounds depend on a size) and
    a double sum nests: both split over the outer loop."""
    n = tl.size("n")
    A = tl.tensor("A", n, n)
    tri = tl.sum([n, n], lambda i, j: tl.iverson(j <= i, A[i, j] * A[j, i]))
    rng = np.random.default_rng(2)
    Av = rng.standard_normal((257, 257))
    want = float(np.sum(np.tril(Av * Av.T)))
    for T in (1, 2):
        assert tl.compile(tri, threads=T)(A=Av) == pytest.approx(want, rel=1e-12)
    # the outer loop is split by rows; each row is an innermost reduction
    # (``lane_sum``) continuing the chunk's partial sum
    exp = 0.0
    for k in range(2):
        q = 0.0
        for i in range(257 * k // 2, 257 * (k + 1) // 2):
            q = lane_sum(q, [float(Av[i, j]) * float(Av[j, i]) for j in range(i + 1)])
        exp += q
    serial = 0.0
    for i in range(257):
        serial = lane_sum(serial, [float(Av[i, j]) * float(Av[j, i]) for j in range(i + 1)])
    assert tl.compile(tri, threads=2)(A=Av) == exp
    assert tl.compile(tri, threads=1)(A=Av) == serial
    assert exp == pytest.approx(want, rel=1e-12)


def test_work_points_by_hand():
    loss, x, c = deconv()
    # the loss, as the route "compile" prepares it: the convolution (read twice)
    # is one shared binding gen[i:n] sum[j:m] (n·m points), then y - z (n) and
    # the reduction (n); fusion merges them into one nest again when lowering
    assert backend_api.work_points(prepare(loss), {"n": 1000, "m": 16}) == 1000 * 16 + 1000 + 1000
    n = tl.size("n")
    X = tl.tensor("X", n)
    g = tl.gen([n, n], lambda i, j: tl.sum(n, lambda k: X[i] * X[j] * X[k]))
    assert backend_api.work_points(prepare(g), {"n": 10}) == 1000


def _scripted_clock(monkeypatch, serial: float, parallel: float):
    """AutoChoice's clock, giving the timed serial (2nd, 3rd) and parallel (5th, 6th) calls these durations."""
    from tensorlang.backend import autothreads

    # call 1 and 4 read the clock once (not timed), the others twice; the fastest of two counts
    ticks = iter([0.0, 0.0, serial, 0.0, serial * 3,
                  0.0, 0.0, parallel * 2, 0.0, parallel])
    monkeypatch.setattr(autothreads.AutoChoice, "clock", staticmethod(lambda: next(ticks)))


@pytest.mark.parametrize("faster", ["parallel", "serial"])
def test_automatic_choice_uses_both_cores_when_large_free_and_faster(monkeypatch, faster):
    """threads=None on a large call with a free core: the plan's calls 1-3
    run serially, 4-6 on every thread, and later calls on the variant that
    calls 2-3 and 5-6 timed faster (autothreads.py)."""
    import numba

    loss, _ = sumsq()
    xs = rounding_sensitive(5000, seed=3)
    monkeypatch.setattr(backend_api, "PARALLEL_MIN", 4096)
    monkeypatch.setattr(backend_api, "cores_free", lambda: True)
    monkeypatch.setattr(backend_api.os, "cpu_count", lambda: 2)
    _scripted_clock(monkeypatch, 1.0, 0.5 if faster == "parallel" else 0.95)
    k = tl.compile(loss)
    T = numba.get_num_threads()
    one, par = chunked_sum_of_squares(xs, 1), chunked_sum_of_squares(xs, T)
    if T >= 2:
        assert one != par
    assert [k(x=xs) for _ in range(6)] == [one] * 3 + [par] * 3
    want = par if faster == "parallel" else one
    assert all(k(x=xs) == want for _ in range(5))
    # small work: serial, the single-thread order (no timing)
    assert k(x=xs[:1000]) == chunked_sum_of_squares(xs[:1000], 1)
    # a busy machine: serial as well
    monkeypatch.setattr(backend_api, "cores_free", lambda: False)
    k2 = tl.compile(loss)
    assert all(k2(x=xs) == one for _ in range(5))


def test_automatic_choice_times_each_signature_on_its_own(monkeypatch):
    from tensorlang.backend.autothreads import AutoChoice

    calls = []
    serial = lambda *a: calls.append(("s", a)) or "s"  # noqa: E731
    parallel = lambda *a: calls.append(("p", a)) or "p"  # noqa: E731
    _scripted_clock(monkeypatch, 2.0, 1.9)  # parallel not 10% faster: serial kept
    c = AutoChoice()
    got = [c.run(serial, parallel, (1, 2), 2) for _ in range(9)]
    assert got == ["s"] * 3 + ["p"] * 3 + ["s"] * 3
    assert calls[3][1][-1] == 2  # the thread count passed to the parallel variant


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_threads_must_be_a_positive_int(bad):
    loss, x = sumsq()
    with pytest.raises(tl.TensorLangError, match="threads"):
        tl.grad(loss, wrt=x, threads=bad)
    with pytest.raises(tl.TensorLangError, match="threads"):
        tl.compile(loss, threads=bad)


def test_automatic_choice_is_serial_when_numba_has_one_thread(monkeypatch):
    import numba

    loss, _ = sumsq()
    xs = rounding_sensitive(5000, seed=3)
    monkeypatch.setattr(backend_api, "PARALLEL_MIN", 4096)
    monkeypatch.setattr(backend_api, "cores_free", lambda: True)
    monkeypatch.setattr(backend_api.os, "cpu_count", lambda: 2)
    k = tl.compile(loss)
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        assert k(x=xs) == chunked_sum_of_squares(xs, 1)
    finally:
        numba.set_num_threads(old)


# -- reductions whose names are reused after them; chunks with column sums -----------


def _laplacian_loss():
    n = tl.size("n")
    u, f = tl.tensor("u", n, n), tl.tensor("f", n, n)
    inner = lambda i, j: (i >= 1) & (i < n - 1) & (j >= 1) & (j < n - 1)  # noqa: E731
    lap = lambda i, j: 4 * u[i, j] - u[i - 1, j] - u[i + 1, j] - u[i, j - 1] - u[i, j + 1]  # noqa: E731
    return tl.sum([n, n], lambda i, j: tl.iverson(inner(i, j), lap(i, j) ** 2) + (u[i, j] - f[i, j]) ** 2)


def _laplacian_ref(u, f):
    L = 4 * u[1:-1, 1:-1] - u[:-2, 1:-1] - u[2:, 1:-1] - u[1:-1, :-2] - u[1:-1, 2:]
    return float((L ** 2).sum() + ((u - f) ** 2).sum())


def test_a_peeled_stencil_sum_is_split_and_its_chunks_keep_column_sums():
    """The 5-point loss's sum is lowered as border loops and an interior loop
    (isl separation) that reuse the names ``i1``, ``v3``...: each loop
    assigns them before reading them, so the interior loop is still a
    reduction the parallel variant splits (it was not: the reuse read as a
    value leaving the loop).  Each chunk keeps its own column partial sums
    (colsum.py), allocated in the chunk."""
    from tensorlang.backend.loopir import Alloc, Loop, walk_stmts

    loss = _laplacian_loss()
    k = tl.compile(loss, threads=2)
    ir = k.loop_ir
    red = reductions(ir)
    interior = [s for s in walk_stmts(ir.body) if isinstance(s, Loop) and id(s) in red
                and any(isinstance(x, Loop) for x in s.body)]
    assert interior, "the interior rows' loop is not split"
    assert "kernel_parallel" in k.source
    # the parallel loop IR (chunks.py): a chunk loop adding into its own row of a [T, columns]
    # copy of the column partial sums (colsum.py)
    from tensorlang.backend import kir as K
    from tensorlang.backend.codegen import printed_ir
    from tensorlang.backend.loopir import Store

    par = printed_ir(ir, True)
    copies = {a.name for a in walk_stmts(par.body) if isinstance(a, Alloc) and len(a.shape) == 2
              and isinstance(a.shape[0], K.Name) and a.zero}
    assert any(isinstance(c, Loop) and c.parallel and any(
        isinstance(s, Store) and s.array in copies and s.index[0] == K.Name(c.var) for s in walk_stmts(c.body))
        for c in walk_stmts(par.body))
    from tensorlang.backend.colsum import chunk_column_sums

    (loop,) = interior[:1]
    stmts = chunk_column_sums(loop)
    assert isinstance(stmts[0], Alloc) and stmts[0].zero and len(stmts) >= 3


@pytest.mark.parametrize("N", [1, 2, 3, 4, 5, 17, 64, 129])
def test_split_stencil_sum_against_numpy_and_deterministic(N):
    loss = _laplacian_loss()
    rng = np.random.default_rng(N)
    u, f = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    want = _laplacian_ref(u, f)
    for th in (1, 2, 3):
        k = tl.compile(loss, threads=th)
        got = k(u=u, f=f)
        assert got == pytest.approx(want, rel=1e-13, abs=1e-13)
        assert all(k(u=u, f=f) == got for _ in range(5))  # the same result for the same thread count


def test_a_value_read_after_a_reduction_keeps_it_serial():
    """``reductions`` splits a loop only when nothing it assigns is read
    after it before being assigned again (rw.dead_after): a chunk's last
    value of ``t`` is not the loop's."""
    from tensorlang.backend import kir as K
    from tensorlang.backend.loopir import AccAdd, Assign, KernelIR, Loop

    body = (Assign("t", K.Load("x", (K.Name("i"),))), AccAdd("acc", K.Name("t")))
    loop = Loop("i", K.Int(0), K.Name("n"), 1, body, "sum")

    def ir(after):
        return KernelIR(["n", "x"], [], [Assign("acc", K.Float(0.0)), loop, *after], ["acc", "out"])

    read_t = [Assign("out", K.Name("t"))]  # reads the loop's last t
    assert reductions(ir(read_t)) == {}
    killed_t = [Assign("t", K.Float(1.0)), Assign("out", K.Name("t"))]  # t assigned again first
    assert reductions(ir(killed_t)) == {id(loop): ("acc",)}
    later_loop = [Loop("j", K.Int(0), K.Name("n"), 1, (Assign("t", K.Name("j")), AccAdd("acc", K.Name("t"))), "sum")]
    assert id(loop) in reductions(ir(later_loop + [Assign("out", K.Float(0.0))]))
    assert reductions(ir([Assign("out", K.Name("i"))])) == {}  # the loop variable's last value


def test_a_blas_read_after_a_reduction_keeps_it_serial():
    """rw.dead_after sees what a ``Gemm`` statement (blas.py) reads and
    writes, as rw.reads_writes does: an array a reduction loop allocates per
    iteration and a later GEMV reads holds the loop's last iteration's
    values, which a chunk's would not be.  (Session 13 hunt: dead_after
    passed over a Gemm, so this loop was split; unknown statements count as
    reads.)"""
    from tensorlang.backend import kir as K
    from tensorlang.backend.blas import Gemm, View
    from tensorlang.backend.loopir import AccAdd, Alloc, Assign, KernelIR, Loop, Store
    from tensorlang.backend.rw import dead_after

    body = (Alloc("w", (K.Name("n"),), True, "temporary", "w"),
            Store("w", (K.Int(0),), K.Load("x", (K.Name("i"),))),
            AccAdd("acc", K.Load("w", (K.Int(0),))))
    loop = Loop("i", K.Int(0), K.Name("n"), 1, body, "sum")
    gemv = Gemm("y", View("A"), View("w"))

    def ir(after):
        return KernelIR(["n", "x", "A"], [], [Assign("acc", K.Float(0.0)), loop, *after], ["acc", "y"])

    assert not dead_after("w", [gemv])  # read by the product
    assert dead_after("y", [gemv])  # written entirely before any read
    assert not dead_after("y", [Gemm("z", View("A"), View("y"))])
    assert reductions(ir([gemv])) == {}
    assert reductions(ir([Gemm("w", View("A"), View("x"))])) == {id(loop): ("acc",)}  # w written first
