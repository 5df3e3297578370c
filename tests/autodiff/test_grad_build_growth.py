"""Building a derivative is near-linear in program size (issue #14 item 6).

Measured as work, not time: the number of Python function calls (cProfile's
deterministic count) made while building the gradient program of a chain
of N additions (derivative program + normalize + simplify; no kernel).
Quadruple N and a linear builder does about 4x the calls; the quadratic one
this replaces did over 12x (a substitution of the whole rest of the let
block per binding, re-wrapped let blocks in tensor SSA, one 6.25 swap per
pending dlet, filters growing by a copy per contribution).
"""

from __future__ import annotations

import cProfile
import pstats

import tensorlang as tl
from tensorlang.autodiff import _grad_derive
from tensorlang.ir import REAL, Var

n = tl.size("n")
x = tl.tensor("x", n)


def chain(N: int):
    e = x[0] * x[0]
    for k in range(1, N):
        e = e + x[0] * (k + 1.5)
    return e


def calls_to_build(N: int) -> int:
    loss = chain(N)
    prof = cProfile.Profile()
    prof.enable()
    prog = _grad_derive(loss, [x], "sparse", Var("dy", 0, REAL), False)  # the passes (no disk cache)
    prof.disable()
    assert tl.evaluate(prog, x=[2.0]) == 2 * 2.0 + sum(k + 1.5 for k in range(1, N))
    return pstats.Stats(prof).total_calls


def test_gradient_building_grows_near_linearly():
    calls_to_build(4)  # imports and first-use registrations out of the way
    small, large = calls_to_build(25), calls_to_build(100)
    assert large < 6 * small, (small, large)


def product_chain(N: int):
    """x[0] + Σ_k x[k mod 3]·x[(k+1) mod 3]: three products, each repeated,
    shared by explicit sharing; simplify re-shares a let chain of N bindings."""
    e = x[0]
    for k in range(1, N):
        e = e + x[k % 3] * x[(k + 1) % 3]
    return e


def calls_to_build_products(N: int) -> int:
    loss = product_chain(N)
    prof = cProfile.Profile()
    prof.enable()
    prog = _grad_derive(loss, [x], "sparse", Var("dy", 0, REAL), False)
    prof.disable()
    X = [1.0, 2.0, 3.0]
    want = [1.0, 0.0, 0.0]
    for k in range(1, N):
        a, b = k % 3, (k + 1) % 3
        want[a] += X[b]
        want[b] += X[a]
    got = tl.evaluate(prog, x=X, n=3)
    assert [float(g) for g in got] == want
    return pstats.Stats(prof).total_calls


def test_gradient_of_a_product_chain_grows_near_linearly():
    """Explicit sharing searched the whole rest of a let chain for shared
    terms at every binding that no shared term mentions (O(N²): 1000 terms
    took 28.6 s to build, 500 took 8.0 s; now 1.6 s and 0.74 s)."""
    calls_to_build_products(4)
    small, large = calls_to_build_products(40), calls_to_build_products(160)
    assert large < 6 * small, (small, large)


def predicate_walks(N: int, monkeypatch) -> int:
    """Walks of a predicate's DAG (``simplify_preds._pred_nodes``) while the
    chain's gradient is built: asking whether a comparison mentions a
    relation or a disjunction needs none."""
    from tensorlang.passes import simplify_preds

    calls = [0]
    walk = simplify_preds._pred_nodes

    def counted(p):
        calls[0] += 1
        return walk(p)

    monkeypatch.setattr(simplify_preds, "_pred_nodes", counted)
    calls_to_build(N)
    return calls[0]


def test_no_predicate_walk_per_term(monkeypatch):
    """Every term's brackets are comparisons (``[i = 0]``); the simplifier
    asked per bracket whether it was affine (Ctx.assume) and the adjoint per
    filter whether it was disjunctive (compact), each a walk of the
    predicate: 11 walks per term, about 5% of the build.  A comparison, a
    literal or a relation application answers from its class."""
    calls_to_build(4)
    small, large = predicate_walks(25, monkeypatch), predicate_walks(100, monkeypatch)
    assert large == small, (small, large)
