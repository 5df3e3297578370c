"""Bounds (issue #12 item 4): every access is proven in range before anything runs.

An access over bound indices that isl cannot prove in range is refused by
every entry point with a BoundsError that names it and suggests the guard;
a constant (size-only) index is a call-time size constraint (InputError at
sizes that put it out of range, never a value).  The reference for "in
range" is a direct NumPy reading of the access at the given sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import bounds
from tensorlang.errors import BoundsError

n, m = tl.sizes("n m")
x = tl.tensor("x", n)
s = tl.scalar("s")


def _entry_points(prog, wrt, inputs):
    """Each public way of running (or deriving) ``prog``, as thunks."""
    return {
        "evaluate": lambda: tl.evaluate(prog, **inputs),
        "compile": lambda: tl.compile(prog)(**inputs),
        "grad": lambda: tl.grad(prog, wrt=wrt)(**inputs),
        "value_and_grad": lambda: tl.value_and_grad(prog, wrt=wrt)(**inputs),
        "vjp": lambda: tl.vjp(prog, wrt=wrt)(**inputs, dy=1.0),
        "jvp": lambda: tl.jvp(prog, wrt=wrt)(**inputs, **{"d" + wrt.name: np.ones_like(inputs[wrt.name])}),
        "derivative": lambda: tl.derivative(prog, wrt=[wrt]),
        "adjoint": lambda: tl.adjoint(prog, wrt=[wrt]),
    }


OFF_BY_ONE = tl.sum(n, lambda i: x[i + 1] * x[i + 1])


@pytest.mark.parametrize("entry", list(_entry_points(OFF_BY_ONE, x, {"x": np.arange(1.0, 6.0)})))
def test_unprovable_access_is_refused_by_every_entry_point(entry):
    # the stencil bug of issue #12: grad used to return [0, 4, 6, 8, 10]
    thunk = _entry_points(OFF_BY_ONE, x, {"x": np.arange(1.0, 6.0)})[entry]
    with pytest.raises(BoundsError) as err:
        thunk()
    msg = str(err.value)
    assert "x[i + 1]" in msg
    assert "tl.iverson(i + 1 < n, x[i + 1])" in msg  # the guard that makes it legal


def test_the_suggested_guard_is_legal_and_correct():
    fixed = tl.sum(n, lambda i: tl.iverson(i + 1 < n, x[i + 1] * x[i + 1]))
    assert bounds.check_program(fixed) == ()
    X = np.arange(1.0, 6.0)
    assert tl.evaluate(fixed, x=X) == pytest.approx(np.sum(X[1:] ** 2))
    g = tl.grad(fixed, wrt=x)(x=X)
    np.testing.assert_allclose(g, np.r_[0.0, 2 * X[1:]])


def test_lower_bound_suggestion():
    prog = tl.gen(n, lambda i: x[i - 1])
    with pytest.raises(BoundsError, match=r"tl.iverson\(i - 1 >= 0, x\[i - 1\]\)"):
        bounds.check_program(prog)


def test_access_past_another_size_is_refused():
    c = tl.tensor("c", m)
    with pytest.raises(BoundsError, match=r"c\[i\]"):
        tl.evaluate(tl.sum(n, lambda i: c[i]), c=np.ones(5), n=3)


CONST = tl.sum(n, lambda i: x[i]) * x[2]


@pytest.mark.parametrize("entry", ["evaluate", "grad", "value_and_grad", "vjp", "jvp"])
def test_constant_index_is_a_call_time_size_constraint(entry):
    small = {"x": np.array([1.0, 2.0])}
    with pytest.raises(tl.InputError, match=r"x\[2\]"):
        _entry_points(CONST, x, small)[entry]()
    big = {"x": np.array([1.0, 2.0, 3.0])}
    out = _entry_points(CONST, x, big)[entry]()
    X = big["x"]
    want_value, want_grad = X.sum() * X[2], np.array([X[2], X[2], X[2] + X.sum()])
    if entry == "evaluate":
        assert out == pytest.approx(want_value)
    elif entry in ("grad", "vjp"):
        np.testing.assert_allclose(out, want_grad)
    elif entry == "value_and_grad":
        assert out[0] == pytest.approx(want_value)
        np.testing.assert_allclose(out[1], want_grad)
    else:  # jvp with tangent ones: the directional derivative
        assert out[1] == pytest.approx(want_grad.sum())


def test_constant_index_refused_for_compile_at_call_or_compile_time():
    with pytest.raises(tl.TensorLangError):
        tl.compile(CONST)(x=np.array([1.0, 2.0]))


def test_derived_programs_keep_the_source_constraints():
    # the adjoint may substitute x[2] away; evaluating it at n = 2 is still refused
    adj = tl.adjoint(CONST, wrt=[x])
    with pytest.raises(tl.InputError):
        tl.evaluate(adj, x=np.array([1.0, 2.0]), dy=1.0)
    der = tl.derivative(CONST, wrt=[x])
    with pytest.raises(tl.InputError):
        tl.evaluate(der, x=np.array([1.0, 2.0]), dx=np.array([1.0, 1.0]))


def test_access_never_in_range_is_refused_at_once():
    prog = tl.gen(n, lambda i: 2 * s)[n]
    for thunk in (lambda: bounds.check_program(prog), lambda: tl.grad(prog, wrt=s),
                  lambda: tl.evaluate(prog, s=1.0, n=3)):
        with pytest.raises(BoundsError, match=r"\[n\]"):
            thunk()


def test_zero_sizes_are_checked_at_call_time():
    # y has m + n - 1 >= n entries whenever m >= 1; at m = 0 the sum reads past it
    x0 = tl.tensor("x0", m)
    prog = tl.let(tl.gen(m + n - 1, lambda i: tl.const(2.0)), lambda y: tl.sum(n, lambda i: y[i])) + tl.sum(m, lambda k: x0[k])
    cons = bounds.check_program(prog)
    assert cons and all(c.positive for c in cons)
    assert tl.evaluate(prog, x0=np.ones(2), n=3) == pytest.approx(2 * 3 + 2)
    with pytest.raises(tl.InputError, match="y"):
        tl.evaluate(prog, x0=np.ones(0), n=3)


def test_guards_relations_and_convolutions_are_proven():
    c = tl.tensor("c", m)
    xx = tl.tensor("xx", n + m - 1)
    conv = tl.gen(n, lambda i: tl.sum(m, lambda j: xx[i - j + m - 1] * c[j]))
    R = tl.relation("R", n, n)
    A = tl.tensor("A", n, n)
    rel = tl.sum([n, n], lambda i, j: tl.iverson(R(i, j), A[i][j]))
    stencil = tl.gen(n, lambda i: tl.iverson((i >= 1) & (i + 1 < n), x[i - 1] - 2 * x[i] + x[i + 1]))
    for prog in (conv, rel, stencil):
        assert bounds.check_program(prog) == ()


def test_check_sizes_directly():
    cons = bounds.check_program(CONST)
    bounds.check_sizes(cons, {"n": 3})
    with pytest.raises(tl.InputError):
        bounds.check_sizes(cons, {"n": 2})
    # not reached: the access sits under a loop that is empty at n = 0
    under = tl.sum(n, lambda i: x[i] * x[3])
    bounds.check_sizes(bounds.check_program(under), {"n": 0})
    with pytest.raises(tl.InputError):
        bounds.check_sizes(bounds.check_program(under), {"n": 2})


def test_a_shadowing_binder_is_checked_without_the_enclosing_guards():
    # gen[i:n] [2 ≤ i]·(gen[i:n] x[i-1])[i-1]: the inner gen reads x[-1] at its own
    # i = 0 whatever the outer guard says; the two binders are one index (as a
    # pass that inlines a let-bound gen under a loop can make), and the guard on
    # the outer one must not be read as a guard on the inner one
    from tensorlang import bounds
    from tensorlang.errors import BoundsError
    from tensorlang.ir import Access, Aff, Gen, Iverson

    n = tl.size("n")
    x = tl.tensor("x", n)
    i = tl.gen(n, lambda k: x[k]).var
    ai = Aff(((i, 1),), 0)
    bad = Gen(i, n, Iverson(ai >= 2, Access(Gen(i, n, Access(x, ai - 1)), ai - 1)))
    with pytest.raises(BoundsError, match=r"x\[\w+ - 1\]"):
        bounds.check_program(bad)
    good = Gen(i, n, Iverson(ai >= 2, Access(Gen(i, n, Iverson(ai >= 1, Access(x, ai - 1))), ai - 1)))
    bounds.check_program(good)
    X = np.arange(1.0, 6.0)
    np.testing.assert_array_equal(tl.evaluate(good, x=X), [0, 0, 1, 2, 3])
