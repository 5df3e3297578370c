"""Every public entry point on a loop program gives the right answer or a
named refusal (issue #17 item 1: "loops go through every stage").

Right answers are checked against independent references: a NumPy loop,
central finite differences, the dot-product test, the float evaluator for
the exact (sympy) one.  Refusals must be TensorLangErrors that name the
loop (or say the program has one) and point to what works instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import sympy

import tensorlang as tl
from tensorlang.errors import TensorLangError, UnsupportedError

n = tl.size("n")
T = tl.size("T")
u0, a = tl.tensor("u0", n), tl.scalar("a")
f = tl.tensor("f", T, n)


def _prog():
    # a forcing row f[t], a pair state, a loss: touches rows, pairs and post
    def step(t, s):
        u, c = tl.proj(s, 0), tl.proj(s, 1)
        return tl.pair(tl.gen(n, lambda i: tl.tanh(u[i]) * a + 0.1 * f[t, i] * c), c * 0.9 + a * 0.01)

    L = tl.loop(T, tl.pair(u0, tl.const(1.0)), step, checkpoint=2)
    return tl.sum(n, lambda i: tl.proj(L, 0)[i] * tl.proj(L, 0)[i]) + tl.proj(L, 1)


def _numpy(u0, a, f):
    u, c = u0.copy(), 1.0
    for t in range(f.shape[0]):
        u, c = np.tanh(u) * a + 0.1 * f[t] * c, c * 0.9 + a * 0.01
    return float(u @ u + c)


def _kw(seed=0):
    rng = np.random.default_rng(seed)
    return dict(u0=rng.uniform(-1, 1, 4), a=0.7, f=rng.uniform(-1, 1, (5, 4)))


def _fd(kw, dirs, h=1e-6):
    plus = {k: v + h * dirs[k] if k in dirs else v for k, v in kw.items()}
    minus = {k: v - h * dirs[k] if k in dirs else v for k, v in kw.items()}
    return (_numpy(**plus) - _numpy(**minus)) / (2 * h)


def test_printer_evaluator_float_and_exact():
    e, kw = _prog(), _kw()
    assert "loop[" in tl.pretty(e) and "loop[" in str(e)
    want = _numpy(**kw)
    assert tl.evaluate(e, **kw) == pytest.approx(want, rel=1e-13)
    # sympy: the exact value, the numbers substituted afterwards
    syms = {k: np.array([sympy.Symbol(f"{k}{j}") for j in range(np.size(v))], dtype=object).reshape(np.shape(v))
            for k, v in kw.items() if np.ndim(v)}
    syms["a"] = sympy.Symbol("a")
    exact = tl.evaluate(e, **syms)
    subs = {s: float(x) for k in ("u0", "f") for s, x in zip(syms[k].ravel(), np.ravel(kw[k]))}
    subs[syms["a"]] = kw["a"]
    assert float(sympy.N(exact.subs(subs), 30)) == pytest.approx(want, rel=1e-12)


def test_cost_is_its_symbolic_form_at_the_sizes():
    e = _prog()
    s = tl.symbolic_cost(e)
    at = {x: {"n": 4, "T": 5}[str(x)] for x in s.free_symbols}
    assert int(s.subs(at)) == tl.cost(e, n=4, T=5)
    assert tl.cost(e, n=4, T=10) > tl.cost(e, n=4, T=5)  # T times the body


def test_compile_and_every_derivative_entry_point():
    e, kw = _prog(), _kw(1)
    want = _numpy(**kw)
    assert tl.compile(e)(**kw) == pytest.approx(want, rel=1e-12)
    rng = np.random.default_rng(2)
    dirs = {"u0": rng.standard_normal(4), "a": 0.3, "f": rng.standard_normal((5, 4))}
    fd = _fd(kw, dirs)
    wrt = [u0, a, f]

    def along(gs):
        return sum(float(np.sum(g * dirs[w.name])) for g, w in zip(gs, wrt))

    assert along(tl.grad(e, wrt=wrt)(**kw)) == pytest.approx(fd, rel=1e-6, abs=1e-8)
    v, gs = tl.value_and_grad(e, wrt=wrt)(**kw)
    assert v == pytest.approx(want, rel=1e-12) and along(gs) == pytest.approx(fd, rel=1e-6, abs=1e-8)
    assert along(tl.vjp(e, wrt=wrt)(**kw, dy=1.0)) == pytest.approx(fd, rel=1e-6, abs=1e-8)
    v, t = tl.jvp(e, wrt=wrt)(**kw, **{"d" + k: d for k, d in dirs.items()})
    assert v == pytest.approx(want, rel=1e-12) and t == pytest.approx(fd, rel=1e-6, abs=1e-8)
    assert tl.evaluate(tl.normalize(e), **kw) == pytest.approx(want, rel=1e-12)


def test_whole_program_derivatives_and_the_loop_free_audit_refuse_by_name():
    from tensorlang.audit import audit

    e = _prog()
    for fn in (tl.derivative, tl.adjoint):
        with pytest.raises(UnsupportedError, match=r"of a program with a loop .* use tl\.jvp / tl\.grad / tl\.vjp"):
            fn(e, wrt=[a])
    with pytest.raises(UnsupportedError, match=r"the program has a loop; use tensorlang\.loop_audit\.audit_loop"):
        audit(e, wrt=["a"])


def test_cli_audit_certifies_a_loop_program(tmp_path):
    src = tmp_path / "prog.py"
    src.write_text(textwrap.dedent("""
        import tensorlang as tl
        n, T = tl.sizes("n T")
        u0, a = tl.tensor("u0", n), tl.scalar("a")
        L = tl.loop(T, u0, lambda t, u: tl.gen(n, lambda i: tl.tanh(u[i]) * a))
        loss = tl.sum(n, lambda i: L[i] * L[i])
    """))
    env = {**os.environ, "TENSORLANG_CACHE_DIR": os.environ.get("TENSORLANG_CACHE_DIR", str(tmp_path / "cache"))}
    r = subprocess.run([sys.executable, "-m", "tensorlang.cli", "audit", str(src), "--sizes", "n=8,T=10",
                        "--format", "markdown"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "loop adjoint (all)" in r.stdout and "stored states" in r.stdout


def test_nested_loop_using_the_outer_state_is_refused_naming_the_loop_at_every_stage():
    e = tl.sum(n, lambda i: tl.loop(3, u0, lambda t, u: tl.loop(2, u, lambda r, v: tl.gen(n, lambda j: 0.5 * v[j])))[i])
    kw = {"u0": np.array([0.3, -0.2])}
    assert tl.evaluate(e, **kw) == pytest.approx(0.5 ** 6 * 0.1)  # the semantics is defined: the evaluator runs it
    for stage, call in (("compile", lambda: tl.compile(e)), ("grad", lambda: tl.grad(e, wrt=[u0])),
                        ("jvp", lambda: tl.jvp(e, wrt=[u0])), ("cost", lambda: tl.cost(e, n=2)),
                        ("tl.normalize", lambda: tl.normalize(e))):
        with pytest.raises(TensorLangError, match=rf"{stage}: the loop loop\[.* is nested in the body of the loop"):
            call()


def test_a_loop_reading_let_bound_values_runs_at_every_stage():
    # tl.let(v = 2 exp(u0), c = Σ v²): the loop's init is v, its body reads v and c (loops.inline_lets)
    e = tl.let(tl.gen(n, lambda i: tl.exp(u0[i]) * 2.0), lambda v: tl.let(tl.sum(n, lambda i: v[i] * v[i]), lambda c: tl.sum(
        n, lambda i: tl.loop(3, v, lambda t, u: tl.gen(n, lambda j: tl.tanh(u[j]) * a + v[j] * 0.1 + c * 0.001))[i] * v[i])))

    def ref(u0, a):
        v = np.exp(u0) * 2.0
        u = v
        for _ in range(3):
            u = np.tanh(u) * a + v * 0.1 + float(v @ v) * 0.001
        return float(u @ v)

    kw = {"u0": np.array([0.3, -0.2, 0.5]), "a": 0.8}
    want = ref(**kw)
    assert tl.evaluate(e, **kw) == pytest.approx(want, rel=1e-13)
    assert tl.compile(e)(**kw) == pytest.approx(want, rel=1e-12)
    assert tl.evaluate(tl.normalize(e), **kw) == pytest.approx(want, rel=1e-12)
    du = np.array([0.5, -1.0, 0.25])
    h = 1e-6
    fd = (ref(kw["u0"] + h * du, 0.8 + h * 0.7) - ref(kw["u0"] - h * du, 0.8 - h * 0.7)) / (2 * h)
    gu, ga = tl.grad(e, wrt=[u0, a])(**kw)
    assert float(gu @ du) + ga * 0.7 == pytest.approx(fd, rel=1e-6)
    assert tl.jvp(e, wrt=[u0, a])(**kw, du0=du, da=0.7)[1] == pytest.approx(fd, rel=1e-6)
    assert tl.cost(e, n=3) > 0
