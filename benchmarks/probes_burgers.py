"""Machine-limit probes for the Burgers loop's gradient (issue #17, "more
workloads"; docs/backend.md "Shifted producers and rolling scalars": "reducing the
rest of the loop's ratio needs the Courant-number reduction fused with the
update loop").

Hand-written Numba kernels for ``benchmarks/burgers_loop.py``'s program
(upwind Engquist-Osher step at interior points, loss ``Σ (u_T - z)²``,
gradient wrt ``u0`` and ``c``), compiled without fastmath as tensorlang's
kernels are, timed interleaved with tensorlang's primal and gradient (one
thread, CPU-time medians, wall medians beside them):

* ``primal``: two buffers, the flux rolled in scalars (one pass per step);
* ``grad_3pass``: forward sweep into a preallocated ``(T + 1, n)`` store,
  then per reverse step the three passes tensorlang's reverse kernel makes
  today: the flux into a temporary, the ``c̄`` reduction
  ``-Σ λ_i (F_i - F_{i-1})`` over it, the cotangent update;
* ``grad_2pass``: the flux computed in the reduction's loop (at both
  shifts, four accumulators), then the update: two passes;
* ``grad_fused``: the same forward sweep, one pass per reverse step: flux
  and ``γ_j = c (λ_{j+1}[j+1 interior] - λ_j[j interior])`` rolled in
  scalars, the reduction accumulated in the update loop;
* ``grad_fused4``: ``grad_fused`` with the reduction in four accumulators
  over the loop unrolled by four (without fastmath one accumulator is a
  chain of dependent adds);
* ``grad_chunked``: one pass in chunks of 256 points, the update loop
  vectorizable (no carried scalar) writing each point's c̄ term to an L1
  buffer summed by four accumulators;
* the sweeps alone (``fwd_only``, ``rev_3pass_only``, ``rev_fused_only``).

Every gradient is checked against tensorlang's ``tl.grad`` to 1e-12 relative.

    python -m benchmarks.probes_burgers [--n 1000000] [--T 100] [--repeat 9]
"""

from __future__ import annotations

import argparse

import numpy as np

import numba

from .probe_table import print_table

_OPTS = dict(nogil=True, error_model="numpy", boundscheck=False)


@numba.njit(inline="always", **_OPTS)
def _f(a, b):
    """F between points with values a (left) and b (right)."""
    p = max(a, 0.0)
    m = min(b, 0.0)
    return 0.5 * (p * p) + 0.5 * (m * m)


@numba.njit(**_OPTS)
def _step(u, v, c):
    n = u.shape[0]
    v[0] = u[0]
    v[n - 1] = u[n - 1]
    fl = _f(u[0], u[1])
    for i in range(1, n - 1):
        fr = _f(u[i], u[i + 1])
        v[i] = u[i] - c * (fr - fl)
        fl = fr


@numba.njit(**_OPTS)
def primal(u0, z, c, T, a, b):
    a[:] = u0
    for _ in range(T):
        _step(a, b, c)
        a, b = b, a
    s = 0.0
    for i in range(a.shape[0]):
        d = a[i] - z[i]
        s += d * d
    return s


@numba.njit(**_OPTS)
def forward_all(u0, c, T, S):
    S[0, :] = u0
    for t in range(T):
        _step(S[t], S[t + 1], c)


@numba.njit(**_OPTS)
def _seed(z, T, S, g):
    for i in range(g.shape[0]):
        g[i] = 2.0 * (S[T, i] - z[i])


@numba.njit(**_OPTS)
def reverse_3pass(z, c, T, S, g, gn, F):
    n = z.shape[0]
    _seed(z, T, S, g)
    dc = 0.0
    for t in range(T - 1, -1, -1):
        u = S[t]
        for j in range(n - 1):
            F[j] = _f(u[j], u[j + 1])
        s0 = s1 = s2 = s3 = 0.0
        i = 1
        while i + 4 <= n - 1:
            s0 += -g[i] * (F[i] - F[i - 1])
            s1 += -g[i + 1] * (F[i + 1] - F[i])
            s2 += -g[i + 2] * (F[i + 2] - F[i + 1])
            s3 += -g[i + 3] * (F[i + 3] - F[i + 2])
            i += 4
        while i < n - 1:
            s0 += -g[i] * (F[i] - F[i - 1])
            i += 1
        dc += s0 + (s1 + s2 + s3)
        _update(g, gn, u, c, n)
        g, gn = gn, g
    return dc


