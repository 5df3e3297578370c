"""1D deconvolution loss (paper Section 2.1): recover a signal x from z = x * c.

    f(x) = gen[i:n] sum[j:m] x[i - j + m - 1] · c[j]        (a "valid" convolution)
    l(x) = sum[i:n] (f(x)[i] - z[i])²

Run as a script to evaluate the loss on random data.
"""

import numpy as np

import tensorlang as tl

n, m = tl.sizes("n m")
x = tl.tensor("x", n + m - 1)
c = tl.tensor("c", m)
z = tl.tensor("z", n)

conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
loss = tl.sum(n, lambda i: (conv[i] - z[i]) ** 2)


def random_inputs(N=1000, M=16, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=N + M - 1), "c": rng.normal(size=M), "z": rng.normal(size=N)}


def main():
    data = random_inputs()
    print("program:")
    print(loss)
    value = tl.evaluate(loss, **data)
    ref = float(((np.convolve(data["x"], data["c"], mode="valid") - data["z"]) ** 2).sum())
    print(f"loss (reference evaluator) = {value:.10g}")
    print(f"loss (NumPy np.convolve)   = {ref:.10g}")
    if not np.isclose(value, ref, rtol=1e-10):
        raise SystemExit("mismatch between tensorlang and NumPy")


if __name__ == "__main__":
    main()
