"""The one stage list (issue #14 item 1): every entry point runs exactly its
declared route, in order, and debug mode asserts each stage's grammar.

The trace comes from ``passes.profile.tracing`` (every stage reports its name
through ``pipeline.run_stage``); the routes are ``tensorlang.driver.ROUTES``.
Each entry point's result is also checked against NumPy, so a route that ran
the right names but computed the wrong thing fails too.
"""

import dataclasses

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import driver
from tensorlang.audit import audit
from tensorlang.costmodel import cost as model_cost
from tensorlang.errors import UnsupportedError
from tensorlang.passes import pipeline
from tensorlang.passes.profile import tracing
from tensorlang.passes.ssa_form import is_tensor_ssa

N, M = 70, 3  # n >= 64: the runtime compiles (prepare runs) on the first call
STAGE_NAMES = {s.name for s in driver.STAGES}


def _deconv():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    return tl.sum(n, lambda i: (y[i] - z[i]) ** 2), x, c, z


@pytest.fixture
def fresh(monkeypatch):
    """Every build runs the passes (no derived-program cache) and every call compiles."""
    monkeypatch.setenv("TENSORLANG_DERIVED_CACHE", "0")
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


def _inputs(N=N):
    rng = np.random.default_rng(0)
    return {"x": rng.normal(size=N + M - 1), "c": rng.normal(size=M), "z": rng.normal(size=N)}


def _numpy(ins):
    """(loss, dloss/dx, dloss/dc) by hand."""
    x, c, z = ins["x"], ins["c"], ins["z"]
    N = len(z)
    y = np.array([sum(x[i - j + M - 1] * c[j] for j in range(M)) for i in range(N)])
    r = 2 * (y - z)
    gx = np.zeros_like(x)
    gc = np.zeros_like(c)
    for i in range(N):
        for j in range(M):
            gx[i - j + M - 1] += r[i] * c[j]
            gc[j] += r[i] * x[i - j + M - 1]
    return float(((y - z) ** 2).sum()), gx, gc


def _stages(names) -> tuple:
    return tuple(n for n in names if n in STAGE_NAMES)


def _check(route: str, names) -> None:
    assert _stages(names) == driver.ROUTES[route].names, f"{route}: ran {_stages(names)}"


def test_routes_are_in_pipeline_order_and_every_stage_declares_its_grammar():
    order = [s.name for s in driver.STAGES]
    assert order == ["hoist_guards", "sharing", "let_lift", "pair_elim", "gen_pushout", "tensor_ssa",
                     "derivative", "adjoint", "naive_adjoint", "simplify", "prepare"]
    for st in driver.STAGES:
        assert callable(st.run) and callable(st.pre) and callable(st.post), st.name
    for name, r in driver.ROUTES.items():
        pos = [order.index(n) for n in r.names]
        if name != "audit":  # the audit's derivative rows branch from the SSA row
            assert pos == sorted(pos), name
    for entry in ("grad", "value_and_grad", "vjp", "jvp"):
        assert driver.ROUTES[entry].names[-1] == "prepare"
        assert "tensor_ssa" in driver.ROUTES[entry].names


@pytest.mark.parametrize("adjoint", ["sparse", "naive"])
def test_grad_and_value_and_grad_run_their_routes(fresh, adjoint):
    loss, x, c, _ = _deconv()
    ins = _inputs()
    val, gx, gc = _numpy(ins)
    suffix = " naive" if adjoint == "naive" else ""
    with tracing() as names:
        g = tl.grad(loss, wrt=[x, c], adjoint=adjoint)
        got = g(**ins)
    _check("grad" + suffix, names)
    np.testing.assert_allclose(got[0], gx, rtol=1e-10)
    np.testing.assert_allclose(got[1], gc, rtol=1e-10)
    with tracing() as names:
        v, got = tl.value_and_grad(loss, wrt=c, adjoint=adjoint)(**ins)
    _check("value_and_grad" + suffix, names)
    assert v == pytest.approx(val, rel=1e-12)
    np.testing.assert_allclose(got, gc, rtol=1e-10)


def test_vjp_and_jvp_run_their_routes(fresh):
    loss, x, c, _ = _deconv()
    ins = _inputs()
    val, gx, gc = _numpy(ins)
    with tracing() as names:
        got = tl.vjp(loss, wrt=c)(**ins, dy=2.0)
    _check("vjp", names)
    np.testing.assert_allclose(got, 2 * gc, rtol=1e-10)
    dx = np.random.default_rng(1).normal(size=N + M - 1)
    with tracing() as names:
        v, t = tl.jvp(loss, wrt=x)(**ins, dx=dx)
    _check("jvp", names)
    assert v == pytest.approx(val, rel=1e-12)
    assert t == pytest.approx(float(gx @ dx), rel=1e-9)


