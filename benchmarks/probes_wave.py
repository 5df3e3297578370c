"""Machine-limit probes for the wave equation's gradient (issue #17, "more
workloads"), as ``probes_heat`` does for the heat equation.

Hand-written Numba kernels for ``benchmarks/wave.py``'s program (state
``(u_{t-1}, u_t)``, step ``u_{t+1} = 2 u_t - u_{t-1} + c² L u_t``, loss
``Σ (u_T - z)²``, gradient wrt ``u0`` and ``c²``), no fastmath, timed
interleaved with tensorlang's primal and gradient (one thread, CPU-time
medians, wall medians beside them):

* ``primal``: three rotating buffers, one sweep per step;
* ``grad_all``: the forward sweep storing every ``u_t`` once (the pair's
  first leaf is the previous step's second), then per reverse step one sweep:
  with the cotangents ``(a, b)`` of ``(u_{t-1}, u_t)`` the transposed step is
  ``(a, b) <- (-b, a + 2 b + c² L b)`` and ``c̄² += <L b, u_t>``; ``a`` is
  always ``-b`` of the step before, so one array rotation carries it
  (``b' = 2 b - b_prev + c² L b``: the primal's sweep plus the stored state);
* ``rev_hot``: that reverse sweep reading ``u_0`` at every step (in cache);
  ``fwd_only``, ``rev_only``: the sweeps alone;
* ``tl_grad_unsigned``: tensorlang's gradient without signed cotangent
  leaves (``backend/step_signs.py`` off: ``-b`` written every reverse step).

Every gradient is checked against tensorlang's ``tl.grad`` to 1e-12 relative.

    python -m benchmarks.probes_wave [--n 256] [--T 1000] [--repeat 9]
"""

from __future__ import annotations

import argparse

import numpy as np

import numba

from .probe_table import print_table

from .probes_heat import _OPTS, copy_store, read_states, sq_dist


@numba.njit(inline="always", **_OPTS)
def _wave_row(up, c, dn, prev, dst, n, c2):
    dst[0] = 2.0 * c[0] - prev[0] + c2 * (up[0] + dn[0] + c[1] - 4.0 * c[0])
    for j in range(1, n - 1):
        dst[j] = 2.0 * c[j] - prev[j] + c2 * (up[j] + dn[j] + c[j - 1] + c[j + 1] - 4.0 * c[j])
    dst[n - 1] = 2.0 * c[n - 1] - prev[n - 1] + c2 * (up[n - 1] + dn[n - 1] + c[n - 2] - 4.0 * c[n - 1])


@numba.njit(**_OPTS)
def _wave_step(prev, cur, dst, c2, zero):
    n = cur.shape[0]
    for i in range(n):
        _wave_row(cur[i - 1] if i >= 1 else zero, cur[i], cur[i + 1] if i + 1 < n else zero, prev[i], dst[i], n, c2)


@numba.njit(**_OPTS)
def primal(u0, z, c2, T, a, b, e):
    zero = np.zeros(u0.shape[1])
    a[:, :] = u0
    b[:, :] = u0
    for _ in range(T):
        _wave_step(a, b, e, c2, zero)
        a, b, e = b, e, a
    return sq_dist(b, z)


@numba.njit(**_OPTS)
def forward_all(u0, c2, T, S):
    """S[t + 1] = u_t for t = 0..T, S[0] = u_{-1} = u0 (the pair starts at rest)."""
    zero = np.zeros(u0.shape[1])
    S[0, :, :] = u0
    S[1, :, :] = u0
    for t in range(T):
        _wave_step(S[t], S[t + 1], S[t + 2], c2, zero)


