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

import numpy as np
import pytest

import tensorlang as tl


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


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


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_finite_scan_finds_every_non_finite_value(dtype):
    """The NaN/inf scan tests exponent bits in blocks of 4096: a bad value at
    either end of a block, or of a partial last block, is found; extreme
    finite values (max, subnormals, -0.0) are not refused (against np.isfinite)."""
    from tensorlang.backend.dispatch import FINITE_JIT_MIN, _all_finite

    rng = np.random.default_rng(0)
    # small arrays take NumPy's isfinite, from FINITE_JIT_MIN values the compiled scan
    for n in (0, 1, 4095, 4096, 4097, 10000, FINITE_JIT_MIN, FINITE_JIT_MIN + 4097):
        a = rng.normal(size=n).astype(dtype)
        assert _all_finite(a)
        for bad in (np.nan, np.inf, -np.inf):
            for pos in {0, n // 2, 4095 % max(n, 1), n - 1} if n else set():
                b = a.copy()
                b[pos] = bad
                assert not _all_finite(b), (n, bad, pos)
    fi = np.finfo(dtype)
    edge = np.array([fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, 0.0, -0.0], dtype=dtype)
    assert _all_finite(edge) == bool(np.all(np.isfinite(edge)))
    assert _all_finite(rng.normal(size=(30, 40)).astype(dtype))
