"""Machine-limit probes for the heat gradient (issue #17, goal "gradient <= 3x
the primal with checkpoint='all'").

Hand-written Numba kernels for ``benchmarks/heat.py``'s program (5-point
explicit step ``u + κ L u`` with zero boundaries, loss ``Σ (u_T - z)²``,
gradient wrt ``u0`` and ``κ``), compiled with the flags tensorlang's kernels
use (no fastmath), timed in one process, interleaved round-robin with
tensorlang's primal and gradient so that all see the same load:

* ``primal``: two buffers, one sweep per step (the floor for the primal);
* ``grad_all``: forward sweep writing every state ``u_t`` into its slot of a
  preallocated ``(T + 1, n, n)`` store (reused across calls, as tensorlang's
  checkpoint buffers are), then one reverse sweep per step: ``Lλ`` (L is
  symmetric, so ``Lᵀλ = Lλ``), ``κ̄ += <Lλ, u_t>``, ``λ ← λ + κ Lλ``;
* ``grad_blocked<m>``: the same forward sweep, reverse sweep temporally
  blocked: ``m`` adjoint steps per sweep over rows, skewed by one row per
  level (level ``l`` computes row ``r - l + 1`` when level 0 computes row
  ``r``), the intermediate cotangents in rings of three rows, the last level
  written in place into the cotangent it reads (its row ``r - m + 1`` is no
  longer read by level 1, which is at row ``r``);
* ``grad_fused`` / ``grad_ix``: the reverse row's stencil, κ̄ term and
  update in one loop, over row views / by 2-D index; ``grad_blocked2_ix``:
  the by-index row code, two adjoint steps per sweep (the control for
  blocking is ``grad_ix``, the same row code unblocked);
* ``grad_nt``: the forward sweep double-buffered in cache with each new row
  copied to its slot by 32-byte non-temporal stores (no read-for-ownership
  of the slot's lines), then ``reverse_fused``;
* the sweeps alone: ``fwd_only``, ``fwd_nt_only``, ``rev_*_only``; and
  ``rev_*_hot``: the reverse sweep reading ``u_0`` at every step (in cache:
  the same operations, wrong values), whose difference from ``rev_*_only``
  is the stored states' memory traffic;
* floors: ``copy_store`` / ``copy_store_nt`` (writing T states, copies of
  ``u0``, with ordinary / non-temporal stores) and ``read_states`` (summing
  the T stored states): the DRAM traffic of any ``"all"`` gradient.

Times are CPU-time medians (one thread: the time slices the 2-core machine
gives to other processes do not count) with wall medians beside them.
Every gradient is checked against tensorlang's ``tl.grad`` to 1e-12 relative.

    python -m benchmarks.probes_heat [--n 256] [--T 1000] [--repeat 9]
"""

from __future__ import annotations

import argparse

import numpy as np

import numba
import numba.extending

from .probe_table import print_table

_OPTS = dict(nogil=True, error_model="numpy", boundscheck=False)


@numba.njit(inline="always", **_OPTS)
def _lap_row(up, c, dn, out, n):
    """``out = (L c)`` of one row given the rows above and below (zero rows at
    the boundary): Σ neighbours - 4 c."""
    out[0] = up[0] + dn[0] + c[1] - 4.0 * c[0]
    for j in range(1, n - 1):
        out[j] = up[j] + dn[j] + c[j - 1] + c[j + 1] - 4.0 * c[j]
    out[n - 1] = up[n - 1] + dn[n - 1] + c[n - 2] - 4.0 * c[n - 1]


@numba.njit(inline="always", **_OPTS)
def _step_row(up, c, dn, dst, n, kappa):
    dst[0] = c[0] + kappa * (up[0] + dn[0] + c[1] - 4.0 * c[0])
    for j in range(1, n - 1):
        dst[j] = c[j] + kappa * (up[j] + dn[j] + c[j - 1] + c[j + 1] - 4.0 * c[j])
    dst[n - 1] = c[n - 1] + kappa * (up[n - 1] + dn[n - 1] + c[n - 2] - 4.0 * c[n - 1])


@numba.njit(**_OPTS)
def _step(src, dst, kappa, zero):
    n = src.shape[0]
    for i in range(n):
        up = src[i - 1] if i >= 1 else zero
        dn = src[i + 1] if i + 1 < n else zero
        _step_row(up, src[i], dn, dst[i], n, kappa)


