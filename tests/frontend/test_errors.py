"""Every error class of issue 2 is a TensorLangError whose message names the
offending sub-expression (printed) or input, and says what was expected."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.errors import IndexError_, InputError, TypeCheckError
from tensorlang.ir import Access, Call, IndexVar, Let, Var, sym_aff

n, m = tl.sizes("n m")
x = tl.tensor("x", n)
A = tl.tensor("A", n, m)
s = tl.scalar("s")


def raises(exc, *fragments):
    """Context manager: raises ``exc`` whose message contains every fragment."""

    class _Ctx:
        def __enter__(self):
            self.cm = pytest.raises(exc)
            self.info = self.cm.__enter__()
            return self.info

        def __exit__(self, *a):
            out = self.cm.__exit__(*a)
            msg = str(self.info.value)
            for f in fragments:
                assert f in msg, f"{f!r} not in message {msg!r}"
            assert isinstance(self.info.value, tl.TensorLangError)
            return out

    return _Ctx()


# -- ill-typed programs --------------------------------------------------------------


def test_adding_a_tensor_to_a_scalar():
    with raises(TypeCheckError, "+", "x", "[n]ℝ", "scalar"):
        x + s


def test_multiplying_tensors_and_calling_a_function_on_a_tensor():
    with raises(TypeCheckError, "*", "x", "[n]ℝ"):
        x * x
    with raises(TypeCheckError, "exp", "x", "[n]ℝ"):
        tl.exp(x)


def test_accessing_a_scalar():
    with raises(TypeCheckError, "too many indices", "s", "ℝ"):
        s[0]


def test_too_many_indices():
    with raises(TypeCheckError, "too many indices", "A[0, 1]", "ℝ"):
        A[0, 1, 2]
    with raises(TypeCheckError, "cannot index", "s"):  # built without the API's check
        tl.type_of(Access(s, sym_aff(IndexVar("i", 999))))


def test_summing_a_pair_or_a_tensor():
    with raises(TypeCheckError, "sum", "(x[i], s)", "(ℝ × ℝ)"):
        tl.sum(n, lambda i: tl.pair(x[i], s))
    with raises(TypeCheckError, "sum", "x", "[n]ℝ"):
        tl.sum(n, lambda i: x)


def test_projecting_a_non_pair():
    with raises(TypeCheckError, "π0", "s", "pair"):
        tl.proj(s, 0)
    with raises(tl.TensorLangError, "0 or 1"):
        tl.proj(tl.pair(s, s), 2)


def test_a_free_index_variable():
    body = tl.gen(n, lambda i: x[i] * 2).body  # x[i]·2 with i unbound
    with raises(TypeCheckError, "free index", "i", "x[i]·2", "gen, sum or exists"):
        tl.evaluate(body, x=np.ones(3))


def test_let_annotation_mismatch():
    v = Var("v", 12345, tl.Real)
    with raises(TypeCheckError, "let v", "ℝ", "x", "[n]ℝ"):
        tl.type_of(Let(v, x, v))


def test_function_arity_and_unknown_function():
    with raises(TypeCheckError, "exp takes 1", "exp(s, s)"):
        tl.type_of(Call("exp", (s, s)))
    with raises(tl.TensorLangError, "unknown scalar function", "nope"):
        tl.type_of(Call("nope", (s,)))


# -- non-affine indices ---------------------------------------------------------------


def test_index_times_index_is_not_affine():
    with raises(IndexError_, "non-affine", "i", "j"):
        tl.gen(n, lambda i: tl.sum(n, lambda j: x[i * j]))


def test_indexing_by_data_is_not_affine():
    with raises(IndexError_, "non-affine", "x[i]", "no indexing by data"):
        tl.gen(n, lambda i: x[x[i]])


def test_non_integer_index_and_index_used_as_value():
    with raises(IndexError_, "1.5"):
        x[1.5]
    with raises(IndexError_, "non-affine"):
        tl.gen(n, lambda i: i * 0.5)
    with raises(tl.TensorLangError, "index", "used as a value"):
        tl.gen(n, lambda i: x[i] + i)


def test_extents_must_not_mention_indices():
    with raises(tl.TensorLangError, "extent", "index"):
        tl.gen(n, lambda i: tl.gen(i, lambda j: 1.0))


def test_values_cannot_be_compared_or_used_as_booleans():
    # scalar comparisons are tl.where conditions (issue #17): tensors do not compare,
    # and no comparison has a Python truth value
    with raises(tl.TensorLangError, "x", "real scalar"):
        x > 1
    with raises(tl.TensorLangError, "x[0]", "truth value"):
        bool(x[0] > 1)
    with raises(tl.TensorLangError, "x[0]", "truth value"):
        bool(x[0])
    with raises(tl.TensorLangError, "predicate"):
        bool(sym_aff(IndexVar("i", 1)) < 2)
    with raises(tl.TensorLangError, "expected a predicate", "x[0]"):
        tl.iverson(x[0], 1.0)


def test_slicing_and_non_constant_exponents():
    with raises(tl.TensorLangError, "slicing", "x", "gen"):
        x[1:3]
    with raises(tl.TensorLangError, "constant exponents", "x[1]"):
        x[0] ** x[1]


# -- sizes and shapes ----------------------------------------------------------------


def test_inconsistent_shapes_name_the_input():
    e = tl.sum(n, lambda i: x[i] * A[i, 0])
    with raises(InputError, "input x", "(3,)", "n = 4", "input A", "(4, 2)"):
        tl.evaluate(e, x=np.ones(3), A=np.ones((4, 2)))


def test_wrong_number_of_dimensions_names_the_input():
    with raises(InputError, "input x", "1 dimension", "(3, 2)"):
        tl.evaluate(tl.sum(n, lambda i: x[i]), x=np.ones((3, 2)))
    with raises(InputError, "input s", "0 dimension"):
        tl.evaluate(s * 2, s=np.ones(3))


def test_shape_giving_no_integer_size():
    y = tl.tensor("y", 2 * n)
    with raises(InputError, "input y", "length 3", "2·n"):
        tl.evaluate(y[0], y=np.ones(3))


def test_uninferable_and_bad_sizes():
    with raises(InputError, "cannot infer", "n"):
        tl.evaluate(tl.sum(n, lambda i: 1.0))
    with raises(InputError, "size n", "non-negative int"):
        tl.evaluate(tl.sum(n, lambda i: 1.0), n=-1)
    with raises(InputError, "size n", "non-negative int"):
        tl.evaluate(tl.sum(n, lambda i: 1.0), n=2.5)
    w = tl.tensor("w", n + m - 1)
    with raises(InputError, "cannot determine", "input w"):
        tl.evaluate(w[0], w=np.ones(3))


def test_relation_shape_and_coordinates():
    R = tl.relation("R", n, m)
    e = tl.sum([n, m], lambda i, j: tl.iverson(R(i, j), A[i, j]))
    with raises(InputError, "relation R", "(2, 2)"):
        tl.evaluate(e, A=np.ones((3, 2)), R=np.ones((2, 2), bool))
    with raises(InputError, "relation R", "outside [0, 2)"):
        tl.evaluate(e, A=np.ones((3, 2)), R=np.array([[0, 5]]))
    with raises(InputError, "relation R", "coordinate rows"):
        tl.evaluate(e, A=np.ones((3, 2)), R=np.array([0, 1, 2]))
    with raises(InputError, "relation R", "dtype"):
        tl.evaluate(e, A=np.ones((3, 2)), R=np.ones((3, 2)))
    with raises(tl.TensorLangError, "relation R", "arity 2"):
        R(1)


# -- out-of-range accesses -----------------------------------------------------------------


def test_unguarded_out_of_range_access_names_the_access():
    # refused before it runs (tensorlang.bounds), with the guard that makes it legal
    with raises(IndexError_, "x[i + 1]", "outside [0, n)", "guard it: tl.iverson(i + 1 < n, x[i + 1])"):
        tl.evaluate(tl.sum(n, lambda i: x[i + 1]), x=np.ones(3))
    with raises(IndexError_, "x[i - 1]", "guard it: tl.iverson(i - 1 >= 0, x[i - 1])"):
        tl.evaluate(tl.sum(n, lambda i: x[i - 1]), x=np.ones(3))
    # the same access under its guard is fine
    assert tl.evaluate(tl.sum(n, lambda i: tl.iverson(i - 1 >= 0, x[i - 1])), x=np.ones(3)) == 2.0


def test_a_relation_outside_its_extents_is_false_not_an_error():
    """R(a) is membership in a set of tuples within R's extents (as the cost
    model and the kernels read it), so a conjunction stays commutative."""
    R = tl.relation("R", n, m)
    e = tl.sum(n, lambda i: tl.iverson(R(i + 1, 0), x[i]))
    assert tl.evaluate(e, x=np.array([1.0, 10.0]), R=np.ones((2, 2), bool)) == 1.0
    swapped = tl.sum(n, lambda i: tl.iverson(R(i + 1, 0) & (i + 1 < n), x[i]))
    assert tl.evaluate(swapped, x=np.array([1.0, 10.0]), R=np.ones((2, 2), bool)) == 1.0


# -- inputs ------------------------------------------------------------------------------


def test_unknown_and_missing_inputs():
    e = tl.sum(n, lambda i: x[i])
    with raises(InputError, "unknown input 'y'", "'x'"):
        tl.evaluate(e, x=np.ones(3), y=1.0)
    with raises(InputError, "missing input", "'x'"):
        tl.evaluate(e)


def test_two_inputs_with_one_name():
    with raises(InputError, "two different inputs", "'q'"):
        tl.evaluate(tl.tensor("q", n)[0] + tl.tensor("q", m)[0], q=np.ones(2))


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.ones(2) * 1j, np.ones(2, dtype=bool)])
def test_wrong_dtype_names_the_input(bad):
    with raises(InputError, "input x", "real array", "dtype"):
        tl.evaluate(tl.sum(n, lambda i: x[i]), x=bad)


def test_nan_inputs_are_rejected():
    with raises(InputError, "input s", "NaN"):
        tl.evaluate(s * 2, s=float("nan"))


def test_array_of_structs_input_is_rejected_with_the_fix():
    P = tl.var("P", tl.tensor_of([n], tl.pair_type(tl.Real, tl.Real)))
    with raises(InputError, "input P", "array-of-structs", "[n](ℝ × ℝ)", "struct of arrays"):
        tl.evaluate(tl.sum(n, lambda i: tl.proj(P[i], 0)), P=np.ones((3, 2)))


def test_pair_input_needs_a_tuple():
    p = tl.var("p", tl.pair_type(tl.Real, tl.Real))
    with raises(InputError, "input p", "tuple"):
        tl.evaluate(tl.proj(p, 0), p=1.0)


def test_bad_names_and_constants():
    with raises(tl.TensorLangError, "not an identifier"):
        tl.size("1n")
    with raises(tl.TensorLangError, "not finite"):
        tl.const(float("inf"))
    with raises(tl.TensorLangError, "boolean"):
        tl.const(True)
    with raises(tl.TensorLangError, "at least one extent"):
        tl.tensor("t")


def test_explicit_size_contradicting_a_shape():
    with raises(InputError, "input x", "length 3", "n = 4", "argument n=4"):
        tl.evaluate(tl.sum(n, lambda i: x[i]), x=np.ones(3), n=4)


def test_one_name_for_an_input_and_a_relation_or_size():
    R = tl.relation("q", n)
    q = tl.tensor("q", n)
    with raises(InputError, "'q'", "input", "relation"):
        tl.evaluate(tl.sum(n, lambda i: tl.iverson(R(i), q[i])), q=np.ones(2))
    nn = tl.tensor("n", n)
    with raises(InputError, "'n'", "input", "size"):
        tl.evaluate(tl.sum(n, lambda i: nn[i]), n=np.ones(2))
    with raises(InputError, "two different relations", "'S'"):
        tl.evaluate(tl.sum(n, lambda i: tl.iverson(tl.relation("S", n)(i) & tl.relation("S", m)(0), 1.0)), n=2, m=2,
                    S=np.ones(2, bool))
