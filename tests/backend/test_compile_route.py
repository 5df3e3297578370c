"""tl.compile goes through the stage list (issue #14 item 1).

Every entry point that compiles a program runs the driver's route "compile"
(hoist_guards -> sharing -> let_lift -> pair_elim -> gen_pushout -> prepare);
``prepare`` only writes a normal program in the backend grammar and refuses
anything else, naming the sub-expression.  Values are checked against NumPy.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import driver
from tensorlang.backend.api import compile as backend_compile
from tensorlang.backend.prepare import prepare
from tensorlang.errors import UnsupportedError
from tensorlang.passes import pipeline
from tensorlang.passes.normal_forms import is_gen_pushed_out, is_pair_free
from tensorlang.passes.profile import tracing
from tensorlang.runtime import make_callable

FRONT = ("hoist_guards", "sharing", "let_lift", "pair_elim", "gen_pushout")
STAGE_NAMES = {s.name for s in driver.STAGES}


def _ran(names):
    return tuple(n for n in names if n in STAGE_NAMES)


def _program():
    """Not normal: an access of a gen, a let under a sum, a pair projected."""
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    y = tl.gen(n, lambda i: x[i] * w[i])
    p = tl.pair(y, tl.sum(n, lambda i: w[i]))
    body = tl.sum(n, lambda i: tl.let(p.fst[i] + 1.0, lambda s: s * s))
    return body + p.snd, x, w


def _want(x, w):
    return float(((x * w + 1.0) ** 2).sum() + w.sum())


def test_compile_route_is_the_front_stages_then_prepare():
    assert driver.ROUTES["compile"].names == (*FRONT, "prepare")
    e, _, _ = _program()
    out = driver.route("compile").run(e)
    assert is_pair_free(out) and is_gen_pushed_out(out)


@pytest.mark.parametrize("entry", ["tl.compile", "make_callable", "python_kernel"])
def test_every_compiling_entry_point_runs_the_route(entry, monkeypatch):
    monkeypatch.setenv("TENSORLANG_DERIVED_CACHE", "0")
    e, x, w = _program()
    rng = np.random.default_rng(0)
    ins = {"x": rng.normal(size=5), "w": rng.normal(size=5)}
    build = {"tl.compile": lambda: tl.compile(e),
             "make_callable": lambda: make_callable(e, runtime="compiled"),
             "python_kernel": lambda: driver.python_kernel(e)}[entry]
    with tracing() as names:
        got = build()(**ins)
    assert _ran(names) == (*FRONT, "prepare")
    assert got == pytest.approx(_want(ins["x"], ins["w"]), rel=1e-12)


def test_prepare_refuses_a_program_that_is_not_normal():
    e, _, _ = _program()
    prev = pipeline.debug(False)  # (debug mode reports it earlier, as the stage's precondition)
    try:
        with pytest.raises(UnsupportedError, match="normal form.*let inside a right-hand side"):
            prepare(e)
        with pytest.raises(UnsupportedError, match="normal form"):
            backend_compile(e)  # the backend alone: no front stages, no private normalizer
    finally:
        pipeline.debug(prev)
    assert prepare(driver.route("compile").run(e)) is not None


def test_a_normal_program_is_compiled_as_it_is():
    """A derivative route's output is already in prepare's input grammar: the
    compile route runs no front stage on it (grad's trace is its own route)."""
    n = tl.size("n")
    x = tl.tensor("x", n)
    e = tl.gen(n, lambda i: x[i] * x[i] + 1.0)
    assert driver.route("compile").run(e) is e
    with tracing() as names:
        got = tl.compile(e)(x=np.arange(4.0))
    assert _ran(names) == ("prepare",)
    np.testing.assert_array_equal(got, np.arange(4.0) ** 2 + 1.0)


def test_array_of_structs_result_is_read_as_struct_of_arrays():
    n = tl.size("n")
    x = tl.tensor("x", n)
    t = 2.0 + tl.sum(n, lambda k: x[k])
    e = tl.gen(n, lambda i: tl.pair(t, t * x[i]))
    xv = np.array([1.0, 2.0, 4.0])
    got = tl.compile(e)(x=xv)
    tv = 2.0 + xv.sum()
    assert [tuple(map(float, g)) for g in got] == [(tv, tv * v) for v in xv]
    nested = tl.gen(n, lambda i: tl.pair(x[i], tl.pair(x[i], 1.0)))
    with pytest.raises(UnsupportedError, match="nested array of structs"):
        tl.compile(nested)


def test_loop_parts_run_the_route():
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    y = tl.gen(n, lambda i: x[i] * w[i])
    # the body reads an access of a gen (not normal): its part goes through the front stages
    prog = tl.loop(3, y, lambda t, s: tl.gen(n, lambda i: tl.gen(n, lambda j: s[j] * 0.5)[i] + w[i]))
    xv, wv = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    with tracing() as names:
        got = tl.compile(prog)(x=xv, w=wv)
    assert "gen_pushout" in _ran(names) and "prepare" in _ran(names)
    want = xv * wv
    for _ in range(3):
        want = want * 0.5 + wv
    np.testing.assert_allclose(got, want, rtol=1e-12)