@numba.njit(**_OPTS)
def reverse_all(z, c2, T, S, bp, b, bn, hot):
    """Cotangent b of u_T seeded, a = 0 (as b_prev = 0); each step reads the
    stored u_t; returns c̄² (λ_{u0} = a + b = b - b_prev in ``b``, ``bp``)."""
    n = z.shape[0]
    zero, acc = np.zeros(n), np.zeros(n)
    for i in range(n):
        for j in range(n):
            b[i, j] = 2.0 * (S[T + 1, i, j] - z[i, j])
            bp[i, j] = 0.0
    for t in range(T - 1, -1, -1):
        u = S[1] if hot else S[t + 1]
        for i in range(n):
            up = b[i - 1] if i >= 1 else zero
            dn = b[i + 1] if i + 1 < n else zero
            c, p, d, ui = b[i], bp[i], bn[i], u[i]
            l = up[0] + dn[0] + c[1] - 4.0 * c[0]
            acc[0] += l * ui[0]
            d[0] = 2.0 * c[0] - p[0] + c2 * l
            for j in range(1, n - 1):
                l = up[j] + dn[j] + c[j - 1] + c[j + 1] - 4.0 * c[j]
                acc[j] += l * ui[j]
                d[j] = 2.0 * c[j] - p[j] + c2 * l
            l = up[n - 1] + dn[n - 1] + c[n - 2] - 4.0 * c[n - 1]
            acc[n - 1] += l * ui[n - 1]
            d[n - 1] = 2.0 * c[n - 1] - p[n - 1] + c2 * l
        bp, b, bn = b, bn, bp
    for i in range(n):  # λ_{u0} = a + b with a = -b_prev; into the buffer bn (the oldest)
        for j in range(n):
            bn[i, j] = b[i, j] - bp[i, j]
    return acc.sum(), bn


def gradient(d, bufs=None):
    """(λ_{u0}, c̄²) by the hand kernels."""
    n, T = d["u0"].shape[0], int(d["T"])
    S, bp, b, bn = bufs or (np.zeros((T + 2, n, n)), np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n)))
    forward_all(d["u0"], float(d["c2"]), T, S)
    gc, out = reverse_all(d["z"], float(d["c2"]), T, S, bp, b, bn, False)
    return out.copy(), float(gc)


def main(argv=None) -> None:
    import tensorlang as tl

    from .wave import data, program

    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes_wave", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    numba.set_num_threads(1)  # one thread: tensorlang's parallel kernels too
    n, T = args.n, args.T
    d = data({"n": n, "T": T}, np.random.default_rng(0))
    d["c2"] = float(d["c2"])
    loss, ins = program("T", "all")
    f = tl.compile(loss)
    gr = tl.grad(loss, wrt=[ins["u0"], ins["c2"]])
    want_u, want_c = gr(**d)
    # tensorlang's reverse step writing -b as an array (no signed cotangent leaves: the A/B of session 12)
    from tensorlang.backend import step_signs

    step_signs.ENABLED = False
    try:
        gr_old = tl.grad(loss, wrt=[ins["u0"], ins["c2"]])
        old_u, old_c = gr_old(**d)
    finally:
        step_signs.ENABLED = True
    assert not gr_old.loop_program._signs  # (T < loop_kernel.DRIVER_MIN_STEPS: neither runs a step program)
    assert np.array_equal(old_u, want_u) and old_c == want_c, "signed cotangent leaves changed the gradient"
    S = np.zeros((T + 2, n, n))
    a, b, e, bp, bb, bn = (np.zeros((n, n)) for _ in range(6))
    u, c2, z = d["u0"], d["c2"], d["z"]
    lp = primal(u, z, c2, T, a, b, e)
    assert abs(lp - float(f(**d))) <= 1e-12 * abs(lp), "hand primal differs from tensorlang's"
    gu, gc = gradient(d, (S, bp, bb, bn))
    err = max(np.abs(gu - want_u).max() / np.abs(want_u).max(), abs(gc - float(want_c)) / abs(float(want_c)))
    assert err < 1e-12, f"hand gradient differs from tl.grad by {err:.2e}"
    methods = {
        "tl_primal": lambda: f(**d),
        "tl_grad": lambda: gr(**d),
        "tl_grad_unsigned": lambda: gr_old(**d),
        "primal": lambda: primal(u, z, c2, T, a, b, e),
        "grad_all": lambda: gradient(d, (S, bp, bb, bn)),
        "fwd_only": lambda: forward_all(u, c2, T, S),
        "copy_store": lambda: copy_store(u, T, S),
        "read_states": lambda: read_states(T, S),
        "rev_only": lambda: reverse_all(z, c2, T, S, bp, bb, bn, False),
        "rev_hot": lambda: reverse_all(z, c2, T, S, bp, bb, bn, True),
    }
    print_table(methods, args.repeat, n, T, err)


if __name__ == "__main__":
    main()
