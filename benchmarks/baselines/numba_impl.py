"""Hand-written Numba kernels (``numba.njit``), where one is short to write.

Gradients are gathers (each output element reads what it needs; no scatter, no
atomics), the code the paper's compiler aims to produce.  The quadratic form is
left to BLAS (no hand kernel).  Index structures derived from the data's sparsity
pattern (CSR/CSC) are built once, outside the timed region.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..methods import Impl, NotApplicable
from ..workloads import EPS, LAMBDA, TRACES
from .common import dense_from_coo, family


@njit(cache=False)
def diag_dot_primal(x):
    return x[0] * x[0]  # A[:,0] and A[0,:] of diag(x) meet only at A[0,0]


@njit(cache=False)
def diag_dot_grad(x):
    g = np.zeros_like(x)
    g[0] = 2.0 * x[0]
    return g


@njit(cache=False)
def diag_trace_primal(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return TRACES * s


@njit(cache=False)
def diag_trace_grad(x):
    return np.full_like(x, float(TRACES))


@njit(cache=False)
def _conv_residual(x, c, z):
    n, m = z.shape[0], c.shape[0]
    r = np.empty(n)
    for i in range(n):
        acc = 0.0
        for j in range(m):
            acc += x[i + m - 1 - j] * c[j]
        r[i] = acc - z[i]
    return r


@njit(cache=False)
def deconv_primal(x, c, z):
    r = _conv_residual(x, c, z)
    s = 0.0
    for i in range(r.shape[0]):
        s += r[i] * r[i]
    return s


@njit(cache=False)
def _conv_adjoint(x, c, dy, dx, dc):
    """dx[k] = sum_j dy[k-m+1+j] c[j] (range-guarded); dc[j] += sum_i dy[i] x[i+m-1-j]."""
    n, m = dy.shape[0], c.shape[0]
    for k in range(n + m - 1):
        acc = 0.0
        lo = max(0, m - 1 - k)
        hi = min(m, n + m - 1 - k)
        for j in range(lo, hi):
            acc += dy[k - m + 1 + j] * c[j]
        dx[k] = acc
    for j in range(m):
        acc = 0.0
        for i in range(n):
            acc += dy[i] * x[i + m - 1 - j]
        dc[j] += acc


@njit(cache=False)
def deconv_grad(x, c, z):
    dy = 2.0 * _conv_residual(x, c, z)
    dx = np.empty_like(x)
    dc = np.zeros_like(c)
    _conv_adjoint(x, c, dy, dx, dc)
    return dx, dc


@njit(cache=False)
def batched_primal(x, z, w):
    s = 0.0
    for k in range(x.shape[0]):
        r = _conv_residual(x[k], w, z[k])
        for i in range(r.shape[0]):
            s += r[i] * r[i]
    return s


@njit(cache=False)
def batched_grad(x, z, w):
    dw = np.zeros_like(w)
    n, m = z.shape[1], w.shape[0]
    for k in range(x.shape[0]):
        dy = 2.0 * _conv_residual(x[k], w, z[k])
        for j in range(m):
            acc = 0.0
            for i in range(n):
                acc += dy[i] * x[k, i + m - 1 - j]
            dw[j] += acc
    return dw


@njit(cache=False)
def _image_cotangents(u, f, M):
    """(loss, R, S): R = 2[M](blur - f) and S = 2 lambda lap on the interior, zero on the border."""
    n = u.shape[0]
    R = np.zeros_like(u)
    S = np.zeros_like(u)
    loss = 0.0
    for a in range(1, n - 1):
        for b in range(1, n - 1):
            nb = u[a - 1, b] + u[a + 1, b] + u[a, b - 1] + u[a, b + 1]
            lap = nb - 4.0 * u[a, b]
            loss += LAMBDA * lap * lap
            S[a, b] = 2.0 * LAMBDA * lap
            if M[a, b]:
                e = 0.5 * u[a, b] + 0.125 * nb - f[a, b]
                loss += e * e
                R[a, b] = 2.0 * e
    return loss, R, S


@njit(cache=False)
def image_primal(u, f, M):
    return _image_cotangents(u, f, M)[0]


@njit(cache=False)
def image_grad(u, f, M):
    n = u.shape[0]
    _, R, S = _image_cotangents(u, f, M)
    g = np.empty_like(u)
    for a in range(n):
        for b in range(n):
            acc = 0.5 * R[a, b] - 4.0 * S[a, b]
            if a > 0:
                acc += 0.125 * R[a - 1, b] + S[a - 1, b]
            if a < n - 1:
                acc += 0.125 * R[a + 1, b] + S[a + 1, b]
            if b > 0:
                acc += 0.125 * R[a, b - 1] + S[a, b - 1]
            if b < n - 1:
                acc += 0.125 * R[a, b + 1] + S[a, b + 1]
            g[a, b] = acc
    return g


@njit(cache=False)
def _csr_residual(indptr, cols, vals, x, b):
    n = b.shape[0]
    r = np.empty(n)
    for i in range(n):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            acc += vals[p] * x[cols[p]]
        r[i] = acc - b[i]
    return r


@njit(cache=False)
def sparse_primal(indptr, cols, vals, x, b):
    r = _csr_residual(indptr, cols, vals, x, b)
    return np.dot(r, r)


@njit(cache=False)
def sparse_grad(indptr, cols, vals, x, b, rows, cptr, perm):
    """dA at each nonzero (CSR order) and dx by gathering over the CSC view (perm: CSC -> CSR position)."""
    dr = 2.0 * _csr_residual(indptr, cols, vals, x, b)
    nnz = vals.shape[0]
    dvals = np.empty(nnz)
    for p in range(nnz):
        dvals[p] = dr[rows[p]] * x[cols[p]]
    n = x.shape[0]
    dx = np.empty(n)
    for j in range(n):
        acc = 0.0
        for q in range(cptr[j], cptr[j + 1]):
            p = perm[q]
            acc += vals[p] * dr[rows[p]]
        dx[j] = acc
    return dvals, dx


@njit(cache=False)
def nbody_primal(p):
    n = p.shape[0]
    s = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d2 = EPS
            for k in range(3):
                t = p[i, k] - p[j, k]
                d2 += t * t
            s += 1.0 / np.sqrt(d2)
    return s


@njit(cache=False)
def nbody_grad(p):
    n = p.shape[0]
    g = np.zeros_like(p)
    for i in range(n):  # each body gathers over all others: no scatter
        for j in range(n):
            if j != i:
                d2 = EPS
                for k in range(3):
                    t = p[i, k] - p[j, k]
                    d2 += t * t
                w = d2**-1.5
                for k in range(3):
                    g[i, k] -= w * (p[i, k] - p[j, k])
    return g


def _sparse_structs(d):
    S = d["S"]
    n = S.shape[0]
    rows, cols = np.nonzero(S)  # CSR order
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    perm = np.lexsort((rows, cols)).astype(np.int64)  # CSC order as positions into the CSR arrays
    cptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=n), out=cptr[1:])
    vals = d["A"][rows, cols]
    return rows.astype(np.int64), cols.astype(np.int64), indptr, vals, cptr, perm


def build(workload, d) -> Impl:
    fam = family(workload.name)
    match fam:
        case "diag-dot":
            args, primal, grad, names = (d["x"],), diag_dot_primal, diag_dot_grad, ("x",)
        case "diag-trace":
            args, primal, grad, names = (d["x"],), diag_trace_primal, diag_trace_grad, ("x",)
        case "deconv":
            args, primal, grad, names = (d["x"], d["c"], d["z"]), deconv_primal, deconv_grad, ("x", "c")
        case "batched-conv":
            args, primal, grad, names = (d["x"], d["z"], d["w"]), batched_primal, batched_grad, ("w",)
        case "image":
            args, primal, grad, names = (d["u"], d["f"], d["M"]), image_primal, image_grad, ("u",)
        case "nbody":
            args, primal, grad, names = (d["p"],), nbody_primal, nbody_grad, ("p",)
        case "sparse":
            rows, cols, indptr, vals, cptr, perm = _sparse_structs(d)
            n = d["x"].shape[0]
            pargs = (indptr, cols, vals, d["x"], d["b"])
            gargs = pargs + (rows, cptr, perm)
            return Impl(
                lambda: (lambda: sparse_primal(*pargs)),
                lambda: (lambda: sparse_grad(*gargs)),
                value=float,
                grads=lambda out: {"A": dense_from_coo((n, n), rows, cols, out[0]), "x": out[1]},
                note="hand-written CSR/CSC gather kernels",
            )
        case "quadform":
            raise NotApplicable("no hand-written kernel (dense BLAS workload)")
        case other:
            raise NotApplicable(f"no hand-written kernel for {other}")

    def grads(out):
        out = out if isinstance(out, tuple) else (out,)
        return dict(zip(names, out))

    return Impl(
        lambda: (lambda: primal(*args)),
        lambda: (lambda: grad(*args)),
        value=float, grads=grads, note="hand-written numba.njit gather kernels",
    )
