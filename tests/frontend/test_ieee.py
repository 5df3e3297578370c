"""IEEE special cases (issue #15 Numerics): the evaluator follows NumPy.

inf, nan, division by zero, negative powers at 0, overflow: the reference
evaluator gives exactly NumPy's float64 result, and raises no Python
exception or floating-point warning (even with warnings as errors).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorlang as tl

n = tl.size("n")
x = tl.tensor("x", n)
X = np.array([0.0, 1e-200, -1.0, 2.0, 1e300, -1e-320])

CASES = {
    "1/x": (lambda: tl.gen(n, lambda i: 1 / x[i]), lambda v: 1 / v),
    "x**-1": (lambda: tl.gen(n, lambda i: x[i] ** -1), lambda v: v ** -1.0),
    "x**-2": (lambda: tl.gen(n, lambda i: x[i] ** -2), lambda v: v ** -2.0),
    "x**-0.5": (lambda: tl.gen(n, lambda i: x[i] ** -0.5), lambda v: v ** -0.5),
    "x**0.5": (lambda: tl.gen(n, lambda i: x[i] ** 0.5), lambda v: v ** 0.5),
    "log": (lambda: tl.gen(n, lambda i: tl.log(x[i])), np.log),
    "sqrt": (lambda: tl.gen(n, lambda i: tl.sqrt(x[i])), np.sqrt),
    "exp overflow": (lambda: tl.gen(n, lambda i: tl.exp(x[i] * 1000)), lambda v: np.exp(v * 1000)),
    "mul overflow": (lambda: tl.gen(n, lambda i: x[i] * x[i] * 10), lambda v: v * v * 10),
    "inf - inf": (lambda: tl.gen(n, lambda i: tl.exp(x[i] * 1000) - tl.exp(x[i] * 1000)),
                  lambda v: np.exp(v * 1000) - np.exp(v * 1000)),
    "0 * inf": (lambda: tl.gen(n, lambda i: tl.exp(x[i] * 1000) * 0), lambda v: np.exp(v * 1000) * 0),
    "sum to inf": (lambda: tl.sum(n, lambda i: x[i] * 1e10), lambda v: np.sum(v * 1e10)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_evaluator_matches_numpy_on_special_values(name):
    build, ref = CASES[name]
    with np.errstate(all="ignore"):
        want = ref(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning may escape the evaluator
        got = tl.evaluate(build(), x=X)
    np.testing.assert_array_equal(np.asarray(got), want)  # equal, nan where NumPy has nan


def test_gradient_of_negative_power_at_zero_matches_numpy():
    loss = tl.sum(n, lambda i: x[i] ** -1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = tl.grad(loss, wrt=x)(x=X)
    with np.errstate(all="ignore"):
        want = -1.0 * X ** -2.0
    np.testing.assert_array_equal(g, want)


def test_constant_beyond_float64_is_an_error_not_an_overflow():
    with pytest.raises(tl.TensorLangError, match="does not fit a float64"):
        tl.evaluate(x[0] + 10**400, x=X)


def test_negative_extent_inside_an_empty_gen_is_empty():
    prog = tl.gen(n, lambda i: tl.gen(n - 2, lambda j: x[i]))
    assert tl.evaluate(prog, x=np.zeros(0)).shape == (0, 0)
    assert tl.evaluate(prog, x=np.zeros(1)).shape == (1, 0)
    assert tl.evaluate(prog, x=np.ones(3)).tolist() == [[1.0], [1.0], [1.0]]


def test_cost_at_huge_sizes_is_exact_not_an_isl_error():
    prog = tl.sum(n, lambda i: tl.iverson(i + 1 < n, x[i + 1] * x[i]))
    N = 10**30
    assert tl.cost(prog, n=N) == 2 * N - 3  # N - 1 products, N - 2 additions
    assert tl.cost(prog, n=2**64 + 5) == 2 * (2**64 + 5) - 3


@pytest.mark.parametrize("runtime", ["evaluator", "compiled"])
def test_gradient_of_reciprocal_at_zero_is_minus_inf_on_both_runtimes(monkeypatch, runtime):
    # 1/x is div(1, x): the constant numerator's tangent is a literal zero and
    # contributes nothing, even where its partial 1/x is infinite (no 0·inf = nan)
    monkeypatch.setenv("TENSORLANG_RUNTIME", runtime)
    loss = tl.sum(n, lambda i: 1 / x[i])
    xv = np.tile(X, 12)  # above the evaluator threshold of TENSORLANG_RUNTIME=auto
    g = tl.grad(loss, wrt=x)(x=xv)
    with np.errstate(all="ignore"):
        want = -1.0 / xv ** 2
    np.testing.assert_array_equal(g, want)
