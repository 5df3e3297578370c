"""Gen pushout (paper Section 5.3, Figure 9; RULES.md Section 4.3): rules
5.21-5.24, the normal form, cost decrease by 5.21, and the three oracles on
hand-written and random programs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.errors import TensorLangError
from tensorlang.ir import (
    Access,
    Gen,
    IndexVar,
    Iverson,
    And,
    Cmp,
    alpha_eq,
    as_aff,
    input_vars,
    lets,
    sym_aff,
)
from tensorlang.passes.gen_pushout import access_gen, access_iverson, gen_pushout, iverson_gen, iverson_iverson
from tensorlang.passes.let_lift import let_lift
from tensorlang.passes.pair_elim import is_soa, pair_elim
from tensorlang.sharing import explicit_sharing
from tensorlang.typecheck import type_of
from tests.oracles import check_pass, check_rule, symbolize
from tests.strategies import programs

n, m = tl.sizes("n m")
x = tl.tensor("x", n)
A = tl.tensor("A", n, m)
s = tl.scalar("s")
RNG = np.random.default_rng(3)
XV, AV = RNG.normal(size=5), RNG.normal(size=(5, 3))
IN = {"x": XV, "A": AV, "s": 0.25}


def test_5_21_substitutes_the_index():
    g = tl.gen(n, lambda i: x[i] * x[i] + s)
    lhs = Access(g, as_aff(3))
    out = access_gen(lhs)
    assert out is x[3] * x[3] + s
    check_rule("5.21", lhs, out, IN, {"n": 5, "m": 3})


def test_5_21_inside_a_sum():
    # (gen[i:n] x[i]·x[i])[j] summed over j: one element per j is computed
    e = tl.sum(n, lambda j: tl.gen(n, lambda i: x[i] * x[i])[j])
    r = check_pass(gen_pushout, e, IN, {}, symbolic_cost=True)
    assert r.applied == {"5.21": 1}
    assert r.cost_out == 5 + 4  # hand count at n = 5: n multiplications, n - 1 additions
    assert alpha_eq(r.output, tl.sum(n, lambda j: x[j] * x[j]))


def test_5_22():
    lhs = Access(tl.iverson(n > 2, tl.gen(n, lambda i: x[i] * 2)), as_aff(1))
    out = access_iverson(lhs)
    assert out is Iverson(lhs.arr.pred, Access(lhs.arr.body, as_aff(1)))
    check_rule("5.22", lhs, out, IN, {"n": 5, "m": 3})


def test_5_23():
    lhs = tl.iverson(n > 3, tl.gen(n, lambda i: x[i] + 1))
    out = iverson_gen(lhs)
    g = lhs.body
    assert out is Gen(g.var, n, Iverson(lhs.pred, g.body))
    check_rule("5.23", lhs, out, IN, {"n": 5, "m": 3})


def test_5_23_renames_a_captured_index():
    # [i < 2]·(gen[i:n] x[i]) with the same index object outside and inside
    i = IndexVar("i", 424242)
    inner = Gen(i, n, Access(x, sym_aff(i)))
    lhs = Gen(i, n, Iverson(Cmp("<", sym_aff(i), as_aff(2)), inner))  # gen[i] [i<2]·gen[i] x[i]
    out = Gen(i, n, iverson_gen(lhs.body))
    assert out.body.var is not i
    check_rule("5.23", lhs, out, IN, {"n": 5, "m": 3})


def test_5_24():
    lhs = tl.iverson(n > 1, tl.iverson(m > 1, s * s))
    out = iverson_iverson(lhs)
    assert out is Iverson(And(lhs.pred, lhs.body.pred), s * s)
    check_rule("5.24", lhs, out, IN, {"n": 5, "m": 3})


def test_rules_do_not_match_elsewhere():
    for r in (access_gen, access_iverson, iverson_gen, iverson_iverson):
        assert r(s * s + s) is None


def test_gens_move_outward_and_indexing_moves_to_variables():
    e = tl.let(tl.gen(n, lambda i: tl.gen(m, lambda j: A[i, j] * 2)),
               lambda B: tl.iverson(n > 1, tl.gen(m, lambda j: tl.iverson(j > 0, tl.gen(n, lambda i: B[i, j]))[0])))
    e = let_lift(e)
    r = check_pass(gen_pushout, e, IN, {})
    binds, out = lets(r.output)
    assert isinstance(out, Gen)  # the bracket went inside the gen (5.23)
    assert r.applied == {"5.23": 2, "5.21": 1, "5.24": 1}  # by hand: inner 5.23, then 5.21, outer 5.23, 5.24


def test_needs_pair_free_input():
    e = tl.pair(s, s)
    with pytest.raises(TensorLangError, match="pair"):
        gen_pushout(tl.sum(n, lambda i: tl.proj(tl.pair(x[i], s), 0)))
    assert gen_pushout(e) is e  # an output tuple is allowed


def _hand():
    return [
        tl.gen(n, lambda i: tl.sum(m, lambda j: tl.gen(m, lambda k: A[i, k] * s)[j] * tl.iverson(j < 2, tl.gen(n, lambda q: x[q])[i]))),
        tl.iverson(n > 2, tl.gen(n, lambda i: tl.iverson(i > 0, tl.iverson(i < 4, x[i] + x[i - 1])))),
        tl.let(tl.gen(n, lambda i: x[i] * x[i]), lambda y: tl.gen(n, lambda i: tl.gen(m, lambda j: y[i] * A[i, j]))[1]),
    ]


@pytest.mark.parametrize("k", range(3))
def test_hand_written_programs(k):
    e = pair_elim(let_lift(explicit_sharing(_hand()[k])))
    r = check_pass(gen_pushout, e, IN, {}, symbolic_inputs=symbolize(IN), symbolic_cost=True)
    assert r.applied and r.rule_checked >= 1


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs(prog):
    e = let_lift(explicit_sharing(prog.expr))
    if not (all(is_soa(v.type) for v in input_vars(e)) and is_soa(type_of(e))):
        return  # refused by pair elimination (tested there)
    check_pass(gen_pushout, pair_elim(e), prog.inputs, prog.sizes, max_rule_checks=6)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(max_size=2, functions=False))
def test_random_programs_exact(prog):
    e = let_lift(explicit_sharing(prog.expr))
    if all(is_soa(v.type) for v in input_vars(e)) and is_soa(type_of(e)):
        check_pass(gen_pushout, pair_elim(e), prog.inputs, prog.sizes, symbolic_inputs=prog.symbolic_inputs(),
                   max_rule_checks=4)
