"""HIPS autograd baselines: ``autograd.grad(loss, argnum=...)`` over autograd.numpy.

autograd has no sparse arrays and no VJP for ``numpy.convolve``, so the sparse
model is a dense masked product and the convolutions are sums of shifted slices
(the idiomatic workarounds in autograd code).
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd import grad

from ..methods import Impl, NotApplicable
from ..workloads import EPS, LAMBDA, TRACES
from .common import family


def diag_dot(x):
    A = anp.diag(x)
    return anp.dot(A[:, 0], A[0, :])


def diag_trace(x):
    A = anp.diag(x)
    out = anp.trace(A)
    for _ in range(TRACES - 1):
        out = out + anp.trace(A)
    return out


def _valid_conv(x, c, n):
    m = c.shape[0]
    # y[i] = sum_j x[i + m-1 - j] c[j]
    return sum(c[j] * x[m - 1 - j : m - 1 - j + n] for j in range(m))


def deconv(x, c, z):
    return anp.sum((_valid_conv(x, c, z.shape[0]) - z) ** 2)


def batched(x, z, w):
    m, n = w.shape[0], z.shape[1]
    y = sum(w[j] * x[:, m - 1 - j : m - 1 - j + n] for j in range(m))
    return anp.sum((y - z) ** 2)


def image(u, f, M):
    c = u[1:-1, 1:-1]
    nb = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
    blur, lap = 0.5 * c + 0.125 * nb, nb - 4.0 * c
    data = anp.where(M[1:-1, 1:-1], (blur - f[1:-1, 1:-1]) ** 2, 0.0)
    return anp.sum(data) + LAMBDA * anp.sum(lap**2)


def quadform(A, x):
    y = anp.dot(A, x)
    return anp.dot(y, y)


def sparse(A, x, b, S):
    r = anp.dot(anp.where(S, A, 0.0), x) - b
    return anp.dot(r, r)


def nbody(p):
    n = p.shape[0]
    diff = p[:, None, :] - p[None, :, :]
    d2 = anp.sum(diff**2, axis=-1) + EPS
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    return anp.sum(anp.where(upper, 1.0 / anp.sqrt(d2), 0.0))


def _spec(name, d):
    match family(name):
        case "diag-dot":
            return diag_dot, [d["x"]], (0,), ("x",)
        case "diag-trace":
            return diag_trace, [d["x"]], (0,), ("x",)
        case "deconv":
            return deconv, [d["x"], d["c"], d["z"]], (0, 1), ("x", "c")
        case "batched-conv":
            return batched, [d["x"], d["z"], d["w"]], (2,), ("w",)
        case "image":
            return image, [d["u"], d["f"], d["M"]], (0,), ("u",)
        case "quadform":
            return quadform, [d["A"], d["x"]], (0, 1), ("A", "x")
        case "sparse":
            return sparse, [d["A"], d["x"], d["b"], d["S"]], (0, 1), ("A", "x")
        case "nbody":
            return nbody, [d["p"]], (0,), ("p",)
        case other:
            raise NotApplicable(f"no autograd baseline for {other}")


def build(workload, data) -> Impl:
    loss, args, argnums, names = _spec(workload.name, data)

    def make_primal():
        return lambda: loss(*args)

    def make_grad():
        g = grad(loss, argnum=argnums if len(argnums) > 1 else argnums[0])
        if len(argnums) > 1:
            return lambda: g(*args)
        return lambda: (g(*args),)

    return Impl(
        make_primal, make_grad,
        value=lambda out: float(out),
        grads=lambda out: {k: np.asarray(v) for k, v in zip(names, out)},
        note="autograd.grad",
    )
