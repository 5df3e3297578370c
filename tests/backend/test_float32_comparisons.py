"""Value comparisons in float32 kernels decide as the exact comparison
(issue #17 item 4, conditionals.py; found by session 12's hunt).

A float32 kernel printed a constant operand of ``where``'s comparison as
``F(c)``, rounded to nearest: ``x >= 1e-46`` became ``x >= 0`` and ``x > 0.1``
at ``x = float32(0.1)`` (0.10000000149...) became a tie.  The branch taken, and
the derivative of ``where``, ``maximum`` and ``minimum`` at the point, then
differed from the evaluator's comparison of the same float32 value with c,
and with the auto runtime (the evaluator at small sizes) the same element
values gave a different gradient at n = 3 and at n = 100.  The reference
here is NumPy comparing the float32 values, exactly widened to float64, with
the program's constant.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.runtime import make_callable


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))


n = tl.size("n")
x = tl.tensor("x", n)
F32 = np.float32


def _points(c: float) -> np.ndarray:
    """float32 values around the constant c (its nearest float32 and both neighbours), 0 and -0."""
    with np.errstate(over="ignore"):
        f = F32(c)
    pts = [0.0, -0.0, 1.0, -1.0]
    if np.isfinite(f):
        pts += [f, np.nextafter(f, F32(np.inf)), np.nextafter(f, F32(-np.inf))]
    return np.array(pts * 20, dtype=F32)  # 140 points: past the auto runtime's threshold too


CONSTANTS = [0.1, 1 / 3, -0.7, 1e-46, -1e-46, 16777217.0, 1e39, -1e39]


@pytest.mark.parametrize("c", CONSTANTS)
@pytest.mark.parametrize("op", [">", ">=", "<", "<="])
def test_where_against_a_constant_decides_exactly(c, op):
    cmp = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}[op]
    e = tl.gen(n, lambda i: tl.where(cmp(x[i], c), 1000.0 + x[i], x[i] * 2.0))
    X = _points(c)
    want = np.where(cmp(X.astype(np.float64), c), 1000.0 + X.astype(np.float64), X.astype(np.float64) * 2.0)
    got = make_callable(e, runtime="compiled", threads=1)(x=X)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)  # branches 1000 apart
    np.testing.assert_allclose(make_callable(e, runtime="evaluator")(x=X), want, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("c", [0.1, -0.7, 1e-46])
def test_max_min_tie_derivatives_follow_the_exact_comparison(c):
    """maximum(x, c)' is 1, 0.5 or 0 as x >, ==, < c exactly (JAX's convention); a float32 x
    never equals a constant float32 cannot represent, so no 0.5 there."""
    loss = tl.sum(n, lambda i: tl.maximum(x[i], c) * 3.0 + tl.minimum(x[i], c))
    X = _points(c)
    X64 = X.astype(np.float64)
    want = 3.0 * np.where(X64 > c, 1.0, np.where(X64 == c, 0.5, 0.0)) + np.where(X64 < c, 1.0, np.where(X64 == c, 0.5, 0.0))
    g = tl.grad(loss, wrt=x, threads=1)
    for N in (len(X), 3):  # the compiled kernel, and the evaluator the auto runtime picks at n = 3
        got = g(x=X[:N])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want[:N].astype(F32))


def test_two_constants_are_decided_exactly():
    a, b = 0.1, 0.1 + 1e-12  # one float32 between neither: rounded apart, compared as equal
    e = tl.gen(n, lambda i: tl.where(tl.ge(tl.const(a), b), x[i], -x[i]))
    X = _points(0.5)
    got = make_callable(e, runtime="compiled", threads=1)(x=X)
    np.testing.assert_array_equal(got, -X)


def test_a_let_bound_constant_decides_exactly():
    """``let c = 0.1 in … where(x > c, …)``: the kernel read c from a local set to F(0.1), which
    the comparison could not see; scalar lets bound to a constant are now read as the literal."""
    e = tl.let(tl.const(0.1), lambda c: tl.gen(n, lambda i: tl.where(x[i] > c, 1000.0, 0.0) + c))
    X = _points(0.1)
    X64 = X.astype(np.float64)
    want = np.where(X64 > 0.1, 1000.0, 0.0) + 0.1
    np.testing.assert_allclose(make_callable(e, runtime="compiled", threads=1)(x=X), want, rtol=1e-6)


@pytest.mark.parametrize("k", [16777217, -16777217, 33554435, 1e39, 0.1])
def test_a_power_keeps_its_exponent(k):
    """``x ** k`` in a float32 kernel printed ``np.power(x, F(k))``: 16777217 rounded to
    16777216, so ``(-1) ** 16777217`` was +1 (the exponent's parity decides the sign).
    An exponent float32 cannot hold is applied in float64, then rounded."""
    e = tl.gen(n, lambda i: x[i] ** k)
    X = np.array([-1.0, 1.0, -1.0000001, 0.999999, 2.0, -0.5] * 20, dtype=F32)
    with np.errstate(all="ignore"):
        want = np.power(X.astype(np.float64), float(k)).astype(F32)
    got = make_callable(e, runtime="compiled", threads=1)(x=X)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)
