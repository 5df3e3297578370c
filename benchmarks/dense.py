"""Dense-contraction workloads: a tanh MLP and logistic regression (issue #13 item 6).

Both are matrix products end to end (paper Section 2.3's batched model with
dense contractions in place of a convolution): their losses and gradients are
GEMMs and GEMVs (the forward ``X W``, the adjoint's ``Xᵀ R`` and ``R Wᵀ``),
which the backend lowers to BLAS calls inside the kernel (backend/blas.py).
They are registered in ``benchmarks/workloads.py`` (``workload_fields``) and
carry their own JAX and PyTorch peers (``jax_spec``, ``torch_spec``), found by
the baselines through the workload name.

* ``mlp``: ``H1 = tanh(X W1 + b1)``, ``H2 = tanh(H1 W2 + b2)``, ``y = H2 w3``,
  loss ``Σ_b (y_b - t_b)²``; gradient in ``W1, b1, W2, b2, w3``.
* ``logreg``: ``z = X w``, loss ``Σ_i softplus(-s_i z_i) + (λ/2) |w|²`` with
  labels ``s_i = ±1``; gradient in ``w``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

RIDGE = 0.01  # logistic regression's L2 weight λ


# -- tanh MLP ------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def mlp_program():
    import tensorlang as tl

    B, d, h = tl.sizes("B d h")
    X, t = tl.tensor("X", B, d), tl.tensor("t", B)
    W1, b1, W2, b2, w3 = tl.tensor("W1", d, h), tl.tensor("b1", h), tl.tensor("W2", h, h), tl.tensor("b2", h), tl.tensor("w3", h)
    Z1 = tl.gen([B, h], lambda b, j: tl.sum(d, lambda k: X[b, k] * W1[k, j]))
    Z2 = lambda H1: tl.gen([B, h], lambda b, j: tl.sum(h, lambda k: H1[b, k] * W2[k, j]))  # noqa: E731
    loss = tl.let(Z1, lambda z1: tl.let(
        tl.gen([B, h], lambda b, j: tl.tanh(z1[b, j] + b1[j])), lambda H1: tl.let(
            Z2(H1), lambda z2: tl.let(
                tl.gen([B, h], lambda b, j: tl.tanh(z2[b, j] + b2[j])), lambda H2: tl.let(
                    tl.gen(B, lambda b: tl.sum(h, lambda j: H2[b, j] * w3[j])), lambda y: tl.sum(
                        B, lambda b: (y[b] - t[b]) ** 2))))))
    return loss, {"X": X, "t": t, "W1": W1, "b1": b1, "W2": W2, "b2": b2, "w3": w3}


def mlp_data(sizes, rng):
    B, d, h = sizes["B"], sizes["d"], sizes["h"]
    return {"X": rng.normal(size=(B, d)), "t": rng.normal(size=B),
            "W1": rng.normal(size=(d, h)) / np.sqrt(d), "b1": 0.1 * rng.normal(size=h),
            "W2": rng.normal(size=(h, h)) / np.sqrt(h), "b2": 0.1 * rng.normal(size=h),
            "w3": rng.normal(size=h) / np.sqrt(h)}


def _mlp_forward(d):
    H1 = np.tanh(d["X"] @ d["W1"] + d["b1"])
    H2 = np.tanh(H1 @ d["W2"] + d["b2"])
    return H1, H2, H2 @ d["w3"]


def mlp_loss(d) -> float:
    return float(((_mlp_forward(d)[2] - d["t"]) ** 2).sum())


def mlp_grad(d) -> dict:
    H1, H2, y = _mlp_forward(d)
    dy = 2.0 * (y - d["t"])
    dZ2 = np.outer(dy, d["w3"]) * (1.0 - H2**2)  # tanh' = 1 - tanh²
    dZ1 = (dZ2 @ d["W2"].T) * (1.0 - H1**2)
    return {"W1": d["X"].T @ dZ1, "b1": dZ1.sum(0), "W2": H1.T @ dZ2, "b2": dZ2.sum(0), "w3": H2.T @ dy}


# -- logistic regression ---------------------------------------------------------------------------


@lru_cache(maxsize=None)
def logreg_program():
    import tensorlang as tl

    n, d = tl.sizes("n d")
    X, s, w = tl.tensor("X", n, d), tl.tensor("s", n), tl.tensor("w", d)
    z = tl.gen(n, lambda i: tl.sum(d, lambda k: X[i, k] * w[k]))
    loss = tl.let(z, lambda z: tl.sum(n, lambda i: tl.softplus(-s[i] * z[i]))) + (RIDGE / 2) * tl.sum(d, lambda k: w[k] * w[k])
    return loss, {"X": X, "s": s, "w": w}


def logreg_data(sizes, rng):
    n, d = sizes["n"], sizes["d"]
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    w_true = rng.normal(size=d)
    return {"X": X, "s": np.where(X @ w_true + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0), "w": 0.1 * rng.normal(size=d)}


def logreg_loss(d) -> float:
    m = -d["s"] * (d["X"] @ d["w"])
    return float(np.logaddexp(0.0, m).sum() + RIDGE / 2 * d["w"] @ d["w"])


def logreg_grad(d) -> dict:
    m = -d["s"] * (d["X"] @ d["w"])
    sig = 0.5 * (1.0 + np.tanh(0.5 * m))  # softplus' = logistic sigmoid, overflow-free
    return {"w": d["X"].T @ (-d["s"] * sig) + RIDGE * d["w"]}


# -- peers (found by benchmarks/baselines through the workload name) -----------------------------


def jax_spec(name, d):
    """``(loss, args, argnums, post)`` of the JAX peer."""
    import jax.numpy as jnp
    from jax.nn import softplus

    if name == "mlp":
        def mlp(X, t, W1, b1, W2, b2, w3):
            H2 = jnp.tanh(jnp.tanh(X @ W1 + b1) @ W2 + b2)
            return jnp.sum((H2 @ w3 - t) ** 2)

        keys = ("W1", "b1", "W2", "b2", "w3")
        return (mlp, [d[k] for k in ("X", "t") + keys], (2, 3, 4, 5, 6),
                lambda g: dict(zip(keys, g)))

    def logreg(X, s, w):
        return jnp.sum(softplus(-s * (X @ w))) + RIDGE / 2 * (w @ w)

    return logreg, [d["X"], d["s"], d["w"]], (2,), lambda g: {"w": g[0]}


def torch_spec(name, d):
    """``(loss, args, argnums, post)`` of the PyTorch peer."""
    import torch

    if name == "mlp":
        def mlp(X, t, W1, b1, W2, b2, w3):
            H2 = torch.tanh(torch.tanh(X @ W1 + b1) @ W2 + b2)
            return ((H2 @ w3 - t) ** 2).sum()

        keys = ("W1", "b1", "W2", "b2", "w3")
        return (mlp, [d[k] for k in ("X", "t") + keys], (2, 3, 4, 5, 6),
                lambda g: dict(zip(keys, g)))

    def logreg(X, s, w):
        return torch.nn.functional.softplus(-s * (X @ w)).sum() + RIDGE / 2 * (w @ w)

    return logreg, [d["X"], d["s"], d["w"]], (2,), lambda g: {"w": g[0]}


def workload_fields() -> list:
    """The fields of the runner's ``Workload`` for each workload (built in workloads.py)."""
    return [
        dict(name="mlp", number=13, title="tanh MLP, two hidden layers of h = 256, d = 256 (grad in every weight)",
             primary="B", sizes=(128, 512, 2048), fixed={"d": 256, "h": 256},
             quick={"B": 8, "d": 6, "h": 5}, check={"B": 5, "d": 4, "h": 3},
             wrt=("W1", "b1", "W2", "b2", "w3"), program=mlp_program, data=mlp_data,
             loss_ref=mlp_loss, grad_ref=mlp_grad, work=lambda s: 2 * s["B"] * s["h"] * (s["d"] + s["h"]),
             notes="issue #13 item 6: dense contractions lowered to BLAS", tags=("dense",)),
        dict(name="logreg", number=13, title=f"logistic regression, d = 512, ridge {RIDGE} (grad in w)",
             primary="n", sizes=(1000, 10_000, 50_000), fixed={"d": 512},
             quick={"n": 20, "d": 6}, check={"n": 12, "d": 5}, wrt=("w",), program=logreg_program,
             data=logreg_data, loss_ref=logreg_loss, grad_ref=logreg_grad, work=lambda s: 2 * s["n"] * s["d"],
             notes="issue #13 item 6: dense contractions lowered to BLAS", tags=("dense",)),
    ]