@numba.njit(inline="always", **_OPTS)
def _gamma(g, j, c, n):
    """c̄ of F_j: -c λ_j [1 <= j <= n-2] + c λ_{j+1} [1 <= j+1 <= n-2]."""
    r = 0.0
    if 1 <= j <= n - 2:
        r -= c * g[j]
    if 1 <= j + 1 <= n - 2:
        r += c * g[j + 1]
    return r


@numba.njit(inline="always", **_OPTS)
def _borders(g, gn, u, c, n):
    """The adjoint step at the two border points (i = 0, n - 1): their upwind
    terms exist only on the side that has a neighbour."""
    for i in (0, n - 1):
        m = g[i]
        if i <= n - 2:
            m += _gamma(g, i, c, n) * max(u[i], 0.0)
        if i >= 1:
            m += _gamma(g, i - 1, c, n) * min(u[i], 0.0)
        gn[i] = m


@numba.njit(**_OPTS)
def _update(g, gn, u, c, n):
    """μ_i = λ_i + γ_i max(u_i, 0) [i <= n-2] + γ_{i-1} min(u_i, 0) [i >= 1]."""
    _borders(g, gn, u, c, n)
    gl = _gamma(g, 0, c, n)
    for i in range(1, n - 1):
        gr = c * (g[i + 1] - g[i]) if i + 1 <= n - 2 else -c * g[i]
        gn[i] = g[i] + gr * max(u[i], 0.0) + gl * min(u[i], 0.0)
        gl = gr


@numba.njit(**_OPTS)
def reverse_fused(z, c, T, S, g, gn):
    n = z.shape[0]
    _seed(z, T, S, g)
    dc = 0.0
    for t in range(T - 1, -1, -1):
        u = S[t]
        _borders(g, gn, u, c, n)
        gl = _gamma(g, 0, c, n)
        fl = _f(u[0], u[1])
        s = 0.0
        for i in range(1, n - 1):
            ui, gi = u[i], g[i]
            fr = _f(ui, u[i + 1])
            s += -gi * (fr - fl)
            gr = c * (g[i + 1] - gi) if i + 1 <= n - 2 else -c * gi
            gn[i] = gi + gr * max(ui, 0.0) + gl * min(ui, 0.0)
            gl, fl = gr, fr
        dc += s
        g, gn = gn, g
    return dc


@numba.njit(inline="always", **_OPTS)
def _point(u, g, gn, i, c, gl, fl):
    """One interior point of the fused adjoint step (i + 1 <= n - 2):
    (its c̄ term, γ_i, F_i)."""
    ui, gi = u[i], g[i]
    fr = _f(ui, u[i + 1])
    gr = c * (g[i + 1] - gi)
    gn[i] = gi + gr * max(ui, 0.0) + gl * min(ui, 0.0)
    return -gi * (fr - fl), gr, fr


