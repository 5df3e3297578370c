"""The n-body pairwise energy, shared by the backend tests that check its
gradient's structure (no n x n temporary, a parallel scatter variant) and
values (against a NumPy reference written independently of tensorlang)."""

import numpy as np

import tensorlang as tl

EPS = 0.01


def nbody():
    """``Σ_{i<j} 1/sqrt(|p_i - p_j|² + EPS)``: (loss, p)."""
    n = tl.size("n")
    p = tl.tensor("p", n, 3)

    def pair(i, j):
        d2 = tl.sum(3, lambda k: (p[i, k] - p[j, k]) ** 2)
        return tl.iverson(i < j, 1.0 / tl.sqrt(d2 + EPS))

    return tl.sum([n, n], pair), p


def nbody_grad_ref(p):
    """The gradient by hand: ``-Σ_j (|d|² + EPS)^(-3/2) d`` with ``d = p_i - p_j``."""
    diff = p[:, None, :] - p[None, :, :]
    w = ((diff**2).sum(-1) + EPS) ** -1.5
    np.fill_diagonal(w, 0.0)
    return -(w[:, :, None] * diff).sum(axis=1)
