"""Image denoising (a 2D stencil with boundaries; paper Sections 3-4 constructs).

    E(u) = sum[j:h] sum[i:w] (u[j,i] - f[j,i])²
         + λ · sum[j:h] sum[i:w] [i + 1 < w]·(u[j,i+1] - u[j,i])² + [j + 1 < h]·(u[j+1,i] - u[j,i])²

The boundary is an Iverson bracket: the forward differences exist only inside
the image, so ``u[j, i + 1]`` is read only where ``i + 1 < w``.

Run as a script to evaluate the energy on random data and compare with NumPy.
"""

import numpy as np

import tensorlang as tl

LAMBDA = 0.25

h, w = tl.sizes("h w")
u = tl.tensor("u", h, w)
f = tl.tensor("f", h, w)

data_term = tl.sum([h, w], lambda j, i: (u[j, i] - f[j, i]) ** 2)
smoothness = tl.sum([h, w], lambda j, i: tl.iverson(i + 1 < w, (u[j, i + 1] - u[j, i]) ** 2)
                    + tl.iverson(j + 1 < h, (u[j + 1, i] - u[j, i]) ** 2))
loss = data_term + LAMBDA * smoothness


def random_inputs(H=32, W=48, seed=0):
    rng = np.random.default_rng(seed)
    return {"u": rng.normal(size=(H, W)), "f": rng.normal(size=(H, W))}


def reference(data):
    uv, fv = data["u"], data["f"]
    return float(((uv - fv) ** 2).sum() + LAMBDA * ((np.diff(uv, axis=1) ** 2).sum() + (np.diff(uv, axis=0) ** 2).sum()))


def main():
    data = random_inputs()
    print(loss)
    value = tl.evaluate(loss, **data)
    ref = reference(data)
    print(f"energy (reference evaluator) = {value:.10g}")
    print(f"energy (NumPy)               = {ref:.10g}")
    if not np.isclose(value, ref, rtol=1e-10):
        raise SystemExit("mismatch between tensorlang and NumPy")


if __name__ == "__main__":
    main()
