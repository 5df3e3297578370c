"""JAX baselines: ``jax.jit(loss)`` and ``jax.jit(jax.grad(loss, argnums))`` in float64.

Inputs are passed as ``jnp.asarray`` arrays (jaxlib 0.10.2 has crashed on large raw
NumPy arguments).  Paper Section 1: XLA runs diag/dot in O(N) but its gradient in O(N^2).
"""

from __future__ import annotations

import functools

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from ..methods import Impl, NotApplicable  # noqa: E402
from ..workloads import EPS, LAMBDA, TRACES  # noqa: E402
from .common import coo, dense_from_coo, family  # noqa: E402


def diag_dot(x):
    A = jnp.diag(x)
    return jnp.dot(A[:, 0], A[0, :])


def diag_trace(x):
    A = jnp.diag(x)
    out = jnp.trace(A)
    for _ in range(TRACES - 1):
        out = out + jnp.trace(A)
    return out


def deconv(x, c, z):
    return jnp.sum((jnp.convolve(x, c, mode="valid") - z) ** 2)


def batched(x, z, w):
    y = jax.vmap(lambda xk: jnp.convolve(xk, w, mode="valid"))(x)
    return jnp.sum((y - z) ** 2)


def image(u, f, M):
    c = u[1:-1, 1:-1]
    nb = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
    blur, lap = 0.5 * c + 0.125 * nb, nb - 4.0 * c
    data = jnp.where(M[1:-1, 1:-1], (blur - f[1:-1, 1:-1]) ** 2, 0.0)
    return jnp.sum(data) + LAMBDA * jnp.sum(lap**2)


def quadform(A, x):
    y = A @ x
    return y @ y


def sparse(vals, x, b, rows, cols, n):
    Ax = jax.ops.segment_sum(vals * x[cols], rows, num_segments=n, indices_are_sorted=True)
    return jnp.sum((Ax - b) ** 2)


def nbody(p):
    n = p.shape[0]
    diff = p[:, None, :] - p[None, :, :]
    d2 = jnp.sum(diff**2, axis=-1) + EPS
    upper = jnp.triu(jnp.ones((n, n), dtype=bool), k=1)
    return jnp.sum(jnp.where(upper, 1.0 / jnp.sqrt(d2), 0.0))


def _spec(name, d):
    """(loss, args, argnums, post) for a workload family."""
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
            loss = functools.partial(sparse, n=n)
            post = lambda g: {"A": dense_from_coo((n, n), rows, cols, np.asarray(g[0])), "x": g[1]}  # noqa: E731
            return loss, [vals, d["x"], d["b"], rows, cols], (0, 1), post
        case "nbody":
            return nbody, [d["p"]], (0,), lambda g: {"p": g[0]}
        case "heat" | "wave" | "burgers_loop":  # time loops: the peer lives with the workload (lax.fori_loop)
            import importlib

            return importlib.import_module(f"..{family(name)}", __package__).jax_spec(d)
        case "mlp" | "logreg":  # dense contractions (issue #13 item 6): the peer lives with the workload
            from .. import dense

            return dense.jax_spec(name, d)
        case other:
            raise NotApplicable(f"no JAX baseline for {other}")


def build(workload, data) -> Impl:
    loss, args, argnums, post = _spec(workload.name, data)
    jargs = [jnp.asarray(a) for a in args]

    def make_primal():
        f = jax.jit(loss)
        return lambda: jax.block_until_ready(f(*jargs))

    def make_grad():
        g = jax.jit(jax.grad(loss, argnums=argnums))
        return lambda: jax.block_until_ready(g(*jargs))

    return Impl(
        make_primal, make_grad,
        value=lambda out: float(out),
        grads=lambda out: {k: np.asarray(v) for k, v in post(out).items()},
        note="jax.jit(jax.grad), float64",
    )
