"""1D deconvolution loss (paper Section 2.1): recover a signal x from z = x * c.

    f(x) = gen[i:n] sum[j:m] x[i - j + m - 1] · c[j]        (a "valid" convolution)
    l(x) = sum[i:n] (f(x)[i] - z[i])²

`tensorlang audit examples/deconvolution.py` certifies the costs of `loss` and
its derivatives.  Run as a script to compile the loss and its gradient, check
them against NumPy and central finite differences, and time the gradient
against the naive (dense one-hot) adjoint.
"""

import sys
import time

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


def numpy_loss(d):
    return float(((np.convolve(d["x"], d["c"], mode="valid") - d["z"]) ** 2).sum())


def central_differences(f, d, name, coords, h=1e-3):
    # the loss is quadratic in each input, so central differences are exact up to rounding
    out = []
    for k in coords:
        plus, minus = dict(d), dict(d)
        plus[name] = d[name].copy()
        minus[name] = d[name].copy()
        plus[name][k] += h
        minus[name][k] -= h
        out.append((f(plus) - f(minus)) / (2 * h))
    return np.array(out)


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(N=100_000, M=16, naive_N=400):
    print("program:")
    print(loss)
    print()

    d = random_inputs(N, M)
    f = tl.compile(loss)
    value = f(**d)
    ref = numpy_loss(d)
    print(f"n={N}, m={M}: loss compiled = {value:.10g}, NumPy = {ref:.10g}")
    if not np.isclose(value, ref, rtol=1e-9):
        sys.exit("FAIL: compiled loss differs from NumPy")

    grad = tl.grad(loss, wrt=[x, c])
    gx, gc = grad(**d)
    rng = np.random.default_rng(1)
    for name, g in (("x", gx), ("c", gc)):
        coords = rng.choice(len(d[name]), size=min(8, len(d[name])), replace=False)
        fd = central_differences(numpy_loss, d, name, coords)
        err = np.max(np.abs(fd - g[coords]) / (1 + np.abs(fd)))
        print(f"d loss / d {name}: max relative error vs central differences at {len(coords)} coordinates = {err:.2e}")
        if err > 1e-6:
            sys.exit(f"FAIL: gradient in {name} disagrees with finite differences")

    t_loss = best_of(lambda: f(**d))
    t_grad = best_of(lambda: grad(**d))
    print(f"compiled loss {t_loss * 1e3:.3f} ms, gradient {t_grad * 1e3:.3f} ms (ratio {t_grad / t_loss:.2f})")

    # The naive adjoint (dense one-hot transposes) is quadratic: compare at a small size.
    ds = random_inputs(naive_N, M)
    sparse = tl.grad(loss, wrt=[x, c])
    naive = tl.grad(loss, wrt=[x, c], mode="naive")
    a, b = sparse(**ds), naive(**ds)
    if not all(np.allclose(u, v, rtol=1e-9, atol=1e-9) for u, v in zip(a, b)):
        sys.exit("FAIL: naive and sparsity-aware gradients differ")
    t_sparse = best_of(lambda: sparse(**ds))
    t_naive = best_of(lambda: naive(**ds), repeat=2)
    print(
        f"n={naive_N}: sparsity-aware gradient {t_sparse * 1e3:.3f} ms, naive adjoint {t_naive * 1e3:.1f} ms "
        f"({t_naive / t_sparse:.0f}x slower)"
    )
    print(f"cost model at n={N}, m={M}: loss {tl.cost(loss, n=N, m=M)} ops, "
          f"gradient {tl.cost(tl.adjoint(loss, wrt=[x, c]), n=N, m=M)} ops")
    print("OK")


if __name__ == "__main__":
    main()
