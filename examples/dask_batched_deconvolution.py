"""Batched deconvolution on a Dask cluster (paper Section 2.3; issue #19).

One kernel ``w`` of length m fit to B recorded signals ``x[k]`` and their
targets ``z[k]``:

    l(x, z; w) = sum[k:B] sum[i:n] (sum[j:m] x[k, i - j + m - 1] · w[j] - z[k, i])²

The loss is a sum over the batch of per-signal terms, so
``tensorlang.dask.value_and_grad(..., batch=B)`` runs one task per chunk of
signals and sums the kernel's gradient over the chunks with a tree
reduction; the signals' own gradient stays on the cluster as a dask array.

    python examples/dask_batched_deconvolution.py                       # a local 2-process cluster
    python examples/dask_batched_deconvolution.py tcp://scheduler:8786  # an existing cluster

Checks the sharded value and gradients against single-process
``tl.value_and_grad`` on the whole batch, then takes a few gradient steps.
"""

import sys

import numpy as np

import tensorlang as tl
import tensorlang.dask as tld

B, n, m = tl.sizes("B n m")
x = tl.tensor("x", B, n + m - 1)
z = tl.tensor("z", B, n)
w = tl.tensor("w", m)

y = tl.gen([B, n], lambda k, i: tl.sum(m, lambda j: x[k, i - j + m - 1] * w[j]))
loss = tl.sum([B, n], lambda k, i: (y[k, i] - z[k, i]) ** 2)


def main(address=None):
    import dask.array as da
    from distributed import Client, LocalCluster

    cluster = None
    if address is None:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
        address = cluster
    with Client(address) as client:
        print(client)
        signals, length, taps = 64, 2000, 8
        rng = np.random.default_rng(0)
        true_w = rng.normal(size=taps)
        X = da.random.default_rng(1).normal(size=(signals, length + taps - 1), chunks=(8, -1))
        Z = da.map_blocks(lambda xb: np.stack([np.convolve(r, true_w, mode="valid") for r in xb]),
                          X, chunks=(8, length), dtype=float)
        X, Z = client.persist([X, Z])

        vg = tld.value_and_grad(loss, wrt=[x, w], batch=B)
        W = np.zeros(taps)
        value, (gx, gw) = vg(x=X, z=Z, w=W)
        v0, (gx0, gw0) = tl.value_and_grad(loss, wrt=[x, w])(x=X.compute(), z=Z.compute(), w=W)
        print(f"sharded value {value:.10g}, single process {v0:.10g}")
        print(f"max |gw - gw0| = {np.abs(gw - gw0).max():.2e}, max |gx - gx0| = {np.abs(gx.compute() - gx0).max():.2e}")
        if not (np.isclose(value, v0, rtol=1e-10) and np.allclose(gw, gw0, rtol=1e-10)
                and np.allclose(gx.compute(), gx0, rtol=1e-10)):
            raise SystemExit("sharded and single-process results differ")

        g = tld.grad(loss, wrt=w, batch=B)
        step = 0.5 / float((X ** 2).sum().compute())  # below 1/L for this least-squares loss
        for it in range(5):
            W = W - step * g(x=X, z=Z, w=W)
            print(f"step {it + 1}: |w - w_true| = {np.linalg.norm(W - true_w):.4f}")
    if cluster is not None:
        cluster.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
