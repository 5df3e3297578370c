"""A cheap 1-D producer read at constant shifts is fused into its consumer
(backend/shifted.py) and, in the serial kernel, computed once per point in
rolling scalars (backend/roll.py) -- issue #13 item 2, the Burgers reverse
step (issue #17).

Structure is checked on the kernel IR (temporaries, loops, calls per
iteration), never on time or source text; values against NumPy, the
reference evaluator, finite differences, and the kernel without the rule
(bit for bit).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend import shifted
from tensorlang.backend.loopir import Alloc, Assign, AccAdd, If, Loop, Store, walk_stmts
from tensorlang.backend.roll import roll_loops
from tensorlang.driver import python_kernel  # the route "compile", run as plain Python


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))


n = tl.size("n")


def upwind():
    """``out[i] = u[i] - c·[1 ≤ i ≤ n-2]·(F[i] - F[i-1])`` with the flux
    ``F`` (extent n - 1: a sub-range) a temporary read at two shifts."""
    u, c = tl.tensor("u", n), tl.scalar("c")
    flux = tl.gen(n - 1, lambda j: 0.5 * tl.maximum(u[j], 0.0) ** 2 + 0.5 * tl.minimum(u[j + 1], 0.0) ** 2)
    return tl.let(flux, lambda F: tl.gen(n, lambda i: u[i] - c * tl.iverson((i >= 1) & (i <= n - 2), F[i] - F[i - 1])))


def upwind_ref(u, c):
    F = 0.5 * np.maximum(u[:-1], 0.0) ** 2 + 0.5 * np.minimum(u[1:], 0.0) ** 2
    out = u.copy()
    out[1:-1] -= c * (F[1:] - F[:-1])
    return out


def chain():
    """Two temporaries in a chain, each read at two shifts by the next (the
    reverse step's ``dt' -> dY -> du``): ``a[j] = c·v[j]`` on the interior,
    ``b[j] = a[j+1] - a[j]``, ``out[i] = v[i]·(b[i] + b[i-1])`` on the interior."""
    v, c = tl.tensor("v", n), tl.scalar("c")
    a = tl.gen(n, lambda j: tl.iverson((j >= 1) & (j <= n - 2), c * v[j]))
    return tl.let(a, lambda A: tl.let(
        tl.gen(n - 1, lambda j: A[j + 1] - A[j]),
        lambda B: tl.gen(n, lambda i: tl.iverson((i >= 1) & (i <= n - 2), v[i] * (B[i] + B[i - 1])))))


def chain_ref(v, c):
    a = np.zeros_like(v)
    a[1:-1] = c * v[1:-1]
    b = a[1:] - a[:-1]
    out = np.zeros_like(v)
    out[1:-1] = v[1:-1] * (b[1:] + b[:-1])
    return out


@pytest.fixture
def no_shift_rule(monkeypatch, tmp_path):
    """The backend as it was without the rule (no producer is cheap enough),
    with its own kernel cache (the cache keys do not know the rule)."""
    from tensorlang.backend import cache

    def use(flag=True):
        monkeypatch.setattr(shifted, "MAX_OPS", -1 if flag else 12)
        monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path / ("off" if flag else "on")))
        cache.clear_memory()
    return use


def _temporaries(ir) -> set:
    """The names of the kernel's temporary arrays (pooled or allocated in the body)."""
    return {a.name for a in ir.allocs if a.role == "temporary"} | {
        a.name for a in walk_stmts(ir.body) if isinstance(a, Alloc) and a.role == "temporary"}


def _calls(e) -> int:
    if isinstance(e, K.FCall):
        return 1 + sum(_calls(a) for a in e.args)
    if isinstance(e, K.KExpr) and not isinstance(e, (K.Int, K.Bool, K.Float, K.Name)):
        from dataclasses import fields
        total = 0
        for f in fields(e):
            x = getattr(e, f.name)
            for y in (x if isinstance(x, tuple) else (x,)):
                total += _calls(y)
        return total
    return 0


