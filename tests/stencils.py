"""Stencil programs shared by the backend's structural tests."""

from __future__ import annotations

import tensorlang as tl


def laplacian_energy():
    """(Σ over the interior of (5-point Laplacian of u)², u) on an n x n grid."""
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    k = n - 2
    lap = tl.gen([k, k], lambda i, j: u[i, j + 1] + u[i + 2, j + 1] + u[i + 1, j] + u[i + 1, j + 2] - 4.0 * u[i + 1, j + 1])
    return tl.let(lap, lambda L: tl.sum([k, k], lambda i, j: L[i, j] ** 2)), u
