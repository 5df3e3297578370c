"""The kernels' vectorizable tanh (backend/vmath.py, issue #13 item 6) against
NumPy (glibc) and against mpmath at 60 digits, over every binade of float64
and the edge values; and that compiled programs use it."""

import numba
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import scalars
from tensorlang.backend.vmath import tanh as vtanh


@numba.njit(error_model="numpy", cache=False)
def _apply(x, out):
    for i in range(x.shape[0]):
        out[i] = vtanh(x[i])


def _vt(x):
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    _apply(x, out)
    return out


def _ulps(a, b):
    """Distance in units in the last place (adjacent floats differ by 1; -0 and +0 by 0)."""
    def key(v):
        i = v.view(np.int64)
        return np.where(i < 0, np.int64(np.iinfo(np.int64).min) - i, i)
    return np.abs(key(a) - key(b))


EDGES = np.array([
    0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -2.2250738585072014e-308,
    2.0**-28, np.nextafter(2.0**-28, 0), np.nextafter(2.0**-28, 1), -(2.0**-28),
    22.0, np.nextafter(22.0, 0), np.nextafter(22.0, 30), -22.0, 19.06, 18.5,
    0.35, np.nextafter(0.35, 0), np.nextafter(0.35, 1),  # where 2|x| crosses the k = 0 range (0.7)
    0.34657359027997264, 0.5493061443340549, 1.0, -1.0, 0.5, 1e-10, 1e-300,
    1e308, -1e308, np.finfo(np.float64).max, -np.finfo(np.float64).max,
])


def _samples(n=400_000, seed=0):
    rng = np.random.default_rng(seed)
    every_binade = np.ldexp(rng.uniform(1, 2, n), rng.integers(-1074, 1024, n))
    dense = np.concatenate([rng.uniform(-25, 25, n), rng.uniform(-1.5, 1.5, n), rng.uniform(-0.05, 0.05, n)])
    x = np.concatenate([every_binade, dense, EDGES])
    x[: len(every_binade): 2] *= -1
    return x


def test_tanh_within_one_ulp_of_numpy():
    x = _samples()
    got, want = _vt(x), np.tanh(x)
    assert _ulps(got, want).max() <= 1
    # most values are exactly NumPy's
    assert (got == want).mean() > 0.8


def test_tanh_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60
    rng = np.random.default_rng(1)
    x = np.concatenate([EDGES, rng.uniform(-3, 3, 1500), np.ldexp(rng.uniform(1, 2, 500), rng.integers(-40, 5, 500))])
    got = _vt(x)
    want = np.array([float(mpmath.tanh(mpmath.mpf(float(v)))) for v in x])  # correctly rounded
    assert _ulps(got, want).max() <= 1


def test_tanh_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 30.0, -30.0, 1e308])
    got = _vt(x)
    assert got[0] == 0.0 and not np.signbit(got[0])
    assert got[1] == 0.0 and np.signbit(got[1])
    assert got[2] == 1.0 and got[3] == -1.0
    assert np.isnan(got[4])
    assert got[5] == 5e-324 and got[6] == -5e-324
    assert list(got[7:]) == [1.0, -1.0, 1.0]


def test_float32_keeps_numpy_tanh():
    @numba.njit(error_model="numpy")
    def f(v):
        return vtanh(v)

    @numba.njit(error_model="numpy")
    def ref(v):
        return np.tanh(v)  # Numba's float32 tanh (tanhf)

    assert f.py_func is not None
    for v in (np.float32(0.3), np.float32(-7.5), np.float32(1e-20)):
        assert f(v) == ref(v)
    assert f.signatures == [(numba.float32,)]


def test_compiled_tanh_program_uses_it():
    n = tl.size("n")
    x = tl.tensor("x", n)
    prog = tl.sum(n, lambda i: tl.tanh(x[i]) * x[i])
    xs = _samples(20_000, seed=3)
    xs = xs[np.isfinite(xs) & (np.abs(xs) < 1e150)]  # finite products
    got = tl.compile(prog)(x=xs)
    want = float(np.sum(np.tanh(xs) * xs))
    assert got == pytest.approx(want, rel=1e-12)
    # the kernel IR names vmath's tanh, not the ufunc
    node = scalars.builtin("tanh", (None,))
    assert node.fn == scalars.VECTOR_TANH and not node.numpy
    g = tl.grad(prog, wrt=x)(x=xs[:1000])
    t = np.tanh(xs[:1000])
    np.testing.assert_allclose(g, t + xs[:1000] * (1 - t * t), rtol=1e-13, atol=1e-300)
