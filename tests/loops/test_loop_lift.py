"""Per-element time loops under gen/sum (issue #17 item 1; loops extend the
paper's language, Section 4): ``gen[j:m] loop[t:T] (s = init_j) body_j``
runs as one loop whose state is the tensor of the elements' states
(``loops.lift_loop``), so it is compiled, differentiated and costed like
any loop program.

Oracles: NumPy re-implementations (values), central finite differences
(gradients), the dot-product test between ``tl.jvp`` and ``tl.vjp``, the
counting evaluator on the per-element program as written (tests/counting.py:
the lifted loop performs the elements' operations, no more), and
bit-identical gradients under every checkpoint policy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.loops import chain

from tests.counting import counting_cost, total

n, m, p = tl.sizes("n m p")
a = tl.scalar("a")
X = tl.tensor("X", m, n)
F = tl.tensor("F", 4, m)
q = tl.tensor("q", m, p, n)


@pytest.fixture
def python_kernels(monkeypatch):
    from tensorlang.backend import api

    monkeypatch.setattr(api, "compile", api.python_kernel)


def scalar_per_element(ck="all"):
    # one scalar ODE per row of X, started at X[j, 0], driven by X[j, 1]
    per = tl.gen(m, lambda j: tl.loop(5, X[j, 0], lambda t, s: 0.5 * s + a * tl.sin(s) + 0.1 * X[j, 1], checkpoint=ck))
    return tl.sum(m, lambda j: per[j] * per[j])


def scalar_np(X, a):
    s = X[:, 0].copy()
    for _ in range(5):
        s = 0.5 * s + a * np.sin(s) + 0.1 * X[:, 1]
    return float(s @ s)


def tensor_per_element(ck="all"):
    # a tensor state per (j, k), under a gen and a sum, forced by F[t, j]
    def elem(j, k):
        L = tl.loop(4, tl.gen(n, lambda r: q[j, k, r]),
                    lambda t, s: tl.gen(n, lambda r: tl.tanh(s[r]) + F[t, j] * a), checkpoint=ck)
        return tl.sum(n, lambda i: L[i])

    g = tl.gen(m, lambda j: tl.sum(p, lambda k: elem(j, k)))
    return tl.sum(m, lambda j: g[j] * g[j])


def tensor_np(q, F, a):
    s = q.copy()
    for t in range(4):
        s = np.tanh(s) + (F[t] * a)[:, None, None]
    g = s.sum(axis=(1, 2))
    return float(g @ g)


def _kw(seed=0):
    rng = np.random.default_rng(seed)
    return dict(X=rng.uniform(-1, 1, (3, 2)), a=0.6), dict(q=rng.uniform(-1, 1, (3, 2, 4)), F=rng.uniform(-1, 1, (4, 3)),
                                                          a=0.7)


def test_values_compiled_and_one_loop_over_the_elements(python_kernels):
    from tensorlang.backend import api
    from tensorlang import driver
    from tensorlang.backend.loop_kernel import LoopKernel

    kx, kq = _kw()
    for loss, kw, ref in ((scalar_per_element(), kx, scalar_np), (tensor_per_element(), kq, tensor_np)):
        want = ref(**kw)
        assert tl.evaluate(loss, **kw) == pytest.approx(want, rel=1e-12)
        assert LoopKernel(loss, "sparse", None, driver.python_kernel)(**kw) == pytest.approx(want, rel=1e-12)
        (sp,) = chain(loss)
        assert str(sp.loop.svar.type) in ("[m]ℝ", "[m][p][n]ℝ")  # the elements' states, side by side


def test_numba_compiled_per_element_loop():
    kx, _ = _kw(1)
    assert tl.compile(scalar_per_element())(**kx) == pytest.approx(scalar_np(**kx), rel=1e-12)


@pytest.mark.parametrize("which", ["scalar", "tensor"])
def test_gradients_finite_differences_dot_product_and_policies(which, python_kernels):
    kx, kq = _kw(2)
    build, kw, ref, wrt = ((scalar_per_element, kx, scalar_np, [X, a]) if which == "scalar"
                           else (tensor_per_element, kq, tensor_np, [q, F, a]))
    loss = build()
    gs = tl.grad(loss, wrt=wrt)(**kw)
    rng = np.random.default_rng(3)
    h = 1e-6
    dirs = {v.name: (rng.standard_normal(np.shape(kw[v.name])) if np.ndim(kw[v.name]) else 1.0) for v in wrt}
    for v, g in zip(wrt, gs):
        d = dirs[v.name]
        fd = (ref(**{**kw, v.name: kw[v.name] + h * d}) - ref(**{**kw, v.name: kw[v.name] - h * d})) / (2 * h)
        assert float(np.sum(g * d)) == pytest.approx(fd, rel=1e-6, abs=1e-8), v.name
    _, jv = tl.jvp(loss, wrt=wrt)(**kw, **{"d" + k: d for k, d in dirs.items()})
    assert jv == pytest.approx(float(sum(np.sum(g * dirs[v.name]) for v, g in zip(wrt, gs))), rel=1e-12)
    for pol in ("all", 2, ("binomial", 1)):
        for x, y in zip(tl.grad(build(pol), wrt=wrt)(**kw), gs):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(tl.grad(loss, wrt=wrt, checkpoint=pol)(**kw), gs):
            np.testing.assert_array_equal(x, y)


def test_cost_is_the_per_element_programs_count():
    kx, kq = _kw(4)
    for loss, kw, sz in ((scalar_per_element(), kx, dict(m=3, n=2)), (tensor_per_element(), kq, dict(m=3, p=2, n=4))):
        assert tl.cost(loss, **sz) == total(counting_cost(loss, kw, **sz))
    # by hand, scalar: per element and step 0.5·s, a·sin(s), 0.1·X: 3 muls, 1 call, 2 adds; then Σ s² (m muls, m - 1 adds)
    assert tl.cost(scalar_per_element(), m=3, n=2) == 3 * 5 * 6 + 3 + 2