@numba.njit(**_OPTS)
def reverse_fused4(z, c, T, S, g, gn):
    """reverse_fused with the c̄ reduction in four accumulators (as
    tensorlang's reductions: no fastmath, so one accumulator is a chain of
    dependent adds) over the loop unrolled by four."""
    n = z.shape[0]
    _seed(z, T, S, g)
    dc = 0.0
    for t in range(T - 1, -1, -1):
        u = S[t]
        _borders(g, gn, u, c, n)
        gl = _gamma(g, 0, c, n)
        fl = _f(u[0], u[1])
        s0 = s1 = s2 = s3 = 0.0
        i = 1
        while i + 4 <= n - 2:
            d, gl, fl = _point(u, g, gn, i, c, gl, fl)
            s0 += d
            d, gl, fl = _point(u, g, gn, i + 1, c, gl, fl)
            s1 += d
            d, gl, fl = _point(u, g, gn, i + 2, c, gl, fl)
            s2 += d
            d, gl, fl = _point(u, g, gn, i + 3, c, gl, fl)
            s3 += d
            i += 4
        while i < n - 1:
            ui, gi = u[i], g[i]
            fr = _f(ui, u[i + 1])
            s0 += -gi * (fr - fl)
            gr = c * (g[i + 1] - gi) if i + 1 <= n - 2 else -c * gi
            gn[i] = gi + gr * max(ui, 0.0) + gl * min(ui, 0.0)
            gl, fl = gr, fr
            i += 1
        dc += s0 + (s1 + s2 + s3)
        g, gn = gn, g
    return dc


@numba.njit(**_OPTS)
def reverse_chunked(z, c, T, S, g, gn, hot, B=256):
    """One pass per reverse step in chunks of ``B`` points: the update loop
    (vectorizable: γ and F recomputed at both shifts, no carried scalar)
    writes each point's c̄ term into an L1 buffer, which four accumulators
    then sum; ``hot``: every step reads u_0 (in cache after the first)."""
    n = z.shape[0]
    _seed(z, T, S, g)
    dc = 0.0
    buf = np.empty(B)
    for t in range(T - 1, -1, -1):
        u = S[0] if hot else S[t]
        _borders(g, gn, u, c, n)
        s0 = s1 = s2 = s3 = 0.0
        lo = 1
        hi_main = n - 2  # points 1 .. n-3 have i + 1 <= n - 2
        while lo < hi_main:
            hi = min(lo + B, hi_main)
            for i in range(lo, hi):
                ui, gi = u[i], g[i]
                buf[i - lo] = -gi * (_f(ui, u[i + 1]) - _f(u[i - 1], ui))
                gr = c * (g[i + 1] - gi)
                gl = c * g[i] - (c * g[i - 1] if i >= 2 else 0.0)
                gn[i] = gi + gr * max(ui, 0.0) + gl * min(ui, 0.0)
            k = 0
            m = hi - lo
            while k + 4 <= m:
                s0 += buf[k]
                s1 += buf[k + 1]
                s2 += buf[k + 2]
                s3 += buf[k + 3]
                k += 4
            while k < m:
                s0 += buf[k]
                k += 1
            lo = hi
        if n >= 3:
            i = n - 2
            ui, gi = u[i], g[i]
            s0 += -gi * (_f(ui, u[i + 1]) - _f(u[i - 1], ui))
            gl = c * g[i] - (c * g[i - 1] if i >= 2 else 0.0)
            gn[i] = gi + (-c * gi) * max(ui, 0.0) + gl * min(ui, 0.0)
        dc += s0 + (s1 + s2 + s3)
        g, gn = gn, g
    return dc


@numba.njit(**_OPTS)
def reverse_2pass(z, c, T, S, g, gn, F):
    """reverse_3pass with the flux computed inside the reduction's loop (at
    both shifts, four accumulators) instead of into a temporary: two passes."""
    n = z.shape[0]
    _seed(z, T, S, g)
    dc = 0.0
    for t in range(T - 1, -1, -1):
        u = S[t]
        s0 = s1 = s2 = s3 = 0.0
        i = 1
        while i + 4 <= n - 1:
            s0 += -g[i] * (_f(u[i], u[i + 1]) - _f(u[i - 1], u[i]))
            s1 += -g[i + 1] * (_f(u[i + 1], u[i + 2]) - _f(u[i], u[i + 1]))
            s2 += -g[i + 2] * (_f(u[i + 2], u[i + 3]) - _f(u[i + 1], u[i + 2]))
            s3 += -g[i + 3] * (_f(u[i + 3], u[i + 4]) - _f(u[i + 2], u[i + 3]))
            i += 4
        while i < n - 1:
            s0 += -g[i] * (_f(u[i], u[i + 1]) - _f(u[i - 1], u[i]))
            i += 1
        dc += s0 + (s1 + s2 + s3)
        _update(g, gn, u, c, n)
        g, gn = gn, g
    return dc


