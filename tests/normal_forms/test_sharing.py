"""Explicit sharing (tensorlang/sharing.py): what the user computed once
becomes one ``let``; the denotation never changes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.ir import Gen, Iverson, Let, Mul, Sum, Var, lets, walk
from tensorlang.sharing import explicit_sharing, has_work, invariant_tensors, shared_terms

from tests.counting import counting_cost, total
from tests.strategies import Program, assert_close, programs

n, m = tl.sizes("n m")


def test_a_tensor_indexed_twice_is_bound_once():
    x = tl.tensor("x", n)
    y = tl.gen(n, lambda i: x[i] * x[i])
    e = tl.sum(n, lambda i: tl.iverson(i + 1 < n, y[i] * y[i + 1]))
    s = explicit_sharing(e)
    binds, body = lets(s)
    # y is only read under [i + 1 < n] (never at n = 1), so it is bound under that guard
    assert len(binds) == 1 and isinstance(binds[0][1], Iverson) and binds[0][1].body is y
    assert y not in set(walk(body))
    xv = np.array([1.0, -2.0, 3.0, 0.5])
    sq = xv * xv
    assert tl.evaluate(s, x=xv) == pytest.approx(float(np.sum(sq[:-1] * sq[1:])))
    # hand count (Fig. 6): y once (k mults), k - 1 products, k - 2 adds; nothing at k = 1
    for k in (1, 2, 3, 6):
        assert tl.cost(e, n=k) == total(counting_cost(e, n=k)) == (0 if k == 1 else 3 * k - 3)


def test_a_closed_tensor_indexed_in_a_loop_is_hoisted():
    """The deconvolution loss: conv is indexed once, but inside sum[i]."""
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (conv[i] - z[i]) ** 2)
    assert invariant_tensors(loss) == [conv]
    s = explicit_sharing(loss)
    assert isinstance(s, Let) and s.value is conv
    assert not invariant_tensors(s) and not shared_terms(s)


def test_a_tensor_depending_on_the_loop_index_stays_inside():
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: tl.gen(n, lambda j: x[i] * x[j])[i])
    assert invariant_tensors(e) == []
    assert explicit_sharing(e) is e


def test_a_loop_invariant_tensor_moves_to_its_home_not_further():
    x = tl.tensor("x", n)
    # the inner gen depends on i but not on j: its home is just inside sum[i]
    e = tl.sum(n, lambda i: tl.sum(n, lambda j: tl.gen(n, lambda k: x[i] * x[k])[j]))
    s = explicit_sharing(e)
    assert isinstance(s, Sum) and isinstance(s.body, Let) and isinstance(s.body.value, Gen)
    xv = np.array([1.0, 2.0, -1.0])
    assert tl.evaluate(s, x=xv) == pytest.approx(float(np.sum(np.outer(xv, xv))))


def test_sharing_keeps_the_guard_that_protected_an_access():
    """[0 ≤ i-1]·(x[i-1]·c) used twice: hoisting it out of its bracket would
    read x[-1]; the let keeps the bracket."""
    x, c = tl.tensor("x", n), tl.scalar("c")
    g = tl.gen(n, lambda i: tl.iverson(i - 1 >= 0, x[i - 1] * c))
    e = tl.sum(n, lambda i: g[i] * g[i])
    s = explicit_sharing(e)
    xv, cv = np.array([1.0, 2.0, 3.0]), 0.5
    want = float(np.sum((xv[:-1] * cv) ** 2))
    assert tl.evaluate(s, x=xv, c=cv) == pytest.approx(want)
    # an inner term shared under the guard, homed outside it
    t = x[n - 1] * c
    e2 = tl.gen(n, lambda i: tl.iverson(i < 0, t + t * 2))  # never true: t is never needed
    s2 = explicit_sharing(e2)
    assert isinstance(s2, Let) and isinstance(s2.value, Iverson)
    np.testing.assert_array_equal(tl.evaluate(s2, x=np.zeros(2), c=1.0), np.zeros(2))


def test_terms_without_work_are_not_bound():
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: tl.gen(n, lambda j: x[j])[i] + tl.gen(n, lambda j: x[j])[i])
    assert not has_work(tl.gen(n, lambda j: x[j]))
    assert explicit_sharing(e) is e


def test_explicit_sharing_is_idempotent():
    x = tl.tensor("x", n)
    y = tl.gen(n, lambda i: tl.exp(x[i]))
    e = tl.sum(n, lambda i: y[i] * y[n - 1 - i])
    s = explicit_sharing(e)
    assert explicit_sharing(s) is s


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_explicit_sharing_preserves_meaning_on_random_programs(prog: Program):
    s = explicit_sharing(prog.expr)
    tl.typecheck.check_program(s)
    assert_close(tl.evaluate(s, **prog.inputs), prog.evaluate(), prog.bound)
    assert not shared_terms(s)
    assert not invariant_tensors(s)
    assert explicit_sharing(s) is s


def test_each_repeated_term_has_one_let():
    x = tl.tensor("x", n)
    a = x[0] * x[1]
    e = (a + a) * (a + a)
    s = explicit_sharing(e)
    binds, body = lets(s)
    assert [v for v, _ in binds] and len(binds) == 2  # a, and a + a
    assert isinstance(body, Mul) and body.lhs is body.rhs and isinstance(body.lhs, Var)


_ = Var


def test_the_cost_model_charges_the_deconvolution_intermediate_once():
    """Hand count (Fig. 6): conv n·(m mults + m-1 adds); per i one subtraction
    (an add and a ·(-1)) and one square; the outer sum n-1 adds."""
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (conv[i] - z[i]) ** 2)
    N, M = 1000, 16
    assert tl.cost(loss, n=N, m=M) == N * (2 * M - 1) + 3 * N + (N - 1)


def test_a_hoisted_term_keeps_the_bracket_of_its_uses():
    """gen[i] [0 ≤ i-1]·x[i-1]·c reads in range anywhere, but hoisted out of [0 < i] it still
    keeps that bracket (exists i. 0 < i): a term safe to evaluate is not free to evaluate, and
    the cost model must not charge work the program skips (Fig. 6 4.33).  A tensor that reads
    out of range for small n keeps the bracket of its uses too."""
    x, c = tl.tensor("x", n), tl.scalar("c")
    safe = tl.gen(n, lambda i: tl.iverson(i > 0, x[i - 1] * c))
    e0 = tl.sum(n, lambda i: tl.iverson(i > 0, safe[i] * safe[i]))
    s = explicit_sharing(e0)
    assert isinstance(s, Let) and isinstance(s.value, Iverson) and s.value.body is safe
    xv = np.array([1.0, 2.0, 3.0, 4.0])
    assert tl.evaluate(s, x=xv, c=2.0) == pytest.approx(float(np.sum((2 * xv[:-1]) ** 2)))
    # reads x[1], x[2]: in range only when n > 2, which the bracket around its uses says
    unsafe = tl.gen(2, lambda k: x[k + 1] * c)
    e = tl.sum(n, lambda i: tl.iverson(2 < n, unsafe[0] * unsafe[1] * x[i]))
    s2 = explicit_sharing(e)
    assert isinstance(s2, Let) and isinstance(s2.value, Iverson) and s2.value.body is unsafe
    xv = np.array([1.0, 2.0, 3.0, 4.0])
    assert tl.evaluate(s2, x=xv, c=2.0) == pytest.approx(tl.evaluate(e, x=xv, c=2.0))
    assert tl.evaluate(e, x=xv[:2], c=2.0) == 0.0
    assert tl.evaluate(s2, x=xv[:2], c=2.0) == 0.0  # the hoisted tensor is not built


def _let_chain_in_a_loop(N: int):
    """sum[i:n] let t0 = gen x·0.5 in let t1 = gen t0·2 in ... (every third value reads only x,
    so it is loop-invariant; the others read the let just before them, bound inside the loop)."""
    from tensorlang.ir import fresh_var
    from tensorlang.typecheck import type_of

    x = tl.tensor("x", n)
    invariant = []

    def body(i):
        vs = [fresh_var("t", type_of(x)) for _ in range(N)]
        out = tl.gen(n, lambda j: vs[-1][j] * x[i])[i]
        for k in range(N - 1, -1, -1):
            prev = vs[k - 1] if k else x
            val = tl.gen(n, lambda j: prev[j] * 2.0) if k % 3 else tl.gen(n, lambda j: x[j] * (k + 0.5))
            if k % 3 == 0:
                invariant.insert(0, val)
            out = Let(vs[k], val, out)
        return out

    return tl.sum(n, body), invariant


def _bytecodes(fn, *args) -> int:
    """Bytecodes executed in tensorlang/sharing.py by ``fn(*args)``: work, not time."""
    import sys

    import tensorlang.sharing as mod

    count = [0]

    def local(frame, event, arg):
        if event == "opcode":
            count[0] += 1
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != mod.__file__:
            return None
        frame.f_trace_opcodes = True
        return local

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return count[0]


def test_invariant_tensors_on_a_long_let_chain_is_near_linear():
    """A let chain inside a loop: the invariant values are found, in order, and the work grows
    about linearly (8x the lets -> under 10x the bytecodes; the binder-path version did 22x)."""
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        work = {}
        for N in (100, 800):
            e, want = _let_chain_in_a_loop(N)
            assert invariant_tensors(e) == want and len(want) == (N + 2) // 3
            has_work(e)  # per-node memos out of the count
            work[N] = _bytecodes(invariant_tensors, e)
    finally:
        sys.setrecursionlimit(limit)
    assert work[800] < 10 * work[100], work


def _shared_terms_by_definition(e) -> set:
    """Sub-terms with more than one parent edge that do work, counted over the
    distinct nodes of the DAG (a let's bound variable is no use of it)."""
    from tensorlang.ir import Expr, children

    uses: dict = {}
    seen: set = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        for c in children(x):
            for y in (c if isinstance(c, tuple) else (c,)):
                if isinstance(y, Expr) and not (isinstance(x, Let) and y is x.var):
                    uses[y] = uses.get(y, 0) + 1
                    stack.append(y)
    return {y for y, k in uses.items() if k > 1 and has_work(y)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_shared_terms_is_its_definition_on_random_programs(prog: Program):
    """shared_terms skips variables, constants and reads of a variable (no
    work, nothing below) and expands a node when first counted; the set it
    finds is the definition's."""
    for e in (prog.expr, explicit_sharing(prog.expr)):
        got = shared_terms(e)
        assert len(got) == len(set(got))
        assert set(got) == _shared_terms_by_definition(e)


def test_shared_terms_of_a_derivative_is_its_definition():
    x = tl.tensor("x", n)
    y = tl.gen(n, lambda i: x[i] * x[i])
    loss = tl.sum(n, lambda i: tl.iverson(i + 1 < n, y[i] * y[i + 1])) + tl.sum(n, lambda i: y[i])
    g = tl.grad(loss, wrt=x).program
    for e in (loss, g):
        assert set(shared_terms(e)) == _shared_terms_by_definition(e)