@numba.njit(**_OPTS)
def sq_dist(a, z):
    """The loss ||a - z||² (heat's and the wave's)."""
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            d = a[i, j] - z[i, j]
            s += d * d
    return s


@numba.njit(inline="always", **_OPTS)
def _seed(g, uT, z):
    """λ_T = 2 (u_T - z), the loss's cotangent."""
    for i in range(g.shape[0]):
        for j in range(g.shape[1]):
            g[i, j] = 2.0 * (uT[i, j] - z[i, j])


@numba.njit(**_OPTS)
def primal(u0, z, kappa, T, a, b):
    zero = np.zeros(u0.shape[1])
    a[:, :] = u0
    for _ in range(T):
        _step(a, b, kappa, zero)
        a, b = b, a
    return sq_dist(a, z)


@numba.njit(**_OPTS)
def forward_all(u0, kappa, T, S):
    """S[t] = u_t for t = 0..T."""
    zero = np.zeros(u0.shape[1])
    S[0, :, :] = u0
    for t in range(T):
        _step(S[t], S[t + 1], kappa, zero)


@numba.njit(**_OPTS)
def _rev_step(g, gn, u, kappa, lg, acc, zero):
    """gn = g + κ L g; acc += L g * u (per column, summed at the end)."""
    n = g.shape[0]
    for i in range(n):
        up = g[i - 1] if i >= 1 else zero
        dn = g[i + 1] if i + 1 < n else zero
        _lap_row(up, g[i], dn, lg, n)
        ui, gi, gni = u[i], g[i], gn[i]
        for j in range(n):
            acc[j] += lg[j] * ui[j]
            gni[j] = gi[j] + kappa * lg[j]


@numba.njit(inline="always", **_OPTS)
def _adj_row(up, c, dn, u, dst, acc, n, kappa):
    """One row of the adjoint step, fused: l = (L λ)[j]; acc += l u; dst = λ + κ l."""
    l = up[0] + dn[0] + c[1] - 4.0 * c[0]
    acc[0] += l * u[0]
    dst[0] = c[0] + kappa * l
    for j in range(1, n - 1):
        l = up[j] + dn[j] + c[j - 1] + c[j + 1] - 4.0 * c[j]
        acc[j] += l * u[j]
        dst[j] = c[j] + kappa * l
    l = up[n - 1] + dn[n - 1] + c[n - 2] - 4.0 * c[n - 1]
    acc[n - 1] += l * u[n - 1]
    dst[n - 1] = c[n - 1] + kappa * l


@numba.njit(**_OPTS)
def reverse_fused(z, kappa, T, S, g, gn, hot):
    """reverse_all with the row's stencil, κ̄ term and update in one loop (no temporary row)."""
    n = z.shape[0]
    zero, acc = np.zeros(n), np.zeros(n)
    _seed(g, S[T], z)
    for t in range(T - 1, -1, -1):
        u = S[0] if hot else S[t]
        for i in range(n):
            _adj_row(g[i - 1] if i >= 1 else zero, g[i], g[i + 1] if i + 1 < n else zero, u[i], gn[i], acc, n, kappa)
        g, gn = gn, g
    return acc.sum()


@numba.njit(inline="always", **_OPTS)
def _adj_row_ix(g, i, dst, u, acc, n, kappa):
    """_adj_row on row ``i`` of ``g`` by index (no row views), ``dst`` and ``u`` rows;
    the interior rows' loop has no boundary test."""
    if i == 0 or i == n - 1:
        for j in range(n):
            l = -4.0 * g[i, j]
            if i >= 1:
                l += g[i - 1, j]
            if i + 1 < n:
                l += g[i + 1, j]
            if j >= 1:
                l += g[i, j - 1]
            if j + 1 < n:
                l += g[i, j + 1]
            acc[j] += l * u[j]
            dst[j] = g[i, j] + kappa * l
        return
    l = g[i - 1, 0] + g[i + 1, 0] + g[i, 1] - 4.0 * g[i, 0]
    acc[0] += l * u[0]
    dst[0] = g[i, 0] + kappa * l
    for j in range(1, n - 1):
        l = g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1] - 4.0 * g[i, j]
        acc[j] += l * u[j]
        dst[j] = g[i, j] + kappa * l
    l = g[i - 1, n - 1] + g[i + 1, n - 1] + g[i, n - 2] - 4.0 * g[i, n - 1]
    acc[n - 1] += l * u[n - 1]
    dst[n - 1] = g[i, n - 1] + kappa * l


