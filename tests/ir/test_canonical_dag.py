"""Alpha-canonicalization of DAG-shared programs (ir/scope.canonicalize).

A Python loop that reuses an intermediate (``e = e*a + e*b``) builds a term
whose tree has 2^K paths but only O(K) distinct nodes. Canonicalization keys
every kernel and derived-program cache entry, so it must visit each shared
node once per binder context, not once per path.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir import canonicalize, scope


def _doubling(K, name="i"):
    n = tl.size("n")
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: x[i] * x[i])
    for _ in range(K):
        e = e * 0.5 + e * 0.25
    return e, x


def test_visits_grow_linearly_with_the_sharing_depth(monkeypatch):
    calls = []
    real = scope._Canon._node

    def counted(self, n, *a):
        calls.append(n)
        return real(self, n, *a)

    monkeypatch.setattr(scope._Canon, "_node", counted)
    counts = []
    for K in (10, 20, 40):
        calls.clear()
        canonicalize(_doubling(K)[0])
        counts.append(len(calls))
    # each doubling adds a fixed number of distinct nodes (two products, one
    # sum, their constants): linear, where the tree walk visits 2^K copies
    assert counts[2] - counts[1] == 2 * (counts[1] - counts[0])
    assert counts[2] < 20 * 40


def test_shared_binders_keep_their_own_renaming():
    # one gen body shared under two different binder depths: each copy is
    # renamed for its own context (the memo key includes the renaming)
    n = tl.size("n")
    x = tl.tensor("x", n, n)
    row = tl.gen(n, lambda j: x[j, j] * 2.0)
    e = tl.sum(n, lambda i: row[i]) + tl.sum(n, lambda i: tl.sum(n, lambda k: row[k] * x[i, k]))
    c = canonicalize(e)
    assert canonicalize(c) is c
    X = np.arange(9.0).reshape(3, 3)
    assert tl.evaluate(c, x=X) == pytest.approx(tl.evaluate(e, x=X))


def test_gradient_of_a_deeply_shared_loss():
    # 0.75^40 Σ x² : the gradient is 2·0.75^40·x (a hand computation)
    e, x = _doubling(40)
    X = np.array([0.0, 1.0, -2.0])
    g = tl.grad(e, [x])(x=X)
    np.testing.assert_allclose(np.asarray(g).ravel(), 2 * 0.75**40 * X, rtol=1e-12)
