"""Adjoint reuse of a transposed linear operator (backend/adjoint_reuse.py;
issue #17, the heat adjoint): ``<λ, L u>`` computed as ``<Lᵀλ, u>``.

Checked: the rewrite fires where isl proves the re-indexed guards equal and
not where they differ (a guard or a coefficient off by one); the cost
model's count of the adjoint step drops; values against NumPy, the reference
evaluator on the unrewritten program, and finite differences through whole
loops; the kernel IR of the heat adjoint step reads one stencil of ``λ`` and
one element of ``u`` per interior point.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.adjoint_reuse import reuse_program
from tensorlang.backend.fusion import fuse, out_vars, resolve_aliases, split_program
from tensorlang.backend.hfuse import fuse_nests
from tensorlang.backend.loopir import AccAdd, Assign, Loop, Store, walk_stmts
from tensorlang.backend.lower import Lowerer
from tensorlang.backend.prepare import prepare
from tensorlang.ir import lets, make_lets


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    mp.setenv("TENSORLANG_DERIVED_CACHE", "0")
    yield
    mp.undo()


n = tl.size("n")


def _lap(v):
    out = -4.0 * v
    out[1:, :] += v[:-1, :]
    out[:-1, :] += v[1:, :]
    out[:, 1:] += v[:, :-1]
    out[:, :-1] += v[:, 1:]
    return out


def heat_step_adjoint():
    u, kappa = tl.tensor("u", n, n), tl.scalar("kappa")
    step = tl.gen([n, n], lambda i, j: u[i, j] + kappa * (
        tl.iverson(i >= 1, u[i - 1, j]) + tl.iverson(i + 1 <= n - 1, u[i + 1, j])
        + tl.iverson(j >= 1, u[i, j - 1]) + tl.iverson(j + 1 <= n - 1, u[i, j + 1]) - 4 * u[i, j]))
    return tl.adjoint(step, [u, kappa], cotangent="du")


def _before_after(expr):
    """(fused let-block without the rewrite, the same with it, ``w`` kept bound)."""
    p = prepare(expr)
    binds, out = resolve_aliases(*split_program(p))
    base = Lowerer(p, "sparse").scope0
    before = make_lets(fuse(binds, out_vars(out), base, reuse=False), out)
    return before, reuse_program(before, base)


def test_heat_adjoint_is_rewritten_and_its_count_drops():
    before, after = _before_after(heat_step_adjoint())
    bb, ba = lets(before)[0], lets(after)[0]
    assert len(ba) == len(bb) + 1  # w = Lᵀλ bound once
    w = ba[0][0]
    dk = next(r for v, r in ba if v.name.startswith("dkappa"))
    assert set(tl.ir.free_vars(dk)) == {w} | {v for v in tl.ir.free_vars(dk) if v.name == "u"} and w.name == "lt"
    for sizes in (dict(n=2), dict(n=6), dict(n=50)):
        assert tl.cost(tl.explicit_sharing(after), **sizes) < tl.cost(tl.explicit_sharing(before), **sizes)


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_rewritten_values_match_numpy_and_the_unrewritten_program(size):
    rng = np.random.default_rng(size)
    u, du, kappa = rng.normal(size=(size, size)), rng.normal(size=(size, size)), 0.3
    want_u, want_k = du + kappa * _lap(du), float((du * _lap(u)).sum())
    before, after = _before_after(heat_step_adjoint())
    for prog in (before, after):
        got_u, got_k = tl.evaluate(prog, u=u, du=du, kappa=kappa)
        np.testing.assert_allclose(got_u, want_u, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_k, want_k, rtol=1e-12, atol=1e-12)
    got_u, got_k = tl.compile(heat_step_adjoint())(u=u, du=du, kappa=kappa)
    np.testing.assert_allclose(got_u, want_u, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_k, want_k, rtol=1e-12, atol=1e-12)


m = tl.size("m")


def _pair_program(kterms, gterms):
    """``(Σ_i lam[i]·Σ kterms(u, i), gen[j] lam[j] + c·Σ gterms(lam, j))`` over ``[m]``."""
    u, lam, c = tl.tensor("u", m), tl.tensor("lam", m), tl.scalar("c")
    dk = tl.sum([m], lambda i: lam[i] * kterms(u, i))
    dy = tl.gen([m], lambda j: lam[j] + c * gterms(lam, j))
    return tl.pair(dy, dk)


# a one-sided difference L u[i] = [i + 1 < m]·u[i + 1] - u[i] (not symmetric) and its transpose
_FWD = lambda u, i: tl.iverson(i + 1 <= m - 1, u[i + 1]) - u[i]  # noqa: E731
_FWD_T = lambda v, j: tl.iverson(j >= 1, v[j - 1]) - v[j]  # noqa: E731
CASES = {
    "transpose": (_FWD, _FWD_T, True),
    "guard off by one": (_FWD, lambda v, j: tl.iverson(j >= 2, v[j - 1]) - v[j], False),
    "coefficient differs": (_FWD, lambda v, j: tl.iverson(j >= 1, 2 * v[j - 1]) - v[j], False),
    "offset differs": (_FWD, lambda v, j: tl.iverson(j + 1 <= m - 1, v[j + 1]) - v[j], False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rewrite_needs_the_exact_transpose(case):
    kt, gt, fires = CASES[case]
    prog = _pair_program(kt, gt)
    before, after = _before_after(prog)
    assert (len(lets(after)[0]) == len(lets(before)[0]) + 1) is fires
    rng = np.random.default_rng(3)
    k = tl.compile(prog)
    for size in (1, 2, 5):
        d = dict(u=rng.normal(size=size), lam=rng.normal(size=size), c=0.7)
        want = tl.evaluate(prog, **d)  # the reference evaluator on the program as written
        got = k(**d)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
        if fires:  # <λ, L u> = <Lᵀλ, u>: both against NumPy
            Lu = np.append(d["u"][1:], 0.0) - d["u"]
            np.testing.assert_allclose(got[1], float(d["lam"] @ Lu), rtol=1e-12, atol=1e-12)


def _interior(ir):
    """The straight-line innermost loops of the serial kernel (after hfuse)
    holding both a store and an accumulation: the interior, where no guard is
    left (isl peels the boundary into loops with guarded loads)."""
    return [s for s in walk_stmts(fuse_nests(ir).body) if isinstance(s, Loop)
            and all(isinstance(x, (Assign, AccAdd, Store)) for x in s.body)
            and any(isinstance(x, Store) for x in s.body) and any(isinstance(x, AccAdd) for x in s.body)]


def _loads(e, out: list) -> list:
    if isinstance(e, K.Load):
        out.append(e.array)
    if isinstance(e, tuple):
        for x in e:
            _loads(x, out)
    elif isinstance(e, K.KExpr) and hasattr(e, "__dataclass_fields__"):
        for f in e.__dataclass_fields__:
            _loads(getattr(e, f), out)
    return out


def test_heat_adjoint_kernel_reads_one_stencil_of_lambda_and_one_u_per_point():
    k = tl.compile(heat_step_adjoint())
    var = k.variant("float64")
    ir, spec = k.lowered()
    names = {nm: ir.args[len(spec["sizes"]) + q] for q, (nm, _, _) in enumerate(spec["inputs"])}
    loops = _interior(ir)
    assert loops  # the interior of the fused nest
    for lp in loops:
        reads = []
        for s in lp.body:
            _loads(s.value, reads)
        assert reads.count(names["du"]) == 5 + 1  # Lᵀλ (one stencil) and λ itself for dY = λ + κ·Lᵀλ
        assert reads.count(names["u"]) == 1
        stencil = [s for s in lp.body if isinstance(s, Assign)]
        assert len(stencil) == 1 and _loads(stencil[0].value, []).count(names["du"]) == 5
    assert "cse" in var.source


def _fd_check(mod, wrt_scalar, ck, n_=7, T=40):
    """tl.grad through the loop against the module's NumPy reference and a
    central difference of the compiled loss in the scalar parameter."""
    d = mod.data({"n": n_, "T": T}, np.random.default_rng(1))
    loss, ins = mod.program("T", ck)
    g = tl.grad(loss, wrt=[ins["u0"], ins[wrt_scalar]])(**d)
    want = mod.grad_ref(d)
    np.testing.assert_allclose(g[0], want["u0"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(g[1], want[wrt_scalar], rtol=1e-10, atol=1e-10)
    f = tl.compile(loss)
    h = 1e-6
    up = f(**{**d, wrt_scalar: d[wrt_scalar] + h})
    dn = f(**{**d, wrt_scalar: d[wrt_scalar] - h})
    np.testing.assert_allclose(g[1], (up - dn) / (2 * h), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("ck", ["all", 6])
def test_heat_gradient_through_the_loop(ck):
    from benchmarks import heat

    _fd_check(heat, "kappa", ck)


@pytest.mark.parametrize("ck", ["all", 6])
def test_wave_gradient_through_the_loop(ck):
    from benchmarks import wave

    _fd_check(wave, "c2", ck)


# -- hfuse.py: one computation of a value two fused statements share ------------------------------


def _body(middle_writes: str | None):
    """``acc += x[i]·(y[i] + y[i+1])``, [a store into ``middle_writes``], ``z[i] = 2·(y[i] + y[i+1])``."""
    i = K.Name("i")
    e = K.FSum((K.Load("y", (i,)), K.Load("y", (K.IBin("+", i, K.Int(1)),))))
    out = [AccAdd("acc", K.FMul(K.Load("x", (i,)), e))]
    if middle_writes is not None:
        out.append(Store(middle_writes, (i,), K.Float(0.0)))
    out.append(Store("z", (i,), K.FMul(K.Float(2.0), e)))
    return tuple(out), e


@pytest.mark.parametrize("writes, shared", [(None, True), ("w", True), ("y", False)])
def test_fused_bodies_share_a_value_only_where_nothing_between_changes_it(writes, shared):
    from tensorlang.backend.hfuse import _share

    body, e = _body(writes)
    names = iter(f"cse{k}" for k in range(10))
    got = _share((Loop("i", K.Int(0), K.Name("n"), 1, body, "sum"),), lambda prefix: next(names))[0].body
    reads = [s for s in got if isinstance(s, Assign)]
    if shared:  # computed once, before its first use; both uses read the local
        assert reads == [Assign("cse0", e)] and got[0] == reads[0]
        assert all(e not in _subexprs(s.value) for s in got[1:])
    else:  # y[i] changes in between: each statement computes its own
        assert got == body


def _subexprs(e) -> list:
    out = [e]
    if isinstance(e, tuple):
        return [y for x in e for y in _subexprs(x)]
    if isinstance(e, K.KExpr) and hasattr(e, "__dataclass_fields__"):
        for f in e.__dataclass_fields__:
            out += _subexprs(getattr(e, f))
    return out