@numba.njit(**_OPTS)
def reverse_ix(z, kappa, T, S, g, gn, hot):
    """reverse_fused by index."""
    n = z.shape[0]
    acc = np.zeros(n)
    _seed(g, S[T], z)
    for t in range(T - 1, -1, -1):
        u = S[0] if hot else S[t]
        for i in range(n):
            _adj_row_ix(g, i, gn[i], u[i], acc, n, kappa)
        g, gn = gn, g
    return acc.sum()


@numba.njit(**_OPTS)
def reverse_blocked2_ix(z, kappa, T, S, g, gn, hot):
    """reverse_blocked2 by index: λ_{t-1} row r into gn, λ_{t-2} row r-1 back into g."""
    n = z.shape[0]
    acc = np.zeros(n)
    _seed(g, S[T], z)
    t = T
    while t >= 2:
        u1 = S[0] if hot else S[t - 1]
        u2 = S[0] if hot else S[t - 2]
        _adj_row_ix(g, 0, gn[0], u1[0], acc, n, kappa)
        for r in range(1, n):
            _adj_row_ix(g, r, gn[r], u1[r], acc, n, kappa)
            _adj_row_ix(gn, r - 1, g[r - 1], u2[r - 1], acc, n, kappa)
        _adj_row_ix(gn, n - 1, g[n - 1], u2[n - 1], acc, n, kappa)
        t -= 2
    if t == 1:
        for i in range(n):
            _adj_row_ix(g, i, gn[i], S[0, i], acc, n, kappa)
        g[:, :] = gn
    return acc.sum()


@numba.njit(**_OPTS)
def read_states(T, S):
    """Σ over the T stored states: the DRAM read floor of the reverse sweep."""
    s = np.zeros(S.shape[2])
    for t in range(T):
        for i in range(S.shape[1]):
            for j in range(S.shape[2]):
                s[j] += S[t, i, j]
    return s.sum()


@numba.njit(**_OPTS)
def reverse_all(z, kappa, T, S, g, gn, hot):
    """λ_T = 2 (u_T - z); T plain adjoint steps; returns κ̄ (λ_0 in g or gn)."""
    n = z.shape[0]
    zero, lg, acc = np.zeros(n), np.empty(n), np.zeros(n)
    _seed(g, S[T], z)
    for t in range(T - 1, -1, -1):
        _rev_step(g, gn, S[0] if hot else S[t], kappa, lg, acc, zero)
        g, gn = gn, g
    return acc.sum()


@numba.njit(**_OPTS)
def reverse_blocked(z, kappa, T, S, g, m):
    """``m`` adjoint steps per sweep over rows, skewed by one row per level;
    λ in place in ``g`` (returned in it), κ̄ returned."""
    n = z.shape[0]
    zero, lg, acc = np.zeros(n), np.empty(n), np.zeros(n)
    ring = np.zeros((max(m - 1, 1), 3, n))  # level l (1..m-1) keeps rows r-1, r, r+1 of λ_{t+1-l}
    _seed(g, S[T], z)
    t = T  # g holds λ_t
    while t >= m:
        # level l (0-based) produces λ_{t-1-l} from λ_{t-l} with u_{t-1-l}
        for r in range(n + m - 1):
            for lev in range(m):
                row = r - lev
                if row < 0 or row >= n:
                    continue
                if lev == 0:
                    up = g[row - 1] if row >= 1 else zero
                    c = g[row]
                    dn = g[row + 1] if row + 1 < n else zero
                else:
                    R = ring[lev - 1]
                    up = R[(row - 1) % 3] if row >= 1 else zero
                    c = R[row % 3]
                    dn = R[(row + 1) % 3] if row + 1 < n else zero
                _lap_row(up, c, dn, lg, n)
                ui = S[t - 1 - lev, row]
                dst = g[row] if lev == m - 1 else ring[lev, row % 3]
                for j in range(n):
                    acc[j] += lg[j] * ui[j]
                    dst[j] = c[j] + kappa * lg[j]
        t -= m
    gn = np.empty_like(g)
    while t > 0:
        _rev_step(g, gn, S[t - 1], kappa, lg, acc, zero)
        g[:, :] = gn
        t -= 1
    return acc.sum()


