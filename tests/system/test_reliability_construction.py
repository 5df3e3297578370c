"""Issue 15, Construction: every bad program or input is a TensorLangError
that names the sub-expression or input and says what was expected."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

import tensorlang as tl
from tensorlang.errors import IndexError_, InputError, TypeCheckError

n = tl.size("n")
x = tl.tensor("x", n)


def refused(fn, *fragments, exc=tl.TensorLangError):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


@pytest.mark.parametrize("op, sym", [(lambda i: i // 2, "//"), (lambda i: i / 2, "/"), (lambda i: i % 2, "%"),
                                     (lambda i: i ** 2, "**"), (lambda i: 2 // i, "//")])
def test_non_affine_index_operators(op, sym):
    refused(lambda: tl.gen(n, lambda i: x[op(i)]), "non-affine index", sym, exc=IndexError_)


def test_constant_base_power_is_exp_of_log():
    e = tl.sum(n, lambda i: 2 ** x[i])
    v = np.array([-1.5, 0.0, 0.25, 3.0])
    assert tl.evaluate(e, x=v) == pytest.approx(np.sum(2.0 ** v), rel=1e-14)
    g = tl.grad(e, wrt=x)(x=v)
    np.testing.assert_allclose(g, np.log(2.0) * 2.0 ** v, rtol=1e-13)
    # the compiled kernel agrees too
    np.testing.assert_allclose(tl.compile(tl.gen(n, lambda i: 0.5 ** x[i]), threads=1)(x=v), 0.5 ** v, rtol=1e-14)
    for bad in (0, -2, float("inf"), float("nan")):
        refused(lambda bad=bad: bad ** x[0], "positive", "x[0]")
    refused(lambda: "a" ** x[0], "cannot raise", "x[0]")


@pytest.mark.parametrize("obj", ["x", 1.0, 3, None, np.ones(3), n, n < 3])
@pytest.mark.parametrize("entry", ["evaluate", "grad", "compile", "value_and_grad", "normalize"])
def test_entry_points_refuse_non_programs(obj, entry):
    def call():
        f = getattr(tl, entry)
        if entry in ("grad", "value_and_grad"):
            return f(obj, wrt=x)
        return f(obj)

    refused(call, type(obj).__name__)


def test_object_array_of_strings_is_an_input_error():
    e = tl.sum(n, lambda i: x[i])
    refused(lambda: tl.evaluate(e, x=np.array(["a", "b"], dtype=object)), "input x", "str", exc=InputError)
    # exact evaluation over sympy still works
    a, b = sympy.symbols("a b")
    assert tl.evaluate(e, x=np.array([a, b], dtype=object)) == a + b


@pytest.mark.parametrize("make, fragments", [
    (lambda: tl.tensor(3, n), ["name of a tensor", "string"]),
    (lambda: tl.scalar(None), ["name of a scalar"]),
    (lambda: tl.relation(3, n), ["name of a relation"]),
    (lambda: tl.size(3), ["name of a size"]),
    (lambda: tl.sizes(3), ["tl.sizes"]),
    (lambda: tl.tensor("my x", n), ["identifier"]),
    (lambda: tl.tensor("z", -3), ["'z'", "negative"]),
    (lambda: tl.relation("R", n, -1), ["'R'", "negative"]),
    (lambda: tl.tensor("z", float("nan")), ["'z'", "nan"]),
    (lambda: tl.tensor("z", 2.5), ["'z'", "2.5"]),
    (lambda: tl.tensor("z", n * n), ["non-affine"]),
    (lambda: tl.var("v", 3), ["'v'", "type"]),
])
def test_bad_declarations(make, fragments):
    refused(make, *fragments)


def test_constants_that_do_not_fit_a_float():
    refused(lambda: x[0] + 10**400, "does not fit a float64")
    refused(lambda: tl.const(-(10**400)), "does not fit a float64")
    refused(lambda: x[0] * float("inf"), "not finite")
    refused(lambda: x[0] ** 10**400, "exponent", "x[0]")
    # a non-finite exponent is a real exponent: it follows NumPy (tests/backend/test_kernel_ir.py)
    assert np.isnan(tl.evaluate(x[0] ** float("nan"), x=np.array([2.0])))
    # a large integer that a double holds is rounded to it, as NumPy would
    e = x[0] + 10**20
    assert tl.evaluate(e, x=np.array([1.0])) == 1.0 + 1e20
    refused(lambda: x[10**30], "too large", exc=IndexError_)


def test_binder_functions_are_checked():
    refused(lambda: tl.gen(n, 3), "tl.gen", "function")
    refused(lambda: tl.sum(n, lambda i, j: x[i]), "tl.sum", "1 argument")
    refused(lambda: tl.gen([n, n], lambda i: x[i]), "tl.gen", "2 argument")
    refused(lambda: tl.let(x[0], 5), "tl.let")
    refused(lambda: tl.exists(n, None), "tl.exists")
    refused(lambda: tl.gen([], lambda: x[0]), "at least one extent")
    # *args and defaults are fine
    assert tl.evaluate(tl.sum([n, n], lambda *ij: x[ij[0]] * x[ij[1]]), x=np.array([1.0, 2.0])) == 9.0


def test_numpy_does_not_broadcast_over_expressions():
    refused(lambda: np.ones(3) + x[0], "ndarray")
    refused(lambda: np.sin(x[0]))
    assert tl.evaluate(np.float64(2.0) * x[0], x=np.array([3.0])) == 6.0


def test_bad_inputs_name_the_input():
    e = tl.sum(n, lambda i: x[i])
    refused(lambda: tl.evaluate(e, x=np.array([1 + 2j])), "input x", "real", exc=InputError)
    refused(lambda: tl.evaluate(e, x=np.ones((2, 2))), "input x", "dimension", exc=InputError)
    refused(lambda: tl.evaluate(e), "missing", "x", exc=InputError)
    refused(lambda: tl.evaluate(e, x=np.ones(2), y=np.ones(2)), "unknown input 'y'", exc=InputError)
    refused(lambda: tl.evaluate(e, x=np.ones(2), n=float("nan")), "size n", exc=InputError)
    refused(lambda: tl.evaluate(e, x=np.ones(2), n=3), "input x", exc=InputError)
    refused(lambda: tl.evaluate(e, x=[[1.0], [2.0, 3.0]]), "input x", exc=InputError)
    R = tl.relation("R", n)
    p = tl.sum(n, lambda i: tl.iverson(R(i), x[i]))
    refused(lambda: tl.evaluate(p, x=np.ones(2), R=np.full(2, 0.5)), "relation R", exc=InputError)
    refused(lambda: tl.evaluate(p, x=np.ones(2), R=[[0], [1, 2]]), "relation R", exc=InputError)
    refused(lambda: tl.evaluate(p, x=np.ones(2), R=np.array([[5]])), "relation R", exc=InputError)
    refused(lambda: tl.evaluate(p, x=np.ones(2), R=np.ones(3, dtype=bool)), "relation R", exc=InputError)


def test_type_errors_still_name_the_subexpression():
    refused(lambda: x + 1, "+", "x", exc=TypeCheckError)
    assert math.isclose(tl.evaluate(x[0] + 1, x=np.array([2.0])), 3.0)
