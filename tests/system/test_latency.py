"""Compile latency (issue #14 item 6): growth by operation counts, the
persistent σ of Figs. 13-15, and the per-stage profile.

Growth is measured as work, never time: cProfile's deterministic counts of
Python calls (all of them, and ``isinstance`` alone: a pass that scans a
growing list per binding, like the adjoint's old 6.39 / 6.32 scans of the
whole ⊕-sum, shows up as isinstance calls growing quadratically).
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import random

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autodiff import _grad_derive
from tensorlang.ir import REAL, Var
from tensorlang.passes.env import Env, extend
from tensorlang.passes.profile import BUILD_GC_THRESHOLD, format_report, quiet_gc, recording

n = tl.size("n")
x = tl.tensor("x", n)


def chain(N: int):
    e = x[0] * x[0]
    for k in range(1, N):
        e = e + x[0] * (k + 1.5)
    return e


def counts(N: int) -> tuple[int, int]:
    loss = chain(N)
    prof = cProfile.Profile()
    prof.enable()
    prog = _grad_derive(loss, [x], "sparse", Var("dy", 0, REAL), False)  # the passes (no disk cache)
    prof.disable()
    # the derivative is right (hand count: 2·x0 + Σ (k + 1.5))
    assert tl.evaluate(prog, x=[2.0])[0] == pytest.approx(4.0 + sum(k + 1.5 for k in range(1, N)))
    st = pstats.Stats(prof)
    inst = sum(v[1] for k, v in st.stats.items() if k[2] == "<built-in method builtins.isinstance>")
    return st.total_calls, inst


def test_gradient_build_work_grows_linearly():
    counts(4)  # first-use imports and registrations out of the way
    (c1, i1), (c2, i2) = counts(60), counts(240)
    # 4x the terms: a linear build does ~4x the work (measured 3.93x for both
    # counts); the old per-dlet scans of the ⊕-sum gave 4.51x isinstance calls
    # here (5.7x at 250 -> 1000 terms)
    assert c2 < 4.4 * c1, (c1, c2)
    assert i2 < 4.3 * i1, (i1, i2)


# --------------------------------------------------------------------------
# The persistent environment


def test_env_versions_behave_like_copied_dicts():
    rng = random.Random(0)
    versions = [({}, Env())]
    for step in range(400):
        d, e = versions[rng.randrange(len(versions))] if rng.random() < 0.3 else versions[-1]
        k = rng.randrange(60)  # repeats shadow
        d2, e2 = {**d, k: step}, e.extend(k, step)
        versions.append((d2, e2))
    for d, e in versions:
        assert dict(e.items()) == d
        assert len(e) == len(d)
        for k in range(60):
            assert (k in e) == (k in d)
            assert e.get(k) == d.get(k)
            if k in d:
                assert e[k] == d[k]
            else:
                with pytest.raises(KeyError):
                    e[k]


def test_extend_accepts_a_dict_and_leaves_it_alone():
    d = {"a": 1}
    e = extend(d, "b", 2)
    assert d == {"a": 1} and dict(e) == {"a": 1, "b": 2}
    f = extend(e, "c", 3)
    assert "c" not in e and dict(f) == {"a": 1, "b": 2, "c": 3}


# --------------------------------------------------------------------------
# The profile


@pytest.fixture
def passes_run(monkeypatch):
    """The passes themselves, not a derived program a previous run left in the
    user's cache directory (the stages below are only timed when they run)."""
    monkeypatch.setenv("TENSORLANG_DERIVED_CACHE", "0")


def test_stage_times_are_recorded_on_the_callable(passes_run):
    loss = tl.sum(n, lambda i: x[i] * x[i] * (x[i] + 1.0))
    with recording() as times:
        g = tl.grad(loss, wrt=x)
    expected = {"sharing", "let_lift", "pair_elim", "gen_pushout", "tensor_ssa", "adjoint", "simplify", "bounds"}
    assert expected <= set(times), set(times)
    assert all(v >= 0 for v in times.values())
    assert g.profile is times
    xv = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(g(x=xv), 3 * xv**2 + 2 * xv)


def test_profile_switch_prints_a_report(monkeypatch, capsys, passes_run):
    monkeypatch.setenv("TENSORLANG_PROFILE", "1")
    loss = tl.sum(n, lambda i: x[i] * x[i])
    g = tl.grad(loss, wrt=x)
    err = capsys.readouterr().err
    assert "tensorlang profile: grad" in err and "simplify" in err, err
    assert "simplify" in g.profile and "other" in g.profile


def test_profile_is_silent_and_empty_when_off(monkeypatch, capsys):
    monkeypatch.delenv("TENSORLANG_PROFILE", raising=False)
    g = tl.grad(tl.sum(n, lambda i: x[i] * x[i]), wrt=x)
    assert g.profile == {}
    assert "tensorlang profile" not in capsys.readouterr().err


def test_format_report_sorts_by_time():
    line = format_report("grad", {"a": 0.001, "b": 0.5})
    assert line.index("b 500.0") < line.index("a 1.0")


def test_quiet_gc_restores_the_threshold_and_nests():
    before = gc.get_threshold()
    with quiet_gc():
        assert gc.get_threshold() == BUILD_GC_THRESHOLD
        with quiet_gc():
            assert gc.get_threshold() == BUILD_GC_THRESHOLD
        assert gc.get_threshold() == BUILD_GC_THRESHOLD
    assert gc.get_threshold() == before


def test_compile_bench_chain_child_checks_its_gradient(passes_run):
    from benchmarks import compile_bench

    r = compile_bench._child_chain(30)
    assert r["error"] < 1e-9 and r["build"] > 0
    assert {"adjoint", "simplify", "tensor_ssa"} <= set(r["stages"])
    s = compile_bench._summary([{"workload": "w", "cold": {"total": 2.0, "error": 0.0},
                                 "warm": {"total": 0.5, "error": 0.0}}])
    assert s["cold_median"] == 2.0 and s["warm_worst"] == 0.5 and not s["failed"]
