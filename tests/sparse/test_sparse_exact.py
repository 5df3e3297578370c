"""Exact (sympy) evaluation of sparse tensors (issue 16: every stage, the exact
evaluator included).  Oracle: the same sums done by hand in rationals."""

import numpy as np
import pytest
import scipy.sparse as sp
import sympy

import tensorlang as tl

n, m = tl.sizes("n m")
S = tl.relation("S", n, m)
A = tl.sparse_tensor("A", S)
x = tl.tensor("x", m)
quad = tl.sum(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j] * x[j]))

COORDS = np.array([[0, 1], [2, 0], [0, 1]])  # a duplicate: its values add up
t = sympy.Symbol("t")
VALS = np.array([sympy.Rational(1, 3), t, sympy.Rational(1, 6)], dtype=object)
X = np.array([sympy.Rational(2, 5), sympy.Integer(3)], dtype=object)


def test_exact_value_with_rational_and_symbolic_entries():
    got = tl.evaluate(quad, A=(COORDS, VALS), x=X, n=3)
    want = (sympy.Rational(1, 3) + sympy.Rational(1, 6)) * 9 + t * sympy.Rational(4, 25)
    assert sympy.simplify(got - want) == 0


def test_exact_adjoint_is_zero_off_the_pattern():
    mask = sp.coo_matrix((np.ones(3), (COORDS[:, 0], COORDS[:, 1])), shape=(3, 2))
    dA = tl.evaluate(tl.adjoint(quad, wrt=[A]), x=X, S=mask, dy=sympy.Integer(1))
    want = np.zeros((3, 2), dtype=object)
    want[0, 1] = 9
    want[2, 0] = sympy.Rational(4, 25)
    assert all(sympy.simplify(a - b) == 0 for a, b in zip(np.ravel(dA), want.ravel()))


@pytest.mark.parametrize("make", [lambda: tl.compile(quad), lambda: tl.grad(quad, wrt=x)])
def test_compiled_kernels_refuse_exact_sparse_values(make):
    with pytest.raises(tl.InputError, match="exact"):
        make()(A=(COORDS, VALS), x=np.array([0.4, 3.0]), n=3)


def test_exact_values_must_be_numbers():
    with pytest.raises(tl.InputError, match="exact values"):
        tl.evaluate(quad, A=(COORDS, np.array(["a", "b", "c"], dtype=object)), x=X, n=3)