def _stmt_calls(stmts) -> int:
    total = 0
    for s in stmts:
        if isinstance(s, (Assign, AccAdd)):
            total += _calls(s.value)
        elif isinstance(s, Store):
            total += _calls(s.value)
    return total


def _innermost(stmts) -> list:
    return [m for m in walk_stmts(stmts) if isinstance(m, Loop) and not any(
        isinstance(x, Loop) for x in walk_stmts(m.body))]


def test_the_shifted_flux_is_fused_and_computed_once_per_point(no_shift_rule):
    ir, _ = tl.compile(upwind()).lowered()
    assert not _temporaries(ir)  # F is not an array any more
    # the interior loop (isl peels the two border points) reads F at i and i - 1:
    # substituted, it calls maximum and minimum twice each per point ...
    interior = max(_innermost(ir.body), key=lambda m: _stmt_calls(m.body))
    assert _stmt_calls(interior.body) == 4
    # ... rolled, once each: the values at i - 1 are the last iteration's
    rolled = roll_loops(ir)
    loops = _innermost(rolled.body)
    assert len(loops) == len(_innermost(ir.body))
    assert max(_stmt_calls(m.body) for m in loops) == 2
    # without the rule F is a temporary array, written by a loop of its own
    no_shift_rule()
    old, _ = tl.compile(upwind()).lowered()
    assert len(_temporaries(old)) == 1
    assert len(_innermost(old.body)) > len(_innermost(ir.body))


