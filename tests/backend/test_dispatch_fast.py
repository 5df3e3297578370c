"""Issue #13 item 7: the planned fast path of compiled calls keeps every check.

After the first call of a signature, ``tl.compile``, ``tl.grad`` and
``tl.value_and_grad`` go straight to the kernel's plan (inputs passed on
as they are when already contiguous arrays of the kernel's precision).
Checked against NumPy: non-contiguous and other-precision inputs, values
changed in place between calls, NaN refused on the fast path, and
temporaries reused per thread without mixing shapes.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import tensorlang as tl


pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


def program():
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    t = tl.gen(n, lambda i: tl.tanh(x[i]) * w[i])  # a let-bound temporary in the gradient
    loss = tl.sum(n, lambda i: t[i] * t[i] + x[i] * w[i])
    return loss, x


def want(xs, ws):
    t = np.tanh(xs) * ws
    return float(np.sum(t * t + xs * ws)), 2 * t * ws * (1 - np.tanh(xs) ** 2) + ws


def test_fast_path_sees_new_values_layouts_and_precisions():
    loss, x = program()
    f, g, vg = tl.compile(loss), tl.grad(loss, wrt=x), tl.value_and_grad(loss, wrt=x)
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal(9), rng.standard_normal(9)
    for _ in range(3):
        v, gx = want(xs, ws)
        assert f(x=xs, w=ws) == pytest.approx(v, rel=1e-12)
        np.testing.assert_allclose(g(x=xs, w=ws), gx, rtol=1e-12)
        v2, gx2 = vg(x=xs, w=ws)
        assert v2 == pytest.approx(v, rel=1e-12)
        np.testing.assert_allclose(gx2, gx, rtol=1e-12)
        xs *= -1.5  # in place: the plan keeps no values
    big_x, big_w = rng.standard_normal(18), rng.standard_normal(18)
    sx, sw = big_x[::2], big_w[::2]  # same dtype and shape, not contiguous
    v, gx = want(sx, sw)
    assert f(x=sx, w=sw) == pytest.approx(v, rel=1e-12)
    np.testing.assert_allclose(vg(x=sx, w=sw)[1], gx, rtol=1e-12)
    x32, w32 = xs.astype(np.float32), ws.astype(np.float32)
    out = g(x=x32, w=w32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, want(x32.astype(float), w32.astype(float))[1], rtol=1e-4)
    assert isinstance(vg(x=xs, w=ws)[0], float)  # back to float64


@pytest.mark.parametrize("bad", ["x", "w"])
def test_nan_refused_after_planning(bad):
    loss, x = program()
    g, vg = tl.grad(loss, wrt=x), tl.value_and_grad(loss, wrt=x)
    xs, ws = np.linspace(0.1, 1.0, 8), np.linspace(1.0, 2.0, 8)
    g(x=xs, w=ws)
    vg(x=xs, w=ws)
    d = {"x": xs.copy(), "w": ws.copy()}
    d[bad][3] = np.nan
    for fn in (g, vg):
        with pytest.raises(tl.InputError, match="NaN"):
            fn(**d)


def test_temporaries_per_thread_and_shape():
    loss, x = program()
    g = tl.grad(loss, wrt=x)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for k in range(40):
                n = 5 + (seed + k) % 7
                xs, ws = rng.standard_normal(n), rng.standard_normal(n)
                np.testing.assert_allclose(g(x=xs, w=ws), want(xs, ws)[1], rtol=1e-12)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.longdouble, np.float16])
def test_finite_scan_finds_every_non_finite_value(dtype):
    """The NaN/inf test (finite.py's exponent scan, NumPy's exact test for
    other layouts and float types): a bad value anywhere is found, alone,
    beside its opposite infinity, or beside a value whose square overflows;
    NaNs of either sign and any payload are found; extreme finite values
    (max, whose square and sums overflow, subnormals, -0.0) are not refused
    (against np.isfinite); Fortran-ordered, strided and reversed arrays are
    tested too."""
    from tensorlang.backend.dispatch import _all_finite

    M = 8192  # where the old test switched from a self-dot to a plain sum
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, M - 1, M, M + 1, 10000, (1 << 16) + 3):
        a = rng.normal(size=n).astype(dtype)
        assert _all_finite(a)
        for bad in (np.nan, np.inf, -np.inf):
            for pos in {0, n // 2, n - 1} if n else set():
                b = a.copy()
                b[pos] = bad
                assert not _all_finite(b), (n, bad, pos)
                if n > 1:
                    b[(pos + 1) % n] = -bad  # +inf beside -inf: squares never cancel
                    assert not _all_finite(b), (n, bad, pos)
                    b[(pos + 1) % n] = np.finfo(dtype).max  # beside a square that overflows
                    assert not _all_finite(b), (n, bad, pos)
    fi = np.finfo(dtype)
    uint = {np.dtype(np.float64): np.uint64, np.dtype(np.float32): np.uint32}.get(np.dtype(dtype))
    for n in (5, M + 3) if uint else ():
        for nan_bits in ({np.uint64: 0xFFF0000000000001, np.uint32: 0xFF800001}[uint],  # negative signalling NaN
                         {np.uint64: 0x7FF8DEADBEEF0000, np.uint32: 0x7FC0BEEF}[uint]):  # quiet NaN with payload
            b = np.zeros(n, dtype=dtype)
            b.view(uint)[n - 2] = nan_bits
            assert np.isnan(b[n - 2]) and not _all_finite(b)
    if np.dtype(dtype).itemsize > 8:  # long double: refused past float64's range, where the kernel runs
        fi = np.finfo(np.float64)
    edge = np.array([fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, 0.0, -0.0], dtype=dtype)
    assert _all_finite(edge) and np.all(np.isfinite(edge))
    assert not _all_finite(np.append(edge, np.nan).astype(dtype))
    big = np.full(M + 5, fi.max, dtype=dtype)  # a plain sum would overflow
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and says nothing about it
        assert _all_finite(big) and _all_finite(-big)
    if np.dtype(dtype).itemsize > 8:
        assert not _all_finite(big * 4)  # finite as a long double, infinite in float64
    big[-1] = -np.inf
    assert not _all_finite(big)
    for shape in ((30, 40), (100, 120)):
        g = rng.normal(size=shape).astype(dtype)
        for view in (g[:, ::2], np.asfortranarray(g), g[::-1], g.T):
            assert _all_finite(view)
            bad = view.copy(order="K")
            bad[-1, 0] = np.nan
            assert not _all_finite(bad), view.flags
        strided = g.copy()[:, ::2]
        strided[-1, -1] = np.inf
        assert not _all_finite(strided)


def test_a_dense_program_s_planned_call_touches_no_sparse_machinery(monkeypatch):
    """grad, value_and_grad and vjp of a program with no sparse tensor and no
    relation return the kernel's outputs: a planned call neither prepares
    sparse inputs nor converts outputs (each cost 5-7 us a call), and still
    gives the right gradient for one and for two ``wrt``."""
    from tensorlang import autodiff, sparse

    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    loss = tl.sum(n, lambda i: w[i] * x[i] * x[i])
    g1, g2 = tl.grad(loss, wrt=x), tl.grad(loss, wrt=[x, w])
    vg, vj = tl.value_and_grad(loss, wrt=[x, w]), tl.vjp(tl.gen(n, lambda i: w[i] * x[i] * x[i]), wrt=x)
    xs, ws, dy = np.linspace(0.1, 1.0, 8), np.linspace(1.0, 2.0, 8), np.linspace(-1.0, 1.0, 8)
    calls = [lambda: g1(x=xs, w=ws), lambda: g2(x=xs, w=ws), lambda: vg(x=xs, w=ws), lambda: vj(x=xs, w=ws, dy=dy)]
    for c in calls:
        c()  # planned

    def refuse(*a, **k):
        raise AssertionError("sparse machinery on a dense program's call")

    monkeypatch.setattr(autodiff, "_sparse_out", refuse)
    monkeypatch.setattr(sparse, "prepare", refuse)
    monkeypatch.setattr(sparse, "unpack_outputs", refuse)
    gx, gw = 2 * ws * xs, xs * xs
    np.testing.assert_allclose(calls[0](), gx, rtol=1e-14)
    got = calls[1]()
    assert isinstance(got, tuple) and len(got) == 2
    np.testing.assert_allclose(got[0], gx, rtol=1e-14)
    np.testing.assert_allclose(got[1], gw, rtol=1e-14)
    val, (vx, vw) = calls[2]()
    assert val == pytest.approx(float(np.sum(ws * xs * xs)), rel=1e-14)
    np.testing.assert_allclose(vx, gx, rtol=1e-14)
    np.testing.assert_allclose(vw, gw, rtol=1e-14)
    np.testing.assert_allclose(calls[3](), dy * 2 * ws * xs, rtol=1e-14)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_planned_call_under_floating_point_raise(dtype):
    """A caller's ``np.seterr(over="raise")`` (or errstate) made the planned
    call's finiteness check (a self-dot: |x| > 1e154 in float64, 1.8e19 in
    float32 squares past the range) raise FloatingPointError for finite
    inputs the first call had accepted.  The values are compared with NumPy;
    a NaN is still refused by name."""
    n = tl.size("n")
    x = tl.tensor("x", n)
    loss = tl.sum(n, lambda i: x[i] * 0.5)
    big = np.full(70, np.finfo(dtype).max / 4, dtype=dtype)
    f, g, vg = tl.compile(loss), tl.grad(loss, wrt=x), tl.value_and_grad(loss, wrt=x)
    with np.errstate(all="raise"):
        for _ in range(3):  # the first call validates, the others take the plan
            assert f(x=big[:4]) == np.finfo(dtype).max / 2  # exact: four halves of max/4
            np.testing.assert_array_equal(g(x=big), np.full(70, 0.5, dtype=dtype))
            v, gx = vg(x=big)
            assert np.isinf(v) and v > 0  # the sum overflows: IEEE's answer, as NumPy's
            np.testing.assert_array_equal(gx, np.full(70, 0.5, dtype=dtype))
        bad = big.copy()
        bad[3] = np.nan
        for fn in (f, g, vg):
            with pytest.raises(tl.InputError, match="input x contains NaN"):
                fn(x=bad)


@pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max, reason="long double is float64 here")
def test_long_double_past_float64_is_refused_on_every_call():
    """A long-double value past float64's range is an infinity in the kernel
    (float64): the first call refuses it, and so must the planned calls after
    it (they checked the long doubles themselves, which are finite)."""
    loss, x = program()
    f = tl.compile(loss)
    ws = np.ones(5)
    xs = np.linspace(-1.0, 1.0, 5).astype(np.longdouble)
    assert f(x=xs, w=ws) == pytest.approx(want(xs.astype(np.float64), ws)[0])  # plans this signature
    big = xs.copy()
    big[2] = np.longdouble(10.0) ** 400
    for _ in range(2):
        with pytest.raises(tl.TensorLangError, match="x"):
            f(x=big, w=ws)


def test_masked_arrays_are_refused():
    """np.asarray drops a mask: the masked values would silently count."""
    loss, x = program()
    xs = np.ma.masked_array(np.ones(4), mask=[0, 1, 0, 0])
    for fn in (tl.compile(loss), tl.grad(loss, wrt=x)):
        with pytest.raises(tl.TensorLangError, match="masked"):
            fn(x=xs, w=np.ones(4))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_parallel_scan_finds_every_non_finite_value(dtype, monkeypatch):
    """A call on two threads scans a large input on both (finite.py's
    ``PARALLEL_SCANS``): a bad value at either end, on each side of the
    split between the threads and in between is found, against np.isfinite;
    a small input, or a one-thread call, keeps the serial scan; Numba's
    thread count is restored."""
    import numba

    from tensorlang.backend import dispatch
    from tensorlang.backend.finite import PARALLEL_SCAN_MIN, PARALLEL_SCANS

    used = []
    par = PARALLEL_SCANS[np.dtype(dtype)]
    monkeypatch.setitem(dispatch.PARALLEL_SCANS, np.dtype(dtype), lambda a: used.append(a.size) or par(a))
    two = numba.config.NUMBA_NUM_THREADS >= 2
    before = numba.get_num_threads()
    rng = np.random.default_rng(1)
    for n in (PARALLEL_SCAN_MIN - 1, PARALLEL_SCAN_MIN, 3 * PARALLEL_SCAN_MIN + 1):
        a = rng.normal(size=n).astype(dtype)
        used.clear()
        assert dispatch._all_finite(a, 2) and dispatch._all_finite(a, 1)
        assert used == ([n] if two and n >= PARALLEL_SCAN_MIN else [])
        for pos in (0, n // 2 - 1, n // 2, n // 2 + 1, n // 3, n - 1):
            for bad in (np.nan, np.inf, -np.inf):
                b = a.copy()
                b[pos] = bad
                assert not dispatch._all_finite(b, 2), (n, pos, bad)
                assert not np.isfinite(b).all()
        g = a[: (n // 4) * 4].reshape(4, -1, order="F")  # 2-D, Fortran order: scanned in memory order
        g = np.asfortranarray(g)
        bad = g.copy(order="F")
        bad[-1, -1] = np.nan
        assert dispatch._all_finite(g, 2) and not dispatch._all_finite(bad, 2)
    assert numba.get_num_threads() == before


def test_a_two_thread_call_scans_on_two_threads_and_refuses_nan(monkeypatch):
    """End to end: ``tl.compile(..., threads=2)`` and ``tl.grad(..., threads=2)``
    of a loss over a large input scan it on two threads, on the planned
    calls too, and refuse a NaN in the second thread's half; ``threads=1``
    scans serially.  Values against NumPy."""
    import numba

    from tensorlang.backend import dispatch
    from tensorlang.backend.finite import PARALLEL_SCAN_MIN

    used = []
    par = dispatch.PARALLEL_SCANS[np.dtype(np.float64)]
    monkeypatch.setitem(dispatch.PARALLEL_SCANS, np.dtype(np.float64), lambda a: used.append(a.size) or par(a))
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    # under a bracket: the loss is not strict in x and w (backend/strict.py), so its calls scan them
    loss = tl.sum(n, lambda i: tl.iverson(i < n - 1, w[i] * x[i] * x[i]))
    N = 2 * PARALLEL_SCAN_MIN
    rng = np.random.default_rng(2)
    xs, ws = rng.normal(size=N), rng.normal(size=N)
    for threads in (1, 2):
        f, g = tl.compile(loss, threads=threads), tl.grad(loss, wrt=x, threads=threads)
        for call in range(3):  # the first call validates (the evaluator's checks), the later ones are planned
            used.clear()
            assert np.isclose(f(x=xs, w=ws), np.sum((ws * xs * xs)[:-1]))
            np.testing.assert_allclose(g(x=xs, w=ws), np.where(np.arange(N) < N - 1, 2 * ws * xs, 0.0))
            two = threads == 2 and numba.config.NUMBA_NUM_THREADS >= 2 and call > 0
            assert len(used) == (4 if two else 0)  # x and w, by the loss and by the gradient
        bad = xs.copy()
        bad[N - 3] = np.nan
        for fn in (f, g):
            with pytest.raises(tl.TensorLangError, match="NaN or infinity"):
                fn(x=bad, w=ws)