@numba.extending.intrinsic
def _nt_store4(typingctx, a, i, v0, v1, v2, v3):
    """a[i:i+4] = (v0..v3) as one 32-byte non-temporal store (vmovntpd):
    the line is written to memory without being read first (no
    read-for-ownership); ``a`` a C-contiguous float64 row, ``a[i]`` 32-byte aligned."""
    from llvmlite import ir
    from numba.core import cgutils
    from numba.core.typing import signature

    def codegen(context, builder, sig, args):
        arr = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(arr.data, [args[1]])
        vty = ir.VectorType(ir.DoubleType(), 4)
        vec = ir.Constant(vty, ir.Undefined)
        for k in range(4):
            vec = builder.insert_element(vec, args[2 + k], ir.Constant(ir.IntType(32), k))
        st = builder.store(vec, builder.bitcast(ptr, vty.as_pointer()), align=32)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    del cgutils
    return signature(numba.types.none, a, i, v0, v1, v2, v3), codegen


@numba.njit(**_OPTS)
def _nt_copy_row(src, dst):
    for j in range(0, src.shape[0], 4):
        _nt_store4(dst, j, src[j], src[j + 1], src[j + 2], src[j + 3])


@numba.njit(**_OPTS)
def copy_store_nt(u0, T, S):
    for t in range(T):
        for i in range(u0.shape[0]):
            _nt_copy_row(u0[i], S[t + 1, i])


@numba.njit(**_OPTS)
def forward_nt(u0, kappa, T, S, a, b):
    """forward_all with the state double-buffered in cache (a, b) and each new
    row copied to its slot with non-temporal stores."""
    n = u0.shape[0]
    zero = np.zeros(n)
    a[:, :] = u0
    S[0, :, :] = u0
    for t in range(T):
        for i in range(n):
            _step_row(a[i - 1] if i >= 1 else zero, a[i], a[i + 1] if i + 1 < n else zero, b[i], n, kappa)
            _nt_copy_row(b[i], S[t + 1, i])
        a, b = b, a


@numba.njit(**_OPTS)
def copy_store(u0, T, S):
    for t in range(T):
        S[t + 1, :, :] = u0


