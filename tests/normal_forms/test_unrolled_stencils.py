"""Gradients of unrolled stencils stay linear in the number of steps (issues #14, #17).

A time loop unrolled in Python (``tl.let`` per step, or one nested term) with
one bracket per shifted read: the adjoint's filters are the supports of the
shifted reads, and each level's filter is the union of the last level's,
shifted by -1, 0 and +1.  Kept as written, the derived program grew threefold
per step (4212, 12036, 35352, 105348 printed characters at K = 3..6; 61 s to
build at K = 8).  The adjoint now keeps each filter as its isl gist over the
index ranges (``simplify_preds.compact``) and the simplifier replaces a
bracket's disjunction by its gist when smaller (``simplify_preds.decide``):
``[i ≤ n-1 ∧ 0 ≤ i-1 ∧ i-1 < n ∨ 1 ≤ i+1 ∧ 0 ≤ i+1 ∧ i+1 < n]`` is ``[2 ≤ n]``.

Checked here against NumPy (the stencil as a matrix, its K-th power) and
central differences, at small sizes where the guards matter (n = 1, 2, 3),
and by size: the printed derived program, the largest bracket, and the
build's work (Python calls) grow at most linearly in K.
"""

from __future__ import annotations

import cProfile
import itertools
import pstats
import random

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autodiff import _grad_derive
from tensorlang.ir import REAL, Cmp, Iverson, Or, Var, as_aff, conj, disj, fresh_index, sym_aff, walk
from tensorlang.passes.simplify_preds import Ctx, atoms, decide
from tensorlang.printer import pretty
from tests.predicates import holds

n = tl.size("n")
x1 = tl.tensor("x", n)
x2 = tl.tensor("x", n, n)
NSYM = as_aff(n).terms[0][0]  # the size variable itself (a predicate's environment key)


# --------------------------------------------------------------------------
# The programs and their NumPy references


def step1(u):
    return tl.gen(n, lambda i: 0.5 * u[i] + 0.25 * tl.iverson(i >= 1, u[i - 1])
                  + 0.25 * tl.iverson(i + 1 <= n - 1, u[i + 1]))


def step2(u):
    return tl.gen([n, n], lambda i, j: 0.5 * u[i, j]
                  + 0.125 * tl.iverson(i >= 1, u[i - 1, j]) + 0.125 * tl.iverson(i + 1 <= n - 1, u[i + 1, j])
                  + 0.125 * tl.iverson(j >= 1, u[i, j - 1]) + 0.125 * tl.iverson(j + 1 <= n - 1, u[i, j + 1]))


def loss(dim: int, K: int, let: bool):
    step, x = (step1, x1) if dim == 1 else (step2, x2)
    final = (lambda u: tl.sum(n, lambda i: u[i] * u[i])) if dim == 1 else \
        (lambda u: tl.sum([n, n], lambda i, j: u[i, j] * u[i, j]))

    def run(u, k):
        if k == 0:
            return final(u)
        if let:
            return tl.let(step(u), lambda v: run(v, k - 1))
        return run(step(u), k - 1)

    return run(x, K), x


def matrix(dim: int, m: int) -> np.ndarray:
    """The step as a matrix on the flattened grid (reads outside are zero)."""
    pts = list(itertools.product(range(m), repeat=dim))
    at = {p: k for k, p in enumerate(pts)}
    w = 0.25 if dim == 1 else 0.125
    A = np.zeros((len(pts), len(pts)))
    for p in pts:
        A[at[p], at[p]] = 0.5
        for d in range(dim):
            for s in (-1, 1):
                q = list(p)
                q[d] += s
                if tuple(q) in at:
                    A[at[p], at[tuple(q)]] = w
    return A


def reference(dim: int, K: int, X: np.ndarray):
    M = np.linalg.matrix_power(matrix(dim, X.shape[0]), K)
    u = M @ X.reshape(-1)
    return float(u @ u), (2 * M.T @ u).reshape(X.shape)


# --------------------------------------------------------------------------
# Gradients


@pytest.mark.parametrize("let", [True, False], ids=["let", "nolet"])
@pytest.mark.parametrize("K", [1, 2, 3, 8, 16])
def test_1d_gradient_matches_numpy(K, let):
    e, x = loss(1, K, let)
    g = tl.grad(e, [x])
    for m in (1, 2, 3, 4, 7, 12):
        X = np.random.default_rng(100 * K + m).normal(size=m)
        got = np.asarray(g(x=X)).reshape(-1)
        np.testing.assert_allclose(got, reference(1, K, X)[1], rtol=1e-10, atol=1e-12, err_msg=f"K={K} n={m}")


@pytest.mark.parametrize("let", [True, False], ids=["let", "nolet"])
@pytest.mark.parametrize("K", [1, 4, 16])
def test_2d_gradient_matches_numpy(K, let):
    e, x = loss(2, K, let)
    g = tl.grad(e, [x])
    for m in (1, 2, 3, 5):
        X = np.random.default_rng(7 * K + m).normal(size=(m, m))
        np.testing.assert_allclose(np.asarray(g(x=X)), reference(2, K, X)[1], rtol=1e-10, atol=1e-12,
                                   err_msg=f"K={K} n={m}")


