"""Fit a sparse model from a scipy.sparse matrix (issue 16; paper Sections
4.3 and 6: a tensor stored on a relation, and its sparse adjoint).

A hidden sparse matrix A* (the pattern S of a random graph with n rows and a
few non-zeros per row) maps inputs to outputs, y_k = A* x_k for K
observed pairs (K = 24) stored as the columns of X (m x K) and Y (n x K).  We know S
but not the values, and fit them by gradient descent on

    l(A) = sum[k:K] sum[i:n] (sum[j:m] A[i, j]·X[j, k] - Y[i, k])²
         + μ · sum[i:n] sum[j:m] A[i, j]²

with ``A = tl.sparse_tensor("A", S)``.  The gradient with respect to A is a
``scipy.sparse.csr_matrix`` with exactly S's pattern, computed by kernels
that never hold an n x m array; the relation's CSR/CSC structure is
prepared once, from the first call's matrix, and reused by every step.

    python examples/sparse_fit.py            # n = 20,000 rows, 8 non-zeros per row
    python examples/sparse_fit.py --n 2000   # smaller
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

import tensorlang as tl

MU = 1e-4
n, m, K = tl.sizes("n m K")
S = tl.relation("S", n, m)
A = tl.sparse_tensor("A", S)
X = tl.tensor("X", m, K)
Y = tl.tensor("Y", n, K)

pred = tl.gen([n, K], lambda i, k: tl.sum(m, lambda j: A[i, j] * X[j, k]))
loss = tl.let(pred, lambda P: tl.sum([n, K], lambda i, k: (P[i, k] - Y[i, k]) ** 2)) + MU * tl.sum(
    [n, m], lambda i, j: A[i, j] * A[i, j]
)


def problem(N=20_000, per_row=8, k=24, seed=0):
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(N), per_row)
    cols = rng.integers(0, N, size=N * per_row)
    truth = sp.csr_matrix((rng.normal(size=N * per_row), (rows, cols)), shape=(N, N))
    truth.sum_duplicates()
    Xv = rng.normal(size=(N, k))
    return truth, Xv, truth @ Xv


def fit(truth, Xv, Yv, steps=60, lr=None):
    """Gradient descent from A = 0 on S's pattern; returns (A, losses)."""
    A0 = truth.copy()
    A0.data[:] = 0.0
    vg = tl.value_and_grad(loss, wrt=A)
    # each row's Hessian is 2 X_S^T X_S (X_S: the rows of X at the row's
    # pattern); with Gaussian X its top eigenvalue is about 2 K (1 + sqrt(p / K))^2
    K_, p_ = Xv.shape[1], max(np.diff(truth.indptr))
    lr = lr or 0.9 / (2 * K_ * (1 + np.sqrt(p_ / K_)) ** 2)
    losses = []
    for _ in range(steps):
        v, g = vg(A=A0, X=Xv, Y=Yv)
        losses.append(v)
        A0.data -= lr * g.data  # g has exactly A0's (= S's) pattern, in the same CSR order
    return A0, losses


def reference_loss(Av, Xv, Yv):
    R = Av @ Xv - Yv
    return float(np.sum(R * R) + MU * np.sum(Av.data**2))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python examples/sparse_fit.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args(argv)
    truth, Xv, Yv = problem(a.n)
    t0 = time.perf_counter()
    Af, losses = fit(truth, Xv, Yv, steps=a.steps)
    dt = time.perf_counter() - t0
    print(f"n = {a.n}, nnz = {truth.nnz}: loss {losses[0]:.4g} -> {losses[-1]:.4g} in {a.steps} steps ({dt:.2f} s)")
    final = tl.compile(loss)(A=Af, X=Xv, Y=Yv)
    print(f"final loss {final:.6g}; scipy says {reference_loss(Af, Xv, Yv):.6g}")
    err = np.linalg.norm(Af.data - truth.data) / np.linalg.norm(truth.data)
    print(f"relative error of the fitted values: {err:.3g}")
    return losses, err


if __name__ == "__main__":
    main()
