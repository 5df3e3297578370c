"""A partly covered gen writes each element once (issues #13/#17, the
Burgers loop's adjoint step).

``gen[i:n] [1 <= i <= n-2]·e`` has zeros off its domain (Fig. 4).  The
array used to be zeroed whole and then written on the domain: two passes
over it, per step in a loop's step programs (the Burgers adjoint zeroed two
n-arrays per step for their two boundary elements: 21% of its reverse
step at n = 1e6).  Now the array is allocated uninitialised and only the
box minus the domain is zeroed (``lower.Lowerer._rest_zeros``): these
tests count, from the kernel IR, the zero stores' loop depth (O(boundary),
not O(box)) and check values against NumPy and finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.loopir import Alloc, If, Loop, Store


def _zero_stores(stmts, depth=0, out=None):
    """``[(array, loop depth)]`` of every ``a[...] = 0.0`` store."""
    out = [] if out is None else out
    for s in stmts:
        if isinstance(s, Loop):
            _zero_stores(s.body, depth + 1, out)
        elif isinstance(s, If):
            _zero_stores(s.then, depth, out)
            _zero_stores(s.orelse, depth, out)
        elif isinstance(s, Store) and K.is_const(s.value, 0.0):
            out.append((s.array, depth))
    return out


def _has_zero_store(s) -> bool:
    return bool(_zero_stores([s]))


def _run_zeroed(stmts, env) -> list:
    out: list = []
    for s in stmts:
        _walk(s, env, out)
    return out


def _walk(s, env, out):
    from tensorlang.backend.loopir import Assign

    if isinstance(s, Assign):
        try:
            env[s.target] = K.evaluate_int(s.value, env)
        except (TypeError, KeyError):
            pass
    elif not _has_zero_store(s):
        return
    elif isinstance(s, Loop):
        for v in range(K.evaluate_int(s.lo, env), K.evaluate_int(s.hi, env), s.step):
            inner = {**env, s.var: v}
            for b in s.body:
                _walk(b, inner, out)
    elif isinstance(s, If):
        for b in (s.then if K.evaluate_int(s.cond, env) else s.orelse):
            _walk(b, env, out)
    elif isinstance(s, Store):
        out.append(tuple(K.evaluate_int(i, env) for i in s.index))


def _allocs(ir):
    return [s for s in ir.body if isinstance(s, Alloc)]


def _interior_1d():
    n = tl.size("n")
    x, c = tl.tensor("x", n), tl.scalar("c")
    # y: zero at both ends; d: a stencil over y (y's boundary zeros are read)
    y = tl.gen(n, lambda i: tl.iverson((i >= 1) & (i <= n - 2), c * x[i]))
    return tl.let(y, lambda Y: tl.sum(n - 1, lambda j: (Y[j + 1] - Y[j]) ** 2 * x[j])), x, c


def _ref_1d(x, c):
    y = c * x.copy()
    y[0] = y[-1] = 0.0
    return float(((y[1:] - y[:-1]) ** 2 * x[:-1]).sum())


def test_interior_gen_zeroes_only_its_two_boundary_elements():
    loss, x, c = _interior_1d()
    ir, _ = tl.compile(loss).lowered()
    assert not any(a.zero for a in _allocs(ir))  # no whole-array zero fill
    zs = _zero_stores(ir.body)
    assert zs and all(d == 0 for _, d in zs)  # single points, no loop: O(1) elements
    for m in (1, 2, 3, 50):  # executed: the two ends, each once
        assert sorted(_run_zeroed(ir.body, {ir.args[0]: m})) == sorted({(0,), (m - 1,)})
    xs = np.random.default_rng(0).uniform(-1, 1, 50)
    for n in (1, 2, 3, 50):  # the boundary pieces at every small size
        got = tl.compile(loss)(x=xs[:n], c=0.7)
        assert got == pytest.approx(_ref_1d(xs[:n], 0.7), rel=1e-13, abs=1e-15)


def test_interior_gen_gradient_matches_finite_differences():
    loss, x, c = _interior_1d()
    g = tl.grad(loss, wrt=[x, c])
    rng = np.random.default_rng(1)
    xs = rng.uniform(-1, 1, 9)
    gx, gc = g(x=xs, c=0.7)
    h = 1e-6
    for k in range(9):
        e = np.zeros(9)
        e[k] = h
        fd = (_ref_1d(xs + e, 0.7) - _ref_1d(xs - e, 0.7)) / (2 * h)
        assert gx[k] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    fd = (_ref_1d(xs, 0.7 + h) - _ref_1d(xs, 0.7 - h)) / (2 * h)
    assert float(gc) == pytest.approx(fd, rel=1e-6)
    # the gradient's kernels are reused across calls (pooled temporaries): a
    # second call at another size must not read the first call's elements
    xs2 = rng.uniform(-1, 1, 5)
    gx2, _ = g(x=xs2, c=0.7)
    e = np.zeros(5)
    e[2] = h
    assert gx2[2] == pytest.approx((_ref_1d(xs2 + e, 0.7) - _ref_1d(xs2 - e, 0.7)) / (2 * h), rel=1e-6)


def test_interior_2d_gen_zeroes_its_border_not_its_box():
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    lap = tl.gen(n, lambda i: tl.gen(n, lambda j: tl.iverson(
        (i >= 1) & (i <= n - 2) & (j >= 1) & (j <= n - 2),
        u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j])))
    # read at a reflected row: the border zeros are read (no fusion into the sum)
    prog = tl.let(lap, lambda L: tl.sum(n, lambda i: tl.sum(n, lambda j: L[i, j] * L[n - 1 - i, j])))
    ir, _ = tl.compile(prog).lowered()
    assert not any(a.zero for a in _allocs(ir))
    zs = _zero_stores(ir.body)
    # executed at n = 12: exactly the 44 border elements, each once (not the 144 of the box)
    got = _run_zeroed(ir.body, {ir.args[0]: 12})
    border = {(i, j) for i in range(12) for j in range(12) if i in (0, 11) or j in (0, 11)}
    assert len(got) == len(border) == 44 and set(got) == border
    us = np.random.default_rng(2).uniform(-1, 1, (12, 12))
    L = np.zeros((12, 12))
    L[1:-1, 1:-1] = us[:-2, 1:-1] + us[2:, 1:-1] + us[1:-1, :-2] + us[1:-1, 2:] - 4 * us[1:-1, 1:-1]
    assert tl.compile(prog)(u=us) == pytest.approx(float((L * L[::-1, :]).sum()), rel=1e-12)


def test_burgers_adjoint_step_writes_no_whole_array_zero_fill():
    from benchmarks import burgers_loop as B

    loss, ins = B.program("T", "all")
    g = tl.grad(loss, wrt=[ins["u0"], ins["c"]])
    rev = g.loop_program
    part, _ = rev.body_vjp
    ir, _ = part.fn.lowered()
    # the step's temporaries with zeros off their domain: none zeroed whole
    assert not any(a.zero for a in ir.allocs)
    assert all(d == 0 for _, d in _zero_stores(ir.body))
    d = B.data({"n": 40, "T": 33}, np.random.default_rng(3))  # >= 32 steps: the step programs run
    gu, gc = g(**d)
    assert rev._rprog is not None
    want = B.grad_ref(d)
    np.testing.assert_allclose(gu, want["u0"], rtol=1e-11, atol=1e-13)
    assert float(gc) == pytest.approx(float(want["c"]), rel=1e-11)


def test_a_thin_domain_keeps_the_zeroed_allocation():
    # [i = j] covers n of n² points: its rest is the box's volume, zeroed by
    # the allocation (calloc), not by loops (lower.RIM)
    n = tl.size("n")
    dy = tl.scalar("dy")
    adj = tl.gen(n, lambda i: tl.gen(n, lambda j: tl.iverson(i == j, dy)))
    ir, _ = tl.compile(adj).lowered()
    assert [a.zero for a in _allocs(ir)] == [True] and _zero_stores(ir.body) == []
    np.testing.assert_array_equal(tl.compile(adj)(n=6, dy=2.0), 2.0 * np.eye(6))