def test_1d_compiled_kernel_matches_numpy():
    """A size the runtime compiles (n >= 64): the kernel's peeled boundaries."""
    e, x = loss(1, 4, True)
    g = tl.grad(e, [x])
    X = np.random.default_rng(3).normal(size=70)
    np.testing.assert_allclose(np.asarray(g(x=X)), reference(1, 4, X)[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dim,K", [(1, 8), (2, 3)])
def test_gradient_matches_finite_differences(dim, K):
    """Central differences of the NumPy loss: independent of the matrix transpose above."""
    e, x = loss(dim, K, True)
    g = tl.grad(e, [x])
    m = 3
    X = np.random.default_rng(11).normal(size=(m,) * dim)
    got = np.asarray(g(x=X))
    h = 1e-6
    for idx in itertools.product(range(m), repeat=dim):
        d = np.zeros_like(X)
        d[idx] = h
        fd = (reference(dim, K, X + d)[0] - reference(dim, K, X - d)[0]) / (2 * h)
        assert abs(got[idx] - fd) <= 1e-6 * max(1.0, abs(fd)), (idx, got[idx], fd)


# --------------------------------------------------------------------------
# Sizes


def derived(dim: int, K: int, let: bool):
    e, x = loss(dim, K, let)
    return tl.grad(e, [x]).program


def largest_bracket(prog) -> int:
    return max((atoms(t.pred) for t in walk(prog) if isinstance(t, Iverson)), default=0)


@pytest.mark.parametrize("let", [True, False], ids=["let", "nolet"])
@pytest.mark.parametrize("dim", [1, 2])
def test_derived_program_grows_linearly(dim, let):
    size = {K: len(pretty(derived(dim, K, let))) for K in (4, 8, 16)}
    # linear: about 2x per doubling (the composed guards made it 81x from 4 to 8)
    assert size[8] < 2.5 * size[4], size
    assert size[16] < 2.5 * size[8], size


@pytest.mark.parametrize("let", [True, False], ids=["let", "nolet"])
def test_guards_stay_small(let):
    """No bracket of the K = 16 gradient holds more than a step's own guard."""
    assert largest_bracket(derived(1, 16, let)) <= 2
    assert largest_bracket(derived(2, 16, let)) <= 8


def _build_calls(K: int) -> int:
    e, x = loss(1, K, True)
    prof = cProfile.Profile()
    prof.enable()
    _grad_derive(e, [x], "sparse", Var("dy", 0, REAL), False)  # the passes (no disk cache)
    prof.disable()
    return pstats.Stats(prof).total_calls


def test_build_work_grows_linearly():
    """Work, not time: Python calls made by the passes (threefold per step before)."""
    _build_calls(2)  # warm the per-shape caches
    c8, c16 = _build_calls(8), _build_calls(16)
    assert c16 < 3 * c8, (c8, c16)


# --------------------------------------------------------------------------
# The predicate simplification on its own


def _equivalent_in_range(p, q, idx, sizes=range(1, 7)):
    for m in sizes:
        for pt in itertools.product(range(m), repeat=len(idx)):
            env = {NSYM: m, **dict(zip(idx, pt))}
            assert holds(p, env) == holds(q, env), (m, pt, p, q)


def test_composed_support_becomes_its_gist():
    i = fresh_index("i")
    a, N = sym_aff(i), as_aff(n)
    p = disj(conj(Cmp("<=", a, N - 1), Cmp("<=", as_aff(0), a - 1), Cmp("<", a - 1, N)),
             conj(Cmp("<=", as_aff(1), a + 1), Cmp("<=", as_aff(0), a + 1), Cmp("<", a + 1, N)))
    q = decide(Ctx(binds=((i, N),)), p)
    assert atoms(q) == 1 and not isinstance(q, Or), q  # 2 ≤ n
    _equivalent_in_range(p, q, [i])
    assert not holds(q, {NSYM: 1, i: 0}) and holds(q, {NSYM: 2, i: 0})  # a real guard: false at n = 1


def test_gist_keeps_indices_apart():
    """Inside i < h, j < w the one-atom gist of ``j + 1 < w ∨ i + 1 < h`` is the
    diagonal ``i + j + 2 < h + w``; the two boxes stay (the backend splits boxes)."""
    i, j = fresh_index("i"), fresh_index("j")
    p = disj(Cmp("<", sym_aff(j) + 1, as_aff(n)), Cmp("<", sym_aff(i) + 1, as_aff(n)))
    q = decide(Ctx(binds=((i, as_aff(n)), (j, as_aff(n)))), p)
    assert q is p


def test_random_disjunctions_of_shifted_ranges():
    """Unions of shifted ranges, as the adjoint composes them: the decided
    predicate is never larger and agrees with the original at every point."""
    rng = random.Random(5)
    i, j = fresh_index("i"), fresh_index("j")
    N = as_aff(n)
    for _ in range(40):
        dims = [i] if rng.random() < 0.5 else [i, j]
        parts = []
        for _ in range(rng.randrange(1, 5)):
            cs = []
            for v in dims:
                s = rng.randrange(-2, 3)
                a = sym_aff(v) + s
                cs += [Cmp("<=", as_aff(0), a), Cmp("<", a, N - rng.randrange(0, 2))]
            parts.append(conj(*rng.sample(cs, rng.randrange(1, len(cs) + 1))))
        p = disj(*parts)
        q = decide(Ctx(binds=tuple((v, N) for v in dims)), p)
        assert atoms(q) <= atoms(p), (p, q)
        _equivalent_in_range(p, q, dims, sizes=range(1, 6))
