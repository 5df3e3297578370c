"""The one traversal of kernel-IR nodes (kir.children, map_children, map_up,
map_down, substitute; loopir.map_stmts), checked against integer evaluation
(``kir.evaluate_int``) on random expressions and against hand-built results."""

from __future__ import annotations

import random

import pytest

from tensorlang.backend import kir as K
from tensorlang.backend.loopir import Assign, If, Loop, Store, map_stmts

I, N = K.Int, K.Name


def _random_int_expr(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.2:
        return I(rng.randint(-4, 4)) if rng.random() < 0.4 else N(rng.choice("abc"))
    k = rng.random()
    if k < 0.5:
        return K.IBin(rng.choice("+-*"), _random_int_expr(rng, depth - 1), _random_int_expr(rng, depth - 1))
    if k < 0.8:
        return K.MinMax(rng.choice(["min", "max"]), tuple(_random_int_expr(rng, depth - 1) for _ in range(rng.randint(1, 3))))
    return K.Select(K.Cmp("<", _random_int_expr(rng, depth - 1), _random_int_expr(rng, depth - 1)),
                    _random_int_expr(rng, depth - 1), _random_int_expr(rng, depth - 1))


@pytest.mark.parametrize("seed", range(40))
def test_substitute_is_evaluation_under_the_substituted_values(seed):
    rng = random.Random(seed)
    e = _random_int_expr(rng, 5)
    ra, rb = _random_int_expr(rng, 2), _random_int_expr(rng, 2)  # may read a and b themselves
    env = {v: rng.randint(-9, 9) for v in "abc"}
    got = K.evaluate_int(K.substitute(e, {"a": ra, "b": rb}), env)
    # simultaneous: a's replacement is not itself rewritten by b's
    inner = dict(env, a=K.evaluate_int(ra, env), b=K.evaluate_int(rb, env))
    assert got == K.evaluate_int(e, inner)


def test_children_in_field_order_and_tuples_flattened():
    e = K.MinMax("max", (N("a"), I(0), K.IBin("+", N("b"), I(1))))
    assert K.children(e) == (N("a"), I(0), K.IBin("+", N("b"), I(1)))
    ld = K.Load("x", (N("i"), N("j")))
    assert K.children(K.FMul(ld, K.Float(2.0))) == (ld, K.Float(2.0))
    assert K.children(N("a")) == ()


def test_unchanged_nodes_are_returned_as_they_are():
    e = K.FSum((K.Load("x", (K.IBin("+", N("i"), I(1)),)), K.Float(1.0)))
    assert K.map_up(e, lambda x: None) is e
    assert K.substitute(e, {"j": I(0)}) is e
    got = K.substitute(e, {"i": I(2)})
    assert got == K.FSum((K.Load("x", (K.IBin("+", I(2), I(1)),)), K.Float(1.0)))
    assert got.terms[1] is e.terms[1]  # the untouched term is shared


def test_map_up_sees_rebuilt_children_map_down_does_not_enter_a_replacement():
    e = K.IBin("+", K.IBin("+", N("a"), N("a")), N("a"))
    double = lambda x: K.IBin("*", I(2), x) if isinstance(x, K.IBin) and x.op == "+" else None  # noqa: E731
    # children first: the inner sum is doubled, then the outer one (its child already rebuilt)
    up = K.map_up(e, double)
    assert up == K.IBin("*", I(2), K.IBin("+", K.IBin("*", I(2), K.IBin("+", N("a"), N("a"))), N("a")))
    # from the root: the outer sum is replaced and its insides are not visited
    assert K.map_down(e, double) == K.IBin("*", I(2), e)


def test_map_stmts_reaches_every_expression_and_only_expressions():
    body = (Loop("i", N("lo"), N("n"), 1, (
        If(K.Cmp("<", N("i"), N("n")), (Store("y", (N("i"),), K.Load("x", (N("i"),))),),
           (Assign("v", N("n")),)),), "gen"),)
    out = map_stmts(body, lambda x: N("m") if x == N("n") else None)
    loop = out[0]
    assert (loop.var, loop.lo, loop.hi) == ("i", N("lo"), N("m"))
    (test,) = loop.body
    assert test.cond == K.Cmp("<", N("i"), N("m")) and test.orelse == (Assign("v", N("m")),)
    assert test.then == body[0].body[0].then  # nothing to change there
    seen = []
    map_stmts(body, lambda x: None, lambda s: seen.append(type(s).__name__) or s)
    assert seen == ["Store", "Assign"]


def test_kir_is_the_only_backend_module_walking_node_fields():
    # one traversal (kir.children / map_children): no pass spells out its own walk over fields
    import ast
    import pathlib

    import tensorlang.backend as backend

    walkers = []
    for path in sorted(pathlib.Path(backend.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "dataclasses" and \
                    any(a.name == "fields" for a in node.names):
                walkers.append(path.name)
    assert walkers == ["kir.py"]