REVERSES = ("grad_3pass", "grad_2pass", "grad_fused", "grad_fused4", "grad_chunked")


def _run(name, u, z, c, T, bufs):
    S, g, gn, F = bufs
    forward_all(u, c, T, S)
    if name == "grad_3pass":
        gc = reverse_3pass(z, c, T, S, g, gn, F)
    elif name == "grad_2pass":
        gc = reverse_2pass(z, c, T, S, g, gn, F)
    elif name == "grad_fused":
        gc = reverse_fused(z, c, T, S, g, gn)
    elif name == "grad_fused4":
        gc = reverse_fused4(z, c, T, S, g, gn)
    else:
        gc = reverse_chunked(z, c, T, S, g, gn, False)
    return (g if T % 2 == 0 else gn), gc


def gradients(d, bufs=None):
    """(name, (λ_0, c̄)) of every hand gradient (copies: they share ``bufs``)."""
    n, T = d["u0"].shape[0], int(d["T"])
    bufs = bufs or (np.zeros((T + 1, n)), np.zeros(n), np.zeros(n), np.zeros(n))
    for name in REVERSES:
        gu, gc = _run(name, d["u0"], d["z"], float(d["c"]), T, bufs)
        yield name, (gu.copy(), float(gc))


def main(argv=None) -> None:
    import tensorlang as tl

    from .burgers_loop import data, program

    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes_burgers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--T", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    numba.set_num_threads(1)  # one thread: tensorlang's parallel kernels too
    n, T = args.n, args.T
    d = data({"n": n, "T": T}, np.random.default_rng(0))
    d["c"] = float(d["c"])
    loss, ins = program("T", "all")
    f = tl.compile(loss)
    gr = tl.grad(loss, wrt=[ins["u0"], ins["c"]])
    want_u, want_c = gr(**d)
    want_c = float(want_c)
    S = np.zeros((T + 1, n))
    a, b, g, gn, F = (np.zeros(n) for _ in range(5))
    u, c, z = d["u0"], d["c"], d["z"]

    bufs = (S, g, gn, F)

    def grad(name):
        return _run(name, u, z, c, T, bufs)

    lp = primal(u, z, c, T, a, b)
    assert abs(lp - float(f(**d))) <= 1e-12 * abs(lp), "hand primal differs from tensorlang's"
    err = 0.0
    for name, (gu, gc) in gradients(d, bufs):
        eu = np.abs(gu - want_u).max() / np.abs(want_u).max()
        ec = abs(gc - want_c) / abs(want_c)
        assert eu < 1e-12 and ec < 1e-12, f"{name}: relative errors u0 {eu:.2e}, c {ec:.2e}"
        err = max(err, eu, ec)
    methods = {
        "tl_primal": lambda: f(**d),
        "tl_grad": lambda: gr(**d),
        "primal": lambda: primal(u, z, c, T, a, b),
        "grad_3pass": lambda: grad("grad_3pass"),
        "grad_2pass": lambda: grad("grad_2pass"),
        "grad_fused": lambda: grad("grad_fused"),
        "grad_fused4": lambda: grad("grad_fused4"),
        "grad_chunked": lambda: grad("grad_chunked"),
        "fwd_only": lambda: forward_all(u, c, T, S),
        "rev_3pass_only": lambda: reverse_3pass(z, c, T, S, g, gn, F),
        "rev_2pass_only": lambda: reverse_2pass(z, c, T, S, g, gn, F),
        "rev_fused_only": lambda: reverse_fused(z, c, T, S, g, gn),
        "rev_fused4_only": lambda: reverse_fused4(z, c, T, S, g, gn),
        "rev_chunked_only": lambda: reverse_chunked(z, c, T, S, g, gn, False),
        "rev_chunked_hot": lambda: reverse_chunked(z, c, T, S, g, gn, True),
    }
    print_table(methods, args.repeat, n, T, err)


if __name__ == "__main__":
    main()
