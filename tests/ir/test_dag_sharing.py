"""DAG-shared programs: every walk visits a shared node once per context.

A Python loop that reuses an intermediate (``e = e*a + e*b``, or a stencil
``u = gen(i: u[i-1] + u[i] + u[i+1])`` applied K times) builds a term whose
tree has 2^K or 3^K paths but only O(K) distinct nodes.  Canonicalization
(the key of every kernel and derived-program cache entry), the bounds
checker, the printer's bounded form (every error message) and predicate
simplification each walked every path; these tests count their visits.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import bounds, printer
from tensorlang.errors import describe
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


def _stencil(K):
    n = tl.size("n")
    x = tl.tensor("x", n)
    u = x
    for _ in range(K):
        u = tl.gen(n, lambda i, u=u: 0.5 * u[i] + 0.25 * tl.iverson(i >= 1, u[i - 1])
                   + 0.25 * tl.iverson(i + 1 <= n - 1, u[i + 1]))
    return tl.sum(n, lambda i: u[i] * u[i]), x


def _numpy_stencil(X, K):
    u = X.copy()
    for _ in range(K):
        v = 0.5 * u
        v[1:] += 0.25 * u[:-1]
        v[:-1] += 0.25 * u[1:]
        u = v
    return float(u @ u)


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_bounds_check_of_a_repeated_stencil_is_linear(monkeypatch):
    # each access is checked in the context of the binders its indices use,
    # plus one size-only fact per other enclosing loop (it runs, its guard can
    # hold): a few contexts per level, whatever path led there (3^K before)
    calls = _counting(monkeypatch, bounds, "_check_access")
    counts = []
    for K in (5, 10, 20):
        calls.clear()
        e, _ = _stencil(K)
        bounds.check_program(e)
        counts.append(len(calls))
    assert counts[2] - counts[1] == 2 * (counts[1] - counts[0]) and counts[2] <= 20 * 20
    # an access under an empty loop is never made: not a size constraint
    n = tl.size("n")
    x = tl.tensor("x", n)
    under = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j >= 2, x[i] * x[3])))
    bounds.check_sizes(bounds.check_program(under), {"n": 0})
    bounds.check_sizes(bounds.check_program(under), {"n": 2})  # j >= 2 never holds
    with pytest.raises(tl.InputError):
        bounds.check_sizes(bounds.check_program(under), {"n": 3})
    X = np.random.default_rng(1).standard_normal(12)
    assert tl.evaluate(_stencil(20)[0], x=X) == pytest.approx(_numpy_stencil(X, 20), rel=1e-12)


def test_messages_print_a_bounded_prefix(monkeypatch):
    e, _ = _stencil(40)  # its printed tree has 3^40 accesses
    calls = _counting(monkeypatch, printer, "_pretty_node")
    text = describe(e)
    assert len(text) == 200 and text.endswith("...") and text.startswith("sum[i:n] (gen[")
    assert len(calls) < 200 * 40
    # the bounded print is the head of the full print (a small program: equal)
    small, _ = _stencil(2)
    assert f"{small:.100000}" == repr(small)
    assert repr(small).startswith(f"{small:.60}"[:-3])


def test_compile_and_gradient_of_a_repeated_stencil():
    e, x = _stencil(30)
    X = np.random.default_rng(2).standard_normal(70)
    assert tl.compile(e)(x=X) == pytest.approx(_numpy_stencil(X, 30), rel=1e-10)
    e4, x4 = _stencil(4)
    v, g = tl.value_and_grad(e4, [x4])(x=X)
    assert v == pytest.approx(_numpy_stencil(X, 4), rel=1e-12)
    d = np.random.default_rng(3).standard_normal(70)
    h = 1e-6
    fd = (_numpy_stencil(X + h * d, 4) - _numpy_stencil(X - h * d, 4)) / (2 * h)
    assert float(np.ravel(g) @ d) == pytest.approx(fd, rel=1e-6)