def _aligned_empty(shape, align=64):
    """float64 array whose data starts on an ``align``-byte boundary."""
    size = int(np.prod(shape))
    raw = np.empty(size + align // 8)
    off = (-raw.ctypes.data % align) // 8
    return raw[off:off + size].reshape(shape)


def _grad_all(d, S, g, gn, hot=False):
    forward_all(d["u0"], d["kappa"], d["T"], S)
    gk = reverse_all(d["z"], d["kappa"], d["T"], S, g, gn, hot)
    return (g if d["T"] % 2 == 0 else gn), gk


def _grad_fused(d, S, g, gn):
    forward_all(d["u0"], d["kappa"], d["T"], S)
    gk = reverse_fused(d["z"], d["kappa"], d["T"], S, g, gn, False)
    return (g if d["T"] % 2 == 0 else gn), gk


def _grad_nt(d, S, g, gn, a, b):
    forward_nt(d["u0"], d["kappa"], d["T"], S, a, b)
    gk = reverse_fused(d["z"], d["kappa"], d["T"], S, g, gn, False)
    return (g if d["T"] % 2 == 0 else gn), gk


def _grad_ix(d, S, g, gn, blocked):
    forward_all(d["u0"], d["kappa"], d["T"], S)
    if blocked:
        return g, reverse_blocked2_ix(d["z"], d["kappa"], d["T"], S, g, gn, False)
    gk = reverse_ix(d["z"], d["kappa"], d["T"], S, g, gn, False)
    return (g if d["T"] % 2 == 0 else gn), gk


def _grad_blocked(d, S, g, m):
    forward_all(d["u0"], d["kappa"], d["T"], S)
    gk = reverse_blocked(d["z"], d["kappa"], d["T"], S, g, m)
    return g, gk


def gradients(d, ms=(2, 4), bufs=None):
    """(name, (λ_0, κ̄)) of every hand gradient, one after the other (they
    share the buffers ``bufs = (S, a, b, g, gn)``: copies are yielded)."""
    n, T = d["u0"].shape[0], int(d["T"])
    if bufs is None:
        bufs = (_aligned_empty((T + 1, n, n)),) + tuple(_aligned_empty((n, n)) for _ in range(4))
    S, a, b, g, gn = bufs
    d = {**d, "kappa": float(d["kappa"]), "T": T}
    runs = [("grad_all", lambda: _grad_all(d, S, g, gn)), ("grad_fused", lambda: _grad_fused(d, S, g, gn)),
            ("grad_ix", lambda: _grad_ix(d, S, g, gn, False)), ("grad_blocked2_ix", lambda: _grad_ix(d, S, g, gn, True))]
    runs += [(f"grad_blocked{m}", (lambda m=m: _grad_blocked(d, S, g, m))) for m in ms]
    if S.ctypes.data % 32 == 0 and (n * 8) % 32 == 0:  # the non-temporal stores need 32-byte aligned rows
        runs.append(("grad_nt", lambda: _grad_nt(d, S, g, gn, a, b)))
    for name, fn in runs:
        gu, gk = fn()
        yield name, (gu.copy(), float(gk))


def main(argv=None) -> None:
    import tensorlang as tl

    from .heat import data, program

    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes_heat", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--ms", type=int, nargs="*", default=[2, 4, 8])
    args = ap.parse_args(argv)
    numba.set_num_threads(1)  # one thread: tensorlang's parallel kernels too
    n, T = args.n, args.T
    d = data({"n": n, "T": T}, np.random.default_rng(0))
    d["kappa"] = float(d["kappa"])
    loss, ins = program("T", "all")
    f = tl.compile(loss)
    gr = tl.grad(loss, wrt=[ins["u0"], ins["kappa"]])
    want_u, want_k = gr(**d)
    want_k = float(want_k)
    S = _aligned_empty((T + 1, n, n))
    S[:] = 0.0  # touch every page before timing
    a, b, g, gn = (_aligned_empty((n, n)) for _ in range(4))

    def check(name, gu, gk):
        eu = np.abs(gu - want_u).max() / np.abs(want_u).max()
        ek = abs(gk - want_k) / abs(want_k)
        assert eu < 1e-12 and ek < 1e-12, f"{name}: relative errors u0 {eu:.2e}, kappa {ek:.2e}"
        return max(eu, ek)

    lp = primal(d["u0"], d["z"], d["kappa"], T, a, b)
    assert abs(lp - float(f(**d))) <= 1e-12 * abs(lp), "hand primal differs from tensorlang's"
    errs = {name: check(name, *got) for name, got in gradients(d, args.ms, (S, a, b, g, gn))}
    u, k, z = d["u0"], d["kappa"], d["z"]
    forward_all(u, k, T, S)
    methods = {
        "tl_primal": lambda: f(**d),
        "tl_grad": lambda: gr(**d),
        "primal": lambda: primal(u, z, k, T, a, b),
        "grad_all": lambda: _grad_all(d, S, g, gn),
        "grad_fused": lambda: _grad_fused(d, S, g, gn),
        "grad_ix": lambda: _grad_ix(d, S, g, gn, False),
        "grad_blocked2_ix": lambda: _grad_ix(d, S, g, gn, True),
        **{f"grad_blocked{m}": (lambda m=m: _grad_blocked(d, S, g, m)) for m in args.ms},
        "grad_nt": lambda: _grad_nt(d, S, g, gn, a, b),
        "fwd_only": lambda: forward_all(u, k, T, S),
        "fwd_nt_only": lambda: forward_nt(u, k, T, S, a, b),
        "copy_store": lambda: copy_store(u, T, S),
        "copy_store_nt": lambda: copy_store_nt(u, T, S),
        "read_states": lambda: read_states(T, S),
        "rev_only": lambda: reverse_all(z, k, T, S, g, gn, False),
        "rev_hot": lambda: reverse_all(z, k, T, S, g, gn, True),
        "rev_fused_only": lambda: reverse_fused(z, k, T, S, g, gn, False),
        "rev_fused_hot": lambda: reverse_fused(z, k, T, S, g, gn, True),
        "rev_ix_only": lambda: reverse_ix(z, k, T, S, g, gn, False),
        "rev_ix_hot": lambda: reverse_ix(z, k, T, S, g, gn, True),
        "rev_blocked2_ix_only": lambda: reverse_blocked2_ix(z, k, T, S, g, gn, False),
        "rev_blocked2_ix_hot": lambda: reverse_blocked2_ix(z, k, T, S, g, gn, True),
        **{f"rev_blocked{m}_only": (lambda m=m: reverse_blocked(z, k, T, S, g, m)) for m in args.ms},
    }
    print_table(methods, args.repeat, n, T, max(errs.values()), steps=True)


if __name__ == "__main__":
    main()
