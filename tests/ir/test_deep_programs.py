"""Deep and long programs (issue #15): no RecursionError anywhere.

A chain of 10,000 additions built by a Python loop is 10,000 nodes deep;
it must evaluate, print, cost (at sizes and symbolically) and differentiate.
Values are checked against NumPy, costs against a hand count (Fig. 6: one
multiplication per term, one addition between terms).
"""

from __future__ import annotations



import numpy as np
import pytest

import tensorlang as tl

n = tl.size("n")
x = tl.tensor("x", n)


def chain(N: int):
    e = x[0]
    for k in range(1, N):
        e = e + x[k] * 2
    return e


@pytest.fixture(scope="module")
def deep():
    return chain(10_000)


def test_the_chain_is_deeper_than_the_recursion_limit(deep):
    depth, e = 0, deep
    while hasattr(e, "lhs"):
        e, depth = e.lhs, depth + 1
    # deeper than three times Python's default limit (stages may raise the limit)
    assert depth > 3 * 1000


def test_deep_chain_evaluates(deep):
    X = np.arange(10_000.0)
    assert tl.evaluate(deep, x=X) == pytest.approx(X[0] + 2 * X[1:].sum())


def test_deep_chain_prints(deep):
    text = tl.pretty(deep)
    assert text.startswith("x[0] + x[1]·2") and text.endswith("x[9999]·2")
    assert repr(deep) == text


def test_deep_chain_costs(deep):
    # 9,999 multiplications and 9,999 additions (Fig. 6, rules 4.24 and 4.25)
    assert tl.cost(deep, n=10_000) == 2 * 9_999
    assert tl.symbolic_cost(deep) == 2 * 9_999


def test_deep_chain_refuses_small_sizes(deep):
    # its constant accesses are call-time size constraints (tensorlang.bounds)
    with pytest.raises(tl.InputError, match=r"x\[\d+\]"):
        tl.evaluate(deep, x=np.ones(10))


def test_long_sum_of_sums_evaluates():
    e = tl.sum(n, lambda i: x[i])
    for k in range(1, 5000):
        e = e + tl.sum(n, lambda i: x[i] * (k + 0.5))
    X = np.array([1.0, 2.0, 3.0])
    want = X.sum() * (1 + sum(k + 0.5 for k in range(1, 5000)))
    assert tl.evaluate(e, x=X) == pytest.approx(want)
    # hand count at n = 3: n - 1 adds per sum, n mults in each scaled sum, 4999 joins
    assert tl.cost(e, n=3) == 2 + 4999 * (3 + 2) + 4999


def test_deep_chain_differentiates():
    # 1,500 terms: deeper than the default recursion limit, small enough for CI
    N = 1500
    e = x[0]
    for k in range(1, N):
        e = e + x[k % 3] * x[(k + 1) % 3]
    X = np.array([1.0, 2.0, 3.0])
    counts = {(1, 2): 0, (2, 0): 0, (0, 1): 0}
    for k in range(1, N):
        counts[(k % 3, (k + 1) % 3)] += 1
    want = np.zeros(3)
    want[0] = 1
    for (a, b), c in counts.items():
        want[a] += c * X[b]
        want[b] += c * X[a]
    np.testing.assert_allclose(tl.grad(e, wrt=x)(x=X), want)
    d = tl.derivative(e, wrt=[x])
    assert tl.evaluate(d, x=X, dx=np.ones(3)) == pytest.approx(want.sum())
    adj = tl.adjoint(e, wrt=[x])
    np.testing.assert_allclose(tl.evaluate(adj, x=X, dy=1.0), want)
