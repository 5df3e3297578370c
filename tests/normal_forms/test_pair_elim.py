"""Pair elimination (paper Section 5.2, Figure 8; RULES.md Section 4.2): every
rule with its π1 twin, the corrected 5.12, the Section 5.2 example, struct-of-
arrays inputs and tuple outputs, the array-of-structs error, and the three
oracles on hand-written and random programs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.errors import TensorLangError, UnsupportedError
from tensorlang.ir import (
    REAL,
    Access,
    Gen,
    Iverson,
    Pair,
    PairT,
    Proj,
    TensorT,
    alpha_eq,
    input_vars,
    lets,
    as_aff,
)
from tensorlang.passes.let_lift import let_lift
from tensorlang.passes.pair_elim import (
    access_pair,
    gen_pair,
    is_soa,
    iverson_pair,
    pair_elim,
    proj_access,
    proj_gen,
    proj_iverson,
    proj_pair,
    split_let,
)
from tensorlang.sharing import explicit_sharing
from tensorlang.typecheck import type_of
from tests.oracles import check_pass, check_rule, symbolize
from tests.strategies import programs

n = tl.size("n")
s, t = tl.scalar("s"), tl.scalar("t")
x = tl.tensor("x", n)
RNG = np.random.default_rng(11)
XV = RNG.normal(size=5)
IN = {"s": 0.5, "t": -2.0, "x": XV}
# a struct-of-arrays pair input ([n]R × [n]R)
P = tl.var("P", tl.pair_type(tl.tensor_of([n]), tl.tensor_of([n])))
PV = (RNG.normal(size=5), RNG.normal(size=5))


# --------------------------------------------------------------------------
# The rules one by one


def test_5_11_both_projections():
    e0 = Proj(0, tl.pair(s * t, t))
    e1 = Proj(1, tl.pair(s * t, t))
    assert proj_pair(e0) is s * t and proj_pair(e1) is t
    check_rule("5.11", e0, proj_pair(e0), IN, {"n": 5})
    check_rule("5.11", e1, proj_pair(e1), IN, {"n": 5})


def test_5_12_corrected():
    g = tl.gen(n, lambda i: tl.pair(x[i] * 2, x[i] + 1))  # [n](R × R)
    for k in (0, 1):
        lhs = Proj(k, g)  # typed only up to the isomorphism
        out = proj_gen(lhs)
        assert out is Gen(g.var, n, Proj(k, g.body))  # gen[i:n] π_k e (not π_k e0)
        check_rule("5.12", lhs, out, IN, {"n": 5})


def test_5_13():
    g = tl.gen(n, lambda i: tl.pair(x[i] * 2, x[i] + 1))
    out = gen_pair(g)
    assert out is Pair(Gen(g.var, n, g.body.fst), Gen(g.var, n, g.body.snd))
    check_rule("5.13", g, out, IN, {"n": 5})


def test_5_14_both_projections():
    arr = tl.gen(n, lambda i: tl.pair(x[i], x[i] * x[i]))
    for k in (0, 1):
        lhs = Proj(k, arr[1])
        out = proj_access(lhs)
        assert out is Access(Proj(k, arr), as_aff(1))
        check_rule("5.14", lhs, out, IN, {"n": 5})


def test_5_15():
    lhs = Access(Pair(x, tl.gen(n, lambda i: x[i] * 3)), as_aff(2))
    out = access_pair(lhs)
    assert out is Pair(x[2], Access(lhs.arr.snd, as_aff(2)))
    check_rule("5.15", lhs, out, IN, {"n": 5})


def test_5_16_both_projections():
    for k in (0, 1):
        lhs = Proj(k, tl.iverson(n > 2, tl.pair(s, t * t)))
        out = proj_iverson(lhs)
        assert out is Iverson(lhs.arg.pred, Proj(k, lhs.arg.body))
        check_rule("5.16", lhs, out, IN, {"n": 5})


def test_5_17():
    lhs = tl.iverson(n > 7, tl.pair(s, t * t))
    out = iverson_pair(lhs)
    assert out is Pair(Iverson(lhs.pred, s), Iverson(lhs.pred, t * t))
    check_rule("5.17", lhs, out, IN, {"n": 5})


def test_5_18_to_5_20_split_a_tensor_of_pairs():
    """The paper's example: let x : [n](R×R) = gen[i:n](x[i], x[i]) in …
    ==> let x0 : [n]R = π0 gen[i:n](x[i], x[i]) in let x1 : [n]R = π1 … in [x ↦ (x0, x1)] …"""
    lhs = tl.let(tl.gen(n, lambda i: tl.pair(x[i], x[i])), lambda y: tl.sum(n, lambda i: tl.proj(y[i], 0) * tl.proj(y[i], 1)))
    out = split_let(lhs)
    (x0, v0), (x1, v1) = lets(out)[0]
    assert x0.type is TensorT(n, REAL) and x1.type is TensorT(n, REAL)
    assert v0 is Proj(0, lhs.value) and v1 is Proj(1, lhs.value)
    check_rule("5.18", lhs, out, IN, {"n": 5})
    # then the whole pass: the statements are gen[i:n] x[i] each
    r = check_pass(pair_elim, lhs, IN, {})
    (y0, w0), (y1, w1) = lets(r.output)[0]
    assert alpha_eq(w0, tl.gen(n, lambda i: x[i])) and alpha_eq(w1, tl.gen(n, lambda i: x[i]))
    assert r.applied["5.18"] == 1 and r.applied["5.13"] == 1 and r.applied["5.11"] == 4 and r.applied["5.15"] == 1


def test_5_18_plain_pair_let():
    lhs = tl.let(tl.pair(s * t, s + t), lambda q: tl.proj(q, 1) * tl.proj(q, 0))
    out = split_let(lhs)
    assert out is not None and out.var.type is REAL
    check_rule("5.18", lhs, out, IN, {"n": 5})
    assert split_let(tl.let(s * t, lambda q: q + 1)) is None


def test_rules_do_not_match_elsewhere():
    for r in (proj_pair, proj_gen, gen_pair, proj_access, access_pair, proj_iverson, iverson_pair, split_let):
        assert r(s * t + s) is None


# --------------------------------------------------------------------------
# Inputs and outputs of pair type


def test_struct_of_arrays_input_and_tuple_output():
    e = tl.pair(tl.gen(n, lambda i: tl.proj(P, 0)[i] * tl.proj(P, 1)[i]), tl.sum(n, lambda i: tl.proj(P, 1)[i]))
    r = check_pass(pair_elim, e, {"P": PV}, {}, symbolic_inputs=symbolize({"P": PV}))
    assert isinstance(r.output, Pair)


def test_pair_input_returned_whole_is_expanded():
    r = check_pass(pair_elim, P, {"P": PV}, {})
    assert r.output is Pair(Proj(0, P), Proj(1, P))


def test_pair_typed_intermediate_tensor_of_pairs_of_an_input():
    q = tl.var("q", tl.pair_type(REAL, REAL))
    e = tl.let(tl.gen(n, lambda i: q), lambda g: tl.sum(n, lambda i: tl.proj(g[i], 0) * x[i] + tl.proj(g[i], 1)))
    r = check_pass(pair_elim, let_lift(e), {"q": (1.5, -0.5), "x": XV}, {})
    assert r.applied.get("5.18") == 1


def test_array_of_structs_input_is_refused_with_advice():
    a = tl.var("a", TensorT(n, PairT(REAL, REAL)))
    e = tl.sum(n, lambda i: tl.proj(a[i], 0))
    with pytest.raises(TensorLangError, match="struct of arrays"):
        pair_elim(e)
    with pytest.raises(TensorLangError, match="struct of arrays"):
        tl.normalize(e)


def test_array_of_structs_output_is_refused():
    e = tl.gen(n, lambda i: tl.pair(x[i], x[i] * 2))
    with pytest.raises(UnsupportedError, match="pair of tensors"):
        pair_elim(e)


def test_needs_let_lifted_input():
    e = tl.sum(n, lambda i: tl.let(x[i], lambda q: q * q))
    with pytest.raises(UnsupportedError, match="let_lift"):
        pair_elim(e)


# --------------------------------------------------------------------------
# Hand-written programs


def _hand():
    return [
        (tl.let(tl.pair(s, t * t), lambda q: tl.pair(tl.proj(q, 1), tl.proj(q, 0) * tl.proj(q, 1))), IN),
        (tl.let(tl.gen(n, lambda i: tl.pair(x[i] * s, tl.iverson(i > 0, x[i - 1]))),
                lambda g: tl.gen(n, lambda i: tl.proj(g[i], 0) + tl.proj(g[i], 1))), IN),
        (tl.let(tl.gen(n, lambda i: tl.gen(n, lambda j: tl.pair(x[i] * x[j], tl.pair(s, x[j])))),
                lambda g: tl.sum(n, lambda i: tl.proj(tl.proj(g[i][i], 1), 1) * tl.proj(g[i][0], 0))), IN),
        (tl.proj(tl.iverson(n > 3, tl.gen(n, lambda i: tl.pair(x[i], t)))[2], 1) + s, IN),
    ]


@pytest.mark.parametrize("k", range(4))
def test_hand_written_programs(k):
    e, inputs = _hand()[k]
    e = let_lift(explicit_sharing(e))
    r = check_pass(pair_elim, e, inputs, {}, symbolic_inputs=symbolize(inputs), symbolic_cost=True)
    assert r.applied, "some rule of Figure 8 applies"
    assert r.rule_checked >= 1


# --------------------------------------------------------------------------
# Random programs


def _soa_io(e) -> bool:
    return all(is_soa(v.type) for v in input_vars(e)) and is_soa(type_of(e))


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs(prog):
    e = let_lift(explicit_sharing(prog.expr))
    if not _soa_io(e):
        with pytest.raises(TensorLangError):
            pair_elim(e)
        return
    check_pass(pair_elim, e, prog.inputs, prog.sizes, max_rule_checks=6)


# Derandomized: a random search once found a cost corner (a bracket over a
# pair, [R(2)]·(a, b) -> ([R(2)]·a, [R(2)]·b), at a size where R(2) lies
# outside R's extent) that took minutes to shrink; see the closing note of
# session 2.  CI runs a fixed sample.
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
@given(programs(max_size=2, functions=False))
def test_random_programs_exact(prog):
    e = let_lift(explicit_sharing(prog.expr))
    if _soa_io(e):
        check_pass(pair_elim, e, prog.inputs, prog.sizes, symbolic_inputs=prog.symbolic_inputs(), max_rule_checks=4)


def test_bracket_over_a_pair_outside_the_relations_extent_does_not_raise_the_cost():
    # a random search (session 2) reported [R0(2)]·(a, b) -> ([R0(2)]·a, [R0(2)]·b) raising the
    # cost 0 -> 1 at n = 1, where R0(2) lies outside R0's extent.  Pinned here with the counting
    # oracle at sizes inside and outside the extent and for empty, full and one-point data.
    from tests.counting import counting_cost, total

    n = tl.size("n")
    R0 = tl.relation("R0", n)
    x, y = tl.scalar("x"), tl.scalar("y")
    u = tl.tensor("u", n)
    bodies = [(x + 1, y * x), (tl.sum(n, lambda i: u[i]), x + y), (tl.gen(n, lambda i: u[i] * x), tl.exp(y))]
    for a, b in bodies:
        e = let_lift(explicit_sharing(tl.iverson(R0(2), tl.pair(a, b))))
        for size in (1, 2, 3, 4):
            for data in (np.zeros(size, bool), np.ones(size, bool), np.arange(size) == 2):
                ins = {"x": 0.5, "y": -1.5, "u": np.linspace(-1, 1, size), "R0": data}
                r = check_pass(pair_elim, e, ins, {"n": size})
                used = {v.name for v in tl.ir.input_vars(r.output)} | {"R0"}
                kw = {k: v for k, v in ins.items() if k in used}
                assert r.cost_out == total(counting_cost(r.output, kw, n=size, R0=data)) <= r.cost_in
