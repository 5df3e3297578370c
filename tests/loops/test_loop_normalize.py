"""``tl.normalize`` of loop programs (issue #17 item 1, "normal forms: the
body is normalized as its own program"; passes/loop_normalize.py).

The normalized program has the original's value (the evaluator, against an
independent NumPy loop and against the original), every loop-free part in
tensor-SSA form, the loop kept (one per original loop), and it goes through
the other stages unchanged (compiled, differentiated).  Random loop
programs (one loop, and two loops in a chain or under a gen) are compared
with the evaluator on the original.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.errors import TensorLangError
from tensorlang.ir import Loop, walk
from tensorlang.loops import chain, split
from tensorlang.passes.ssa_form import is_tensor_ssa

from tests.loop_builder import two_loop_programs
from tests.strategies import assert_close, loop_programs

n = tl.size("n")


def _heat(T=4):
    from benchmarks.heat import program

    return program(T, "all")


def _loops(e):
    return [x for x in walk(e) if isinstance(x, Loop)]


def test_heat_normalizes_with_its_value_and_gradient_kept():
    from benchmarks.heat import data, grad_ref, loss_ref

    loss, ins = _heat("T")
    out = tl.normalize(loss)
    assert len(_loops(out)) == 1
    d = data({"n": 6, "T": 4}, np.random.default_rng(3))
    assert tl.evaluate(out, **d) == pytest.approx(loss_ref(d), rel=1e-12)
    assert tl.evaluate(out, **d) == pytest.approx(tl.evaluate(loss, **d), rel=1e-14)
    # the parts of the normalized program are in normal form: its own split finds tensor SSA
    sp = split(out, "test")
    for part in (sp.body, sp.post):
        assert is_tensor_ssa(part)
    gu, gk = tl.grad(out, wrt=[ins["u0"], ins["kappa"]])(**d)
    want = grad_ref(d)
    np.testing.assert_allclose(gu, want["u0"], rtol=1e-11, atol=1e-12)
    assert gk == pytest.approx(float(want["kappa"]), rel=1e-11)


def test_forcing_rows_invariants_pairs_and_t_survive():
    # f[t] and f[T-1-t] rows, a hoisted invariant Σ w², a pair state, t in an index
    T = tl.size("T")
    f, w, u0 = tl.tensor("f", T, n), tl.tensor("w", n), tl.tensor("u0", n)

    def step(t, s):
        u, c = tl.proj(s, 0), tl.proj(s, 1)
        norm = tl.sum(n, lambda i: w[i] * w[i])
        nu = tl.gen(n, lambda i: 0.5 * u[i] + f[t, i] * norm + 0.1 * f[T - 1 - t, i] + tl.iverson(i <= t, c))
        return tl.pair(nu, c + tl.sum(n, lambda i: nu[i]) * 0.01)

    L = tl.loop(T, tl.pair(u0, tl.const(0.3)), step)
    prog = tl.sum(n, lambda i: tl.proj(L, 0)[i] * tl.proj(L, 0)[i]) + tl.proj(L, 1)
    out = tl.normalize(prog)
    assert len(_loops(out)) == 1
    rng = np.random.default_rng(0)
    kw = dict(f=rng.uniform(-1, 1, (3, 4)), w=rng.uniform(-1, 1, 4), u0=rng.uniform(-1, 1, 4))
    u, c = kw["u0"].copy(), 0.3
    for t in range(3):
        u = 0.5 * u + kw["f"][t] * (kw["w"] @ kw["w"]) + 0.1 * kw["f"][2 - t] + np.where(np.arange(4) <= t, c, 0.0)
        c = c + u.sum() * 0.01
    want = float(u @ u + c)
    assert tl.evaluate(out, **kw) == pytest.approx(want, rel=1e-12)
    assert tl.evaluate(prog, **kw) == pytest.approx(want, rel=1e-12)


def test_two_loops_in_sequence_normalize_each():
    u0 = tl.tensor("u0", n)
    a = tl.scalar("a")
    L1 = tl.loop(3, u0, lambda t, u: tl.gen(n, lambda i: tl.tanh(u[i]) * a))
    L2 = tl.loop(2, L1, lambda t, u: tl.gen(n, lambda i: u[i] * L1[i] + 1.0))
    prog = tl.sum(n, lambda i: L2[i])
    out = tl.normalize(prog)
    assert len(chain(out, "test")) == 2
    kw = dict(u0=np.linspace(-1, 1, 5), a=0.7)
    u = kw["u0"]
    for _ in range(3):
        u = np.tanh(u) * 0.7
    v = u
    for _ in range(2):
        v = v * u + 1.0
    assert tl.evaluate(out, **kw) == pytest.approx(float(v.sum()), rel=1e-12)


def test_normalize_is_stable_on_its_output():
    loss, _ = _heat(5)
    once = tl.normalize(loss)
    twice = tl.normalize(once)
    from benchmarks.heat import data

    d = data({"n": 5, "T": 5}, np.random.default_rng(1))
    del d["T"]  # T = 5 is a constant of this program
    assert tl.evaluate(twice, **d) == pytest.approx(tl.evaluate(loss, **d), rel=1e-13)


def test_nested_loop_using_the_outer_state_is_refused_naming_the_loops():
    u0 = tl.tensor("u0", n)
    prog = tl.loop(3, u0, lambda t, u: tl.loop(2, u, lambda r, v: tl.gen(n, lambda i: 0.5 * v[i])))
    with pytest.raises(TensorLangError, match=r"tl\.normalize: the loop .* is nested in the body of the loop"):
        tl.normalize(prog)


SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(loop_programs(max_steps=3, max_size=3))
def test_random_loop_programs_normalize_with_their_value_kept(prog):
    out = tl.normalize(prog.expr)
    assert len(chain(out, "test")) == len(chain(prog.expr, "test"))
    got = tl.evaluate(out, **prog.inputs, **prog.sizes)
    assert_close(got, prog.evaluate(), prog.bound, "normalized loop program vs the original")


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(two_loop_programs())
def test_random_two_loop_programs_normalize_with_their_value_kept(prog):
    out = tl.normalize(prog.expr)
    assert len(chain(out, "test")) == len(chain(prog.expr, "test"))
    got = tl.evaluate(out, **prog.inputs, **prog.sizes)
    assert_close(got, prog.evaluate(), prog.bound, "normalized two-loop program vs the original")
