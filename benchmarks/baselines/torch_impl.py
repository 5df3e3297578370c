"""PyTorch baselines: eager autograd on CPU in float64 (``torch.autograd.grad``).

The primal runs under ``torch.no_grad()``; the gradient call runs the forward with
graph recording and the backward.  Thread count is fixed by the worker.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..methods import Impl, NotApplicable
from ..workloads import EPS, LAMBDA, TRACES
from .common import coo, dense_from_coo, family

torch.set_default_dtype(torch.float64)


def diag_dot(x):
    A = torch.diag(x)
    return torch.dot(A[:, 0], A[0, :])


def diag_trace(x):
    A = torch.diag(x)
    out = torch.trace(A)
    for _ in range(TRACES - 1):
        out = out + torch.trace(A)
    return out


def deconv(x, c, z):
    # conv1d is a cross-correlation: flip the kernel for a convolution
    y = F.conv1d(x.view(1, 1, -1), c.flip(0).view(1, 1, -1)).view(-1)
    return torch.sum((y - z) ** 2)


def batched(x, z, w):
    y = F.conv1d(x.unsqueeze(1), w.flip(0).view(1, 1, -1)).squeeze(1)
    return torch.sum((y - z) ** 2)


def image(u, f, M):
    c = u[1:-1, 1:-1]
    nb = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
    blur, lap = 0.5 * c + 0.125 * nb, nb - 4.0 * c
    data = torch.where(M[1:-1, 1:-1], (blur - f[1:-1, 1:-1]) ** 2, 0.0)
    return data.sum() + LAMBDA * (lap**2).sum()


def quadform(A, x):
    y = A @ x
    return y @ y


def sparse(vals, x, b, rows, cols):
    Ax = torch.zeros_like(b).index_add(0, rows, vals * x[cols])
    return torch.sum((Ax - b) ** 2)


def nbody(p):
    n = p.shape[0]
    diff = p[:, None, :] - p[None, :, :]
    d2 = (diff**2).sum(-1) + EPS
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return torch.where(upper, d2.rsqrt(), 0.0).sum()


def _spec(name, d):
    match family(name):
        case "diag-dot":
            return diag_dot, [d["x"]], (0,), lambda g: {"x": g[0]}
        case "diag-trace":
            return diag_trace, [d["x"]], (0,), lambda g: {"x": g[0]}
        case "deconv":
            return deconv, [d["x"], d["c"], d["z"]], (0, 1), lambda g: {"x": g[0], "c": g[1]}
        case "batched-conv":
            return batched, [d["x"], d["z"], d["w"]], (2,), lambda g: {"w": g[0]}
        case "image":
            return image, [d["u"], d["f"], d["M"]], (0,), lambda g: {"u": g[0]}
        case "quadform":
            return quadform, [d["A"], d["x"]], (0, 1), lambda g: {"A": g[0], "x": g[1]}
        case "sparse":
            rows, cols, vals = coo(d)
            n = d["x"].shape[0]
            post = lambda g: {"A": dense_from_coo((n, n), rows, cols, g[0]), "x": g[1]}  # noqa: E731
            return sparse, [vals, d["x"], d["b"], rows, cols], (0, 1), post
        case "nbody":
            return nbody, [d["p"]], (0,), lambda g: {"p": g[0]}
        case "mlp" | "logreg":  # dense contractions (issue #13 item 6): the peer lives with the workload
            from .. import dense

            return dense.torch_spec(name, d)
        case other:
            raise NotApplicable(f"no PyTorch baseline for {other}")


def build(workload, data) -> Impl:
    loss, args, argnums, post = _spec(workload.name, data)
    targs = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
    for k in argnums:
        targs[k] = targs[k].clone().requires_grad_(True)
    wrt = [targs[k] for k in argnums]

    def make_primal():
        def run():
            with torch.no_grad():
                return loss(*targs)

        return run

    def make_grad():
        return lambda: torch.autograd.grad(loss(*targs), wrt)

    return Impl(
        make_primal, make_grad,
        value=lambda out: float(out),
        grads=lambda out: {k: v.detach().numpy() if torch.is_tensor(v) else v for k, v in post(out).items()},
        note="torch.autograd (CPU, float64)",
    )
