"""The random-program strategy (tests/strategies.py) is sound and rich:
programs type-check, evaluate without error, float and exact sympy
evaluation agree, and every construct of Figure 3 shows up."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.ir import (
    Access, Add, And, Call, Cmp, Const, Exists, Gen, Iverson, Let, Mul, Or, Pair, Proj, Rel, Sum, Var, walk,
)
from tensorlang.typecheck import check_program

from tests.strategies import Program, assert_close, magnitude, predicates, programs

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_random_programs_typecheck_and_evaluate_finitely(prog: Program):
    check_program(prog.expr)
    value = prog.evaluate()
    flat = _flatten(value)
    assert all(np.isfinite(v) and abs(v) <= prog.bound * (1 + 1e-9) for v in flat)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_depth=2))
def test_float_and_exact_sympy_evaluation_agree(prog: Program):
    exact = prog.evaluate_exact()
    assert_close(prog.numeric(exact), prog.evaluate(), prog.bound)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(smooth=True, output="scalar"))
def test_smooth_programs_have_finite_differences(prog: Program):
    """Central differences in one random direction converge (the program is smooth there)."""
    rng = np.random.default_rng(0)
    names = [k for k in prog.inputs if k not in prog.relation_names]
    direction = {k: _like(prog.inputs[k], rng) for k in names}

    def at(h):
        shifted = dict(prog.inputs)
        for k in names:
            shifted[k] = _axpy(h, direction[k], prog.inputs[k])
        return prog_eval(prog, shifted)

    d1 = (at(1e-3) - at(-1e-3)) / 2e-3
    d2 = (at(5e-4) - at(-5e-4)) / 1e-3
    # Richardson: the two estimates differ by O(h²) for a smooth function
    assert abs(d1 - d2) <= 1e-3 * max(1.0, abs(d1), prog.bound)


@SETTINGS
@given(programs(output="scalar"))
def test_scalar_output(prog: Program):
    assert tl.type_of(prog.expr) is tl.Real
    assert isinstance(prog.evaluate(), float)


@SETTINGS
@given(programs(output="tensor"))
def test_tensor_output_has_declared_shape(prog: Program):
    from tensorlang.ir import shape_of

    value = prog.evaluate()
    shape = tuple(a.evaluate(prog.sizes) for a in shape_of(tl.type_of(prog.expr)))
    assert np.shape(value) == shape


@SETTINGS
@given(programs(pairs=False, relations=False, exists=False, lets=False, functions=False))
def test_flags_switch_constructs_off(prog: Program):
    kinds = {type(x) for x in walk(prog.expr)}
    assert not kinds & {Pair, Proj, Rel, Exists, Let, Call}


@settings(max_examples=60, deadline=None)
@given(predicates())
def test_predicate_programs_are_indicators(prog: Program):
    value = prog.evaluate()
    assert set(np.unique(value)) <= {0.0, 1.0}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_every_construct_is_generated(prog: Program):
    """Collect statistics over many programs; checked in the next test."""
    kinds = _STATS["kinds"]
    for x in walk(prog.expr):
        kinds[type(x).__name__] += 1
        if isinstance(x, Cmp):
            kinds["Cmp" + x.op] += 1
        if isinstance(x, Var) and x.uid == 0 and isinstance(x.type, tl.ir.PairT):
            kinds["pair input"] += 1
        if isinstance(x, Gen) and isinstance(tl.ir.scalar_elem(tl.type_of(x)), tl.ir.PairT):
            kinds["gen of pairs"] += 1
        if isinstance(x, Iverson) and isinstance(x.body, Access):
            kinds["guarded access"] += 1
    value = prog.evaluate()
    if isinstance(value, float):
        _STATS["zero scalars" if value == 0 else "nonzero scalars"] += 1
    if any(isinstance(x, Let) and _uses(x.body, x.var) >= 2 for x in walk(prog.expr)):
        kinds["let used twice"] += 1


def test_every_construct_was_generated():
    kinds = _STATS["kinds"]
    if not kinds:
        pytest.skip("statistics test did not run")
    for k in ["Gen", "Sum", "Access", "Iverson", "Let", "Add", "Mul", "Call", "Pair", "Proj", "Const", "And",
              "Or", "Exists", "Rel", "Cmp==", "Cmp<", "Cmp<=", "pair input", "gen of pairs", "guarded access",
              "let used twice"]:
        assert kinds[k] > 0, f"no {k} in {dict(kinds)}"
    assert _STATS["zero scalars"] > 0 and _STATS["nonzero scalars"] > 0


def test_magnitude_bounds_a_known_program():
    n = tl.size("n")
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: tl.exp(x[i]) * 2)
    assert magnitude(e) == pytest.approx(np.e * 2 * 4)


# --------------------------------------------------------------------------

_STATS: dict = {"kinds": collections.Counter(), "zero scalars": 0, "nonzero scalars": 0}


def _uses(e, v) -> int:
    count = 0

    def go(x):
        nonlocal count
        if x is v:
            count += 1
            return
        for c in tl.ir.children(x):
            if isinstance(c, tl.Expr):
                go(c)
            elif isinstance(c, tuple):
                for y in c:
                    if isinstance(y, tl.Expr):
                        go(y)

    go(e)
    return count


def _flatten(v):
    if isinstance(v, tuple):
        return [y for x in v for y in _flatten(x)]
    if isinstance(v, np.ndarray) and v.dtype == object:
        return [y for x in v.ravel() for y in _flatten(x)]
    return list(np.ravel(np.asarray(v, dtype=float)))


def _like(v, rng):
    if isinstance(v, tuple):
        return tuple(_like(x, rng) for x in v)
    if isinstance(v, np.ndarray):
        return rng.uniform(-1, 1, size=v.shape)
    return float(rng.uniform(-1, 1))


def _axpy(h, d, x):
    if isinstance(x, tuple):
        return tuple(_axpy(h, dd, xx) for dd, xx in zip(d, x))
    return x + h * d


def prog_eval(prog, inputs):
    return tl.evaluate(prog.expr, **inputs)


_ = (Add, And, Call, Const, Exists, Mul, Or, Pair, Proj, Rel, Sum)
