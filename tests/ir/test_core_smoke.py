"""First checks of the core IR: interning, alpha-equivalence, the deconvolution loss vs NumPy."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir import Add, Const, Var, REAL


def test_interning_makes_equal_terms_one_object():
    x = Var("x", 0, REAL)
    assert Add(x, Const(1)) is Add(x, Const(1))
    assert Add(x, Const(1)) is not Add(x, Const(2))
    assert Const(1.0) is Const(1)


def test_alpha_equivalence_ignores_bound_names_only():
    n = tl.size("n")
    x = tl.tensor("x", n)
    a = tl.gen(n, lambda i: x[i] * 2)
    assert a is not tl.gen(n, lambda k: x[k] * 2)  # distinct binder symbols
    assert tl.alpha_eq(a, tl.gen(n, lambda k: x[k] * 2))
    assert not tl.alpha_eq(a, tl.gen(n, lambda k: x[k] * 3))


def test_deconvolution_loss_matches_numpy():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    rng = np.random.default_rng(1)
    xv, cv, zv = rng.normal(size=12), rng.normal(size=4), rng.normal(size=9)
    ref = ((np.convolve(xv, cv, mode="valid") - zv) ** 2).sum()
    assert tl.evaluate(loss, x=xv, c=cv, z=zv) == pytest.approx(ref, rel=1e-12)