def test_the_stencil_chain_leaves_no_temporary(no_shift_rule):
    ir, _ = tl.compile(chain()).lowered()
    assert not _temporaries(ir)
    no_shift_rule()
    old, _ = tl.compile(chain()).lowered()
    assert len(_temporaries(old)) == 2


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 9, 64])
def test_values_at_every_size_bit_for_bit(size, no_shift_rule):
    # the border cases: n - 1 = 0 flux points, a single one, no interior, ...
    rng = np.random.default_rng(size)
    u, v = 0.8 * np.sin(np.linspace(0, 6, size)) + rng.uniform(-0.2, 0.2, size), rng.normal(size=size)
    runs = {}
    for rule in ("on", "off"):
        no_shift_rule(rule == "off")
        runs[rule] = [(tl.compile(upwind(), threads=t)(u=u, c=0.3), tl.compile(chain(), threads=t)(v=v, c=0.7))
                      for t in (1, 2)]  # the serial kernel, the parallel one (rolled in chunks)
        runs[rule].append((python_kernel(upwind())(u=u, c=0.3), python_kernel(chain())(v=v, c=0.7)))
    for (a, b), (a0, b0) in zip(runs["on"], runs["off"]):
        np.testing.assert_allclose(a, upwind_ref(u, 0.3), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(b, chain_ref(v, 0.7), rtol=1e-14, atol=1e-15)
        np.testing.assert_array_equal(a, a0)  # the same expressions on the same inputs
        np.testing.assert_array_equal(b, b0)


def test_shadowing_binders():
    # gen[i:n] [1 ≤ i]·(t[i] - t[i-1])·(sum[i:m] z[i]): the sum rebinds i, t is read
    # under the gen's i only: fused; with a read of t under the sum's i as well
    # (two binders around it: t would be recomputed per point of both) it is not
    from tensorlang.ir import Access, Add, Const, Gen, Iverson, Mul, Sum, as_aff, sym_aff

    m = tl.size("m")
    u, z = tl.tensor("u", n), tl.tensor("z", m)
    t = tl.gen(n, lambda j: u[j] * u[j])
    i = tl.gen(n, lambda k: u[k]).var

    def stencil(T):
        return Iverson(sym_aff(i) >= 1, Add(Access(T, sym_aff(i)), Mul(Const(-1.0), Access(T, sym_aff(i) - 1))))

    fused = tl.let(t, lambda T: Gen(i, as_aff(n), Mul(stencil(T), Sum(i, as_aff(m), Access(z, sym_aff(i))))))
    kept = tl.let(t, lambda T: Gen(i, as_aff(n), Add(stencil(T), Sum(i, as_aff(n), Access(T, sym_aff(i))))))
    assert not _temporaries(tl.compile(fused).lowered()[0])
    assert len(_temporaries(tl.compile(kept).lowered()[0])) == 1
    rng = np.random.default_rng(1)
    x, zz = rng.normal(size=6), rng.normal(size=4)
    tt = x * x
    st = np.concatenate([[0.0], tt[1:] - tt[:-1]])
    for prog, want, ins in ((fused, st * zz.sum(), dict(u=x, z=zz)), (kept, st + tt.sum(), dict(u=x))):
        np.testing.assert_allclose(tl.evaluate(prog, **ins), want, rtol=1e-14, atol=1e-14)
        for run in (tl.compile(prog), tl.compile(prog, threads=2), python_kernel(prog)):
            np.testing.assert_allclose(run(**ins), want, rtol=1e-14, atol=1e-14)


def test_not_into_a_sum():
    # a reduction loop adds in scalar order: the producer stays in its own (vectorizable) loop
    u = tl.tensor("u", n)
    prog = tl.let(tl.gen(n - 1, lambda j: tl.maximum(u[j], 0.0) * u[j + 1]),
                  lambda F: tl.sum(n - 1, lambda i: tl.iverson(i >= 1, u[i] * (F[i] - F[i - 1]))))
    ir, _ = tl.compile(prog).lowered()
    assert len(_temporaries(ir)) == 1
    x = np.random.default_rng(2).normal(size=7)
    F = np.maximum(x[:-1], 0.0) * x[1:]
    np.testing.assert_allclose(tl.compile(prog)(u=x), (x[1:-1] * (F[1:] - F[:-1])).sum(), rtol=1e-13)


def burgers_loss(T=4):
    u0, z, c = tl.tensor("u0", n), tl.tensor("z", n), tl.scalar("c")

    def step(t, u):
        return upwind_step(u, c)

    uT = tl.loop(T, u0, step)
    return tl.sum(n, lambda i: (uT[i] - z[i]) ** 2), u0, c


def upwind_step(u, c):
    flux = tl.gen(n - 1, lambda j: 0.5 * tl.maximum(u[j], 0.0) ** 2 + 0.5 * tl.minimum(u[j + 1], 0.0) ** 2)
    return tl.let(flux, lambda F: tl.gen(n, lambda i: u[i] - c * tl.iverson((i >= 1) & (i <= n - 2), F[i] - F[i - 1])))


@pytest.mark.parametrize("size", [2, 3, 11])
def test_burgers_loop_gradient_against_numpy_and_finite_differences(size, no_shift_rule):
    rng = np.random.default_rng(size)
    u0 = 0.8 * np.sin(np.linspace(0, 6, size)) + rng.uniform(-0.2, 0.2, size)
    z, c, T = rng.uniform(-0.5, 0.5, size), 0.25, 4
    loss, xu, xc = burgers_loss(T)
    g = tl.grad(loss, wrt=[xu, xc])
    gu, gc = g(u0=u0, z=z, c=c)

    def f(u, cc):
        for _ in range(T):
            u = upwind_ref(u, cc)
        return ((u - z) ** 2).sum()

    h = 1e-6
    fd_u = np.array([(f(u0 + h * e, c) - f(u0 - h * e, c)) / (2 * h) for e in np.eye(size)])
    np.testing.assert_allclose(gu, fd_u, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gc, (f(u0, c + h) - f(u0, c - h)) / (2 * h), rtol=1e-6, atol=1e-8)
    no_shift_rule()
    loss0, xu0, xc0 = burgers_loss(T)
    gu0, gc0 = tl.grad(loss0, wrt=[xu0, xc0])(u0=u0, z=z, c=c)
    np.testing.assert_array_equal(gu, gu0)  # bit for bit with the unfused step kernels
    assert float(gc) == float(gc0)
