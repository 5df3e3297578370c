"""The normal-form checkers of paper Section 5 (one per pass; RULES.md
Section 4) on hand-written positive and negative terms, and the pipeline
``tl.normalize`` with its debug mode (every pass asserts its pre- and
post-condition)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.errors import TensorLangError
from tensorlang.ir import REAL, Let, Var, input_vars
from tensorlang.passes import pipeline
from tensorlang.passes.normal_forms import is_gen_pushed_out, is_let_lifted, is_pair_free, is_tensor_ssa
from tensorlang.passes.pair_elim import is_soa
from tensorlang.typecheck import type_of
from tests.oracles import check_pass, symbolize
from tests.strategies import programs

n, m = tl.sizes("n m")
x = tl.tensor("x", n)
s = tl.scalar("s")
P = tl.var("P", tl.pair_type(tl.tensor_of([n]), REAL))


# --------------------------------------------------------------------------
# Checkers, independently of the passes


def test_let_lifted():
    assert is_let_lifted(tl.let(s * s, lambda a: tl.let(a + 1, lambda b: b * a)))
    assert is_let_lifted(tl.sum(n, lambda i: x[i]))
    assert not is_let_lifted(tl.let(s, lambda a: a) + s)
    assert not is_let_lifted(tl.gen(n, lambda i: tl.let(x[i], lambda a: a * a)))
    assert not is_let_lifted(tl.let(tl.let(s, lambda a: a * a), lambda b: b))  # 5.10 applies


def test_pair_free():
    assert is_pair_free(tl.pair(tl.gen(n, lambda i: tl.proj(P, 0)[i] * 2), tl.proj(P, 1)))
    assert is_pair_free(tl.let(tl.sum(n, lambda i: x[i]), lambda a: tl.pair(a, tl.pair(a, s))))
    assert not is_pair_free(tl.proj(tl.pair(s, s), 0))  # a projection of a non-input
    assert not is_pair_free(tl.let(tl.pair(s, s), lambda q: tl.proj(q, 0)))  # a pair-typed statement
    assert not is_pair_free(tl.sum(n, lambda i: tl.proj(tl.gen(n, lambda j: tl.pair(x[j], s))[i], 1)))
    assert not is_pair_free(P)  # a pair-typed output component (the pass expands it)


def test_gen_pushed_out():
    assert is_gen_pushed_out(tl.let(tl.gen(n, lambda i: tl.iverson(i > 0, x[i] * x[i - 1])),
                                    lambda y: tl.gen(n, lambda i: tl.sum(n, lambda j: y[j] * x[i]))))
    assert is_gen_pushed_out(tl.iverson(n > 1, x))  # a bracketed variable may stay tensor-valued
    assert not is_gen_pushed_out(tl.iverson(n > 1, tl.gen(n, lambda i: x[i])))  # 5.23 applies
    assert not is_gen_pushed_out(tl.sum(n, lambda j: tl.gen(n, lambda i: x[i] * 2)[j]))  # 5.21 applies
    assert not is_gen_pushed_out(tl.gen(n, lambda i: tl.iverson(i > 0, tl.iverson(i < 3, x[i]))))  # 5.24
    assert not is_gen_pushed_out(tl.gen(n, lambda i: tl.iverson(n > 2, x)[i]))  # 5.22


def test_tensor_ssa_checker_is_the_figure_10_grammar():
    X = Var("X", 77001, type_of(x))
    Y = Var("Y", 77002, type_of(x))
    good = Let(X, x, Let(Y, tl.canonicalize(tl.gen(n, lambda i: tl.exp(X[i]))), Y))
    assert is_tensor_ssa(good)
    bad = Let(X, x, tl.gen(n, lambda i: tl.exp(X[i])))  # output not a variable
    assert not is_tensor_ssa(bad)
    assert not is_tensor_ssa(Let(Y, tl.canonicalize(tl.gen(n, lambda i: tl.exp(x[i]) + 1)), Y))


# --------------------------------------------------------------------------
# The pipeline


def _deconv():
    n_, m_ = tl.sizes("n m")
    xx, c, z = tl.tensor("x", n_ + m_ - 1), tl.tensor("c", m_), tl.tensor("z", n_)
    y = tl.gen(n_, lambda i: tl.sum(m_, lambda j: xx[i - j + m_ - 1] * c[j]))
    return tl.sum(n_, lambda i: (y[i] - z[i]) ** 2)


def test_normalize_is_public_and_gives_tensor_ssa():
    loss = _deconv()
    rng = np.random.default_rng(2)
    ins = {"x": rng.normal(size=7), "c": rng.normal(size=3), "z": rng.normal(size=5)}
    r = check_pass(tl.normalize, loss, ins, {}, symbolic_inputs=symbolize(ins), symbolic_cost=True)
    assert is_tensor_ssa(r.output)
    ref = ((np.convolve(ins["x"], ins["c"], mode="valid") - ins["z"]) ** 2).sum()
    assert tl.evaluate(r.output, **ins) == pytest.approx(ref, rel=1e-12)
    assert tl.cost(r.output, n=5, m=3) == tl.cost(loss, n=5, m=3)


def test_debug_mode_asserts_pre_and_postconditions(monkeypatch):
    prev = pipeline.debug(True)
    try:
        out = tl.normalize(_deconv() * 2)
        assert is_tensor_ssa(out)
        # a broken pass is caught by its post-condition
        broken = pipeline.Stage("broken", lambda e: tl.let(e, lambda a: a) + 0, lambda e: None,
                                pipeline.STAGES[0].post)
        with pytest.raises(pipeline.NormalFormViolation, match="postcondition"):
            pipeline.run_stage(broken, s * s)
        # and a pass given input outside its precondition too
        with pytest.raises(pipeline.NormalFormViolation, match="precondition"):
            pipeline.run_stage(pipeline.STAGES[3], tl.gen(n, lambda i: tl.let(x[i], lambda a: a)))
    finally:
        pipeline.debug(prev)


def test_debug_mode_from_the_environment(monkeypatch):
    import importlib

    monkeypatch.setenv("TENSORLANG_DEBUG", "1")
    fresh = importlib.reload(pipeline)
    try:
        assert fresh.debug() is True
    finally:
        monkeypatch.delenv("TENSORLANG_DEBUG")
        importlib.reload(pipeline)


def test_array_of_structs_input_error_names_the_input():
    a = tl.var("a", tl.tensor_of([n], tl.pair_type(REAL, REAL)))
    with pytest.raises(TensorLangError, match="input a .*struct of arrays"):
        tl.normalize(tl.sum(n, lambda i: tl.proj(a[i], 1)))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs_through_the_pipeline_in_debug_mode(prog):
    if not (all(is_soa(v.type) for v in input_vars(prog.expr)) and is_soa(type_of(prog.expr))):
        return
    prev = pipeline.debug(True)
    try:
        check_pass(tl.normalize, prog.expr, prog.inputs, prog.sizes, max_rule_checks=4)
    finally:
        pipeline.debug(prev)