def test_compile_cost_normalize_and_the_expression_builders_run_their_routes(fresh):
    loss, x, c, _ = _deconv()
    ins = _inputs()
    val, _, gc = _numpy(ins)
    with tracing() as names:
        f = tl.compile(loss)
        got = f(**ins)
    _check("compile", names)
    assert got == pytest.approx(val, rel=1e-12)
    with tracing() as names:
        k = tl.cost(loss, n=N, m=M)
    _check("cost", names)
    assert k == model_cost(loss, n=N, m=M)
    with tracing() as names:
        ssa = tl.normalize(loss)
    _check("normalize", names)
    assert is_tensor_ssa(ssa)
    for route, build in (("derivative", lambda: tl.derivative(loss, wrt=c)),
                         ("adjoint", lambda: tl.adjoint(loss, wrt=c)),
                         ("adjoint naive", lambda: tl.adjoint(loss, wrt=c, mode="naive"))):
        with tracing() as names:
            prog = build()
        _check(route, names)
        if route != "derivative":  # the reference evaluator, at small sizes (the dense adjoint is O(n^2))
            small = _inputs(6)
            np.testing.assert_allclose(tl.evaluate(prog, **small, dy=1.0), _numpy(small)[2], rtol=1e-10)


def test_audit_runs_its_route(fresh):
    loss, x, c, _ = _deconv()
    with tracing() as names:
        rep = audit(loss, wrt=["c"], sizes={"n": 10, "m": 3})
    _check("audit", names)
    assert not rep.failed
    assert rep.row("tensor SSA").cost == model_cost(loss, n=10, m=3)  # the passes are cost-neutral here


def test_a_tensor_ssa_input_skips_the_normal_form_block():
    loss, _, c, _ = _deconv()
    ssa = tl.normalize(loss)
    with tracing() as names:
        again = tl.normalize(ssa)
    assert _stages(names) == ("tensor_ssa",) and again is ssa
    with tracing() as names:
        driver.route("adjoint").run(ssa, adjoint={"wrt": [c], "seed": tl.var("dy", tl.Real)})
    assert _stages(names) == ("hoist_guards", "tensor_ssa", "adjoint", "simplify")


def _broken_route(name: str, **replace) -> driver.Route:
    r = driver.route(name)
    return driver.Route("broken", tuple(dataclasses.replace(s, **replace[s.name]) if s.name in replace else s
                                        for s in r.stages))


def test_debug_mode_catches_a_stage_breaking_its_output_grammar():
    loss, _, c, _ = _deconv()
    # tensor SSA that does nothing: its output is not in Fig. 10's grammar
    broken = _broken_route("normalize", tensor_ssa={"run": lambda e: e})
    prev = pipeline.debug(True)
    try:
        with pytest.raises(pipeline.NormalFormViolation, match="tensor_ssa: postcondition violated"):
            broken.run(loss)
        # a let-lifting that forgets to lift: caught at once, by its own postcondition
        sneaky = tl.sum(tl.size("n"), lambda i: tl.let(tl.gen(tl.size("n"), lambda j: c[0] * 2.0), lambda t: t[i]))
        bad = _broken_route("normalize", let_lift={"run": lambda e: sneaky})
        with pytest.raises(pipeline.NormalFormViolation, match="let_lift: postcondition violated"):
            bad.run(loss)
        # the real route passes every check
        assert is_tensor_ssa(driver.route("normalize").run(loss))
    finally:
        pipeline.debug(prev)
    # without debug mode the broken output still never reaches a wrong answer:
    # the next stage that needs the grammar refuses it
    prev = pipeline.debug(False)
    try:
        with pytest.raises(UnsupportedError):
            _broken_route("adjoint", tensor_ssa={"run": lambda e: e}).run(
                loss, adjoint={"wrt": [c], "seed": tl.var("dy", tl.Real)})
    finally:
        pipeline.debug(prev)


def test_debug_mode_catches_a_stage_given_input_outside_its_grammar():
    loss, _, c, _ = _deconv()
    skipping = driver.Route("skipping", tuple(driver.stage(n) for n in ("sharing", "adjoint")))
    prev = pipeline.debug(True)
    try:
        with pytest.raises(pipeline.NormalFormViolation, match="adjoint: precondition violated"):
            skipping.run(loss, adjoint={"wrt": [c], "seed": tl.var("dy", tl.Real)})
    finally:
        pipeline.debug(prev)


def test_kernel_preparation_grammars_are_checked_in_debug_mode():
    """prepare's input grammar is the front stages' output (gen pushout), its
    output the backend's let-block: a raw program is refused (prepare does
    not normalize), and a preparation that skips eta expansion is caught."""
    loss, _, _, _ = _deconv()
    prep = driver.stage("prepare")
    n, m = tl.sizes("n m")
    row = tl.tensor("X", n, m)[0]  # in the gen-pushout grammar; eta-expanded by prepare
    prev = pipeline.debug(True)
    try:
        prog = pipeline.run_stage(prep, driver.route("compile").run(loss))
        assert prep.post(prog) is None
        with pytest.raises(pipeline.NormalFormViolation, match="prepare: precondition violated.*gen-pushout"):
            pipeline.run_stage(prep, loss)
        assert prep.post(pipeline.run_stage(prep, row)) is None
        lazy = dataclasses.replace(prep, run=lambda e: e)  # a preparation that does not eta-expand
        with pytest.raises(pipeline.NormalFormViolation, match="prepare: postcondition violated"):
            pipeline.run_stage(lazy, row)
    finally:
        pipeline.debug(prev)
    # outside debug mode the stage itself refuses, naming the sub-expression
    prev = pipeline.debug(False)
    try:
        with pytest.raises(UnsupportedError, match=r"gen-pushout normal form.*access of a non-variable: \(gen"):
            pipeline.run_stage(prep, loss)
    finally:
        pipeline.debug(prev)
