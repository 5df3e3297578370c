"""Sparse matrix factorization (relations, paper Figure 3 ``R(a0, ...)``).

Fit low-rank factors U, V to the observed entries of a matrix A; which
entries are observed is a relation (data predicate) Ω given at run time as
coordinate rows:

    l(U, V) = sum[i:n] sum[j:m] [Ω(i, j)]·(sum[r:k] U[i,r]·V[j,r] - A[i,j])²
            + μ · (sum[i:n] sum[r:k] U[i,r]² + sum[j:m] sum[r:k] V[j,r]²)

Run as a script to evaluate the loss on random data and compare with NumPy.
"""

import numpy as np

import tensorlang as tl

MU = 0.01

n, m, k = tl.sizes("n m k")
U = tl.tensor("U", n, k)
V = tl.tensor("V", m, k)
A = tl.tensor("A", n, m)
omega = tl.relation("Omega", n, m)

fit = tl.sum([n, m], lambda i, j: tl.iverson(omega(i, j), (tl.sum(k, lambda r: U[i, r] * V[j, r]) - A[i, j]) ** 2))
reg = tl.sum([n, k], lambda i, r: U[i, r] ** 2) + tl.sum([m, k], lambda j, r: V[j, r] ** 2)
loss = fit + MU * reg


def random_inputs(N=60, M=50, K=4, density=0.1, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((N, M)) < density
    return {"U": rng.normal(size=(N, K)), "V": rng.normal(size=(M, K)), "A": rng.normal(size=(N, M)),
            "Omega": np.argwhere(mask)}


def reference(data):
    mask = np.zeros(data["A"].shape, dtype=bool)
    mask[tuple(data["Omega"].T)] = True
    r = (data["U"] @ data["V"].T - data["A"])[mask]
    return float(r @ r + MU * ((data["U"] ** 2).sum() + (data["V"] ** 2).sum()))


def main():
    data = random_inputs()
    print(loss)
    value = tl.evaluate(loss, **data)
    ref = reference(data)
    print(f"loss (reference evaluator) = {value:.10g}")
    print(f"loss (NumPy)               = {ref:.10g}")
    if not np.isclose(value, ref, rtol=1e-10):
        raise SystemExit("mismatch between tensorlang and NumPy")


if __name__ == "__main__":
    main()
