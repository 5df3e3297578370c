"""Batched kernel fit (paper Section 2.3): fit a kernel w to a batch of signals.

    f(x; w)[k, i] = sum[j:m] x[k, i - j + m - 1] · w[j]
    l(x, z; w)    = sum[k:b] sum[i:n] (f(x; w)[k, i] - z[k, i])²

(The paper's x[i - j] with x over [-m+1, n) is stored shifted by m - 1.)
The gradient with respect to w is the let-lifted program of Section 2.3.

Run as a script to evaluate the loss on random data and compare with NumPy.
"""

import numpy as np

import tensorlang as tl

b, n, m = tl.sizes("b n m")
x = tl.tensor("x", b, n + m - 1)
z = tl.tensor("z", b, n)
w = tl.tensor("w", m)

f = tl.gen([b, n], lambda k, i: tl.sum(m, lambda j: x[k, i - j + m - 1] * w[j]))
loss = tl.sum([b, n], lambda k, i: (f[k, i] - z[k, i]) ** 2)


def random_inputs(B=8, N=200, M=16, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(B, N + M - 1)), "z": rng.normal(size=(B, N)), "w": rng.normal(size=M)}


def reference(data):
    fv = np.stack([np.convolve(row, data["w"], mode="valid") for row in data["x"]])
    return float(((fv - data["z"]) ** 2).sum())


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
