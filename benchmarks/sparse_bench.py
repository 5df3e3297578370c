"""Sparse tensors on relations (issue 16, "Goals"): least squares |A x - b|^2
and the graph Dirichlet energy, gradients with respect to the dense vector
AND the sparse matrix's values.

``python -m benchmarks.sparse_bench`` (``--quick`` for a smoke run) times,
single-threaded, medians of repeated calls after a warm-up:

* ``tensorlang``: ``tl.value_and_grad`` on ``tl.sparse_tensor("A", S)`` fed a
  scipy.sparse CSR matrix (its cotangent comes back as a csr_matrix);
* ``numba-hand``: a hand-written CSR kernel (forward residual, then x's and
  A's cotangents in one pass over the rows);
* ``torch``: the values as a tensor with requires_grad, A x by gather and
  ``index_add`` (``torch.sparse.mm``'s backward builds a dense n x n gradient
  for the matrix: 80 GB at n = 1e5, so it cannot run this workload);
* ``jax-bcoo``: ``jax.experimental.sparse.BCOO`` under ``jax.jit(jax.grad)``
  (only if jax is installed).

Each method runs in its own subprocess so the reported peak memory (max RSS
minus the interpreter's RSS after imports and data) is its own.  Every
method's value and gradients are checked against a scipy reference.
Workloads: ``lsq`` at n = 100,000 rows x 10 non-zeros per row (square) and
n = 8000 at 5%; ``dirichlet`` sum_(i,j) in E w_ij (u_i - u_j)^2 on a random
graph (gradient in u and w).  Paper section: 4.3 (relations as data) and 6
(adjoints of guarded programs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

CASES = {
    "lsq-100k": ("lsq", dict(n=100_000, per_row=10)),
    "lsq-8000-5pct": ("lsq", dict(n=8000, density=0.05)),
    "dirichlet-100k": ("dirichlet", dict(n=100_000, per_row=10)),
}
QUICK = {
    "lsq-100k": ("lsq", dict(n=2000, per_row=10)),
    "lsq-8000-5pct": ("lsq", dict(n=400, density=0.05)),
    "dirichlet-100k": ("dirichlet", dict(n=2000, per_row=10)),
}
METHODS = ("tensorlang", "numba-hand", "torch", "jax-bcoo")


def make_matrix(n, per_row=None, density=None, seed=0):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    if density is not None:
        return sp.random(n, n, density=density, random_state=seed, format="csr")
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(0, n, size=n * per_row)
    M = sp.csr_matrix((rng.normal(size=n * per_row), (rows, cols)), shape=(n, n))
    M.sum_duplicates()
    return M


def data(kind, params, seed=0):
    rng = np.random.default_rng(seed + 1)
    M = make_matrix(params["n"], params.get("per_row"), params.get("density"), seed)
    if kind == "lsq":
        return {"A": M, "x": rng.normal(size=M.shape[1]), "b": rng.normal(size=M.shape[0])}
    M.data = np.abs(M.data)  # edge weights
    return {"W": M, "u": rng.normal(size=M.shape[0])}


def reference(kind, d):
    import scipy.sparse as sp

    if kind == "lsq":
        A, x, b = d["A"], d["x"], d["b"]
        r = A @ x - b
        coo = A.tocoo()
        gA = sp.csr_matrix((2 * r[coo.row] * x[coo.col], (coo.row, coo.col)), shape=A.shape)
        return float(r @ r), {"x": 2 * (A.T @ r), "A": gA}
    W, u = d["W"], d["u"]
    coo = W.tocoo()
    diff = u[coo.row] - u[coo.col]
    gu = np.bincount(coo.row, 2 * coo.data * diff, len(u)) - np.bincount(coo.col, 2 * coo.data * diff, len(u))
    gW = sp.csr_matrix((diff**2, (coo.row, coo.col)), shape=W.shape)
    return float(coo.data @ diff**2), {"u": gu, "W": gW}


# -- the methods ------------------------------------------------------------------


def tl_method(kind):
    import tensorlang as tl

    n, m = tl.sizes("n m")
    if kind == "lsq":
        S = tl.relation("S", n, m)
        A = tl.sparse_tensor("A", S)
        x, b = tl.tensor("x", m), tl.tensor("b", n)
        r = tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * x[j]) - b[i])
        loss = tl.let(r, lambda r: tl.sum(n, lambda i: r[i] * r[i]))
        vg = tl.value_and_grad(loss, wrt=[x, A])
        return lambda d: (lambda v, g: (v, {"x": g[0], "A": g[1]}))(*vg(A=d["A"], x=d["x"], b=d["b"]))
    E = tl.relation("E", n, n)
    W = tl.sparse_tensor("W", E)
    u = tl.tensor("u", n)
    loss = tl.sum([n, n], lambda i, j: W[i, j] * (u[i] - u[j]) * (u[i] - u[j]))
    vg = tl.value_and_grad(loss, wrt=[u, W])
    return lambda d: (lambda v, g: (v, {"u": g[0], "W": g[1]}))(*vg(W=d["W"], u=d["u"]))


def numba_method(kind):
    import numba
    import scipy.sparse as sp

    @numba.njit(cache=True, nogil=True)
    def lsq(indptr, indices, vals, x, b, gx, gvals):
        n = len(indptr) - 1
        loss = 0.0
        for i in range(n):
            s = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                s += vals[p] * x[indices[p]]
            r = s - b[i]
            loss += r * r
            g = 2.0 * r
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                gx[j] += g * vals[p]  # a scatter: the hand kernel may, tensorlang never does
                gvals[p] = g * x[j]
        return loss

    @numba.njit(cache=True, nogil=True)
    def dirichlet(indptr, indices, w, u, gu, gw):
        n = len(indptr) - 1
        loss = 0.0
        for i in range(n):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                d = u[i] - u[j]
                loss += w[p] * d * d
                gw[p] = d * d
                gu[i] += 2.0 * w[p] * d
                gu[j] -= 2.0 * w[p] * d
        return loss

    def run(d):
        M = d["A"] if kind == "lsq" else d["W"]
        if not M.has_canonical_format:
            M = M.tocsr()
            M.sum_duplicates()
        gv = np.empty_like(M.data)
        if kind == "lsq":
            gx = np.zeros(M.shape[1])
            v = lsq(M.indptr, M.indices, M.data, d["x"], d["b"], gx, gv)
            return v, {"x": gx, "A": sp.csr_matrix((gv, M.indices, M.indptr), shape=M.shape)}
        gu = np.zeros(M.shape[0])
        v = dirichlet(M.indptr, M.indices, M.data, d["u"], gu, gv)
        return v, {"u": gu, "W": sp.csr_matrix((gv, M.indices, M.indptr), shape=M.shape)}

    return run


def torch_method(kind):
    import scipy.sparse as sp
    import torch

    torch.set_num_threads(1)

    def run(d):
        M = d["A"] if kind == "lsq" else d["W"]
        crow, col = torch.from_numpy(M.indptr.astype(np.int64)), torch.from_numpy(M.indices.astype(np.int64))
        vals = torch.tensor(M.data, requires_grad=True)
        if kind == "lsq":
            # torch.sparse.mm's backward materializes a dense n x n gradient for
            # the matrix (80 GB at n = 1e5; 2.6 s at n = 8000), so A x is written
            # as the gather / index_add a torch user would write for grads in A
            rows = torch.repeat_interleave(torch.arange(M.shape[0]), crow[1:] - crow[:-1])
            x = torch.tensor(d["x"], requires_grad=True)
            Ax = torch.zeros(M.shape[0], dtype=vals.dtype).index_add(0, rows, vals * x[col])
            r = Ax - torch.from_numpy(d["b"])
            loss = (r * r).sum()
            loss.backward()
            g = {"x": x.grad.numpy(), "A": sp.csr_matrix((vals.grad.numpy(), M.indices, M.indptr), shape=M.shape)}
            return float(loss), g
        u = torch.tensor(d["u"], requires_grad=True)
        rows = torch.repeat_interleave(torch.arange(M.shape[0]), crow[1:] - crow[:-1])
        diff = u[rows] - u[col]
        loss = (vals * diff * diff).sum()
        loss.backward()
        return float(loss), {"u": u.grad.numpy(), "W": sp.csr_matrix((vals.grad.numpy(), M.indices, M.indptr), shape=M.shape)}

    return run


def jax_method(kind):
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import scipy.sparse as sp
    from jax.experimental import sparse as jsp

    def run(d):
        M = d["A"] if kind == "lsq" else d["W"]
        coo = M.tocoo()
        idx = jnp.stack([jnp.asarray(coo.row), jnp.asarray(coo.col)], axis=1)
        if kind == "lsq":
            def f(vals, x):
                A = jsp.BCOO((vals, idx), shape=M.shape)
                r = A @ x - d["b"]
                return jnp.sum(r * r)
            args = (jnp.asarray(coo.data), jnp.asarray(d["x"]))
        else:
            def f(vals, u):
                diff = u[idx[:, 0]] - u[idx[:, 1]]
                return jnp.sum(vals * diff * diff)
            args = (jnp.asarray(coo.data), jnp.asarray(d["u"]))
        key = (kind, M.shape, M.nnz)
        fn = _JAX.get(key)
        if fn is None:
            fn = _JAX[key] = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
        v, (gv, gd) = fn(*args)
        gv = np.asarray(gv)
        G = sp.csr_matrix((gv, (coo.row, coo.col)), shape=M.shape)
        return float(v), ({"A": G, "x": np.asarray(gd)} if kind == "lsq" else {"W": G, "u": np.asarray(gd)})

    return run


_JAX: dict = {}
FACTORIES = {"tensorlang": tl_method, "numba-hand": numba_method, "torch": torch_method, "jax-bcoo": jax_method}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(case: str, method: str, quick: bool, repeats: int) -> dict:
    """Run one method on one case in this process; returns the record."""
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    kind, params = (QUICK if quick else CASES)[case]
    try:
        fn = FACTORIES[method](kind)
    except ModuleNotFoundError as exc:
        return {"case": case, "method": method, "skipped": f"not installed: {exc.name}"}
    d = data(kind, params)
    val_ref, g_ref = reference(kind, d)
    base = _rss_mb()
    t0 = time.perf_counter()
    v, g = fn(d)  # warm-up: compiles, prepares relation data
    first = time.perf_counter() - t0
    err = abs(v - val_ref) / max(1.0, abs(val_ref))
    for k, ref in g_ref.items():
        got = g[k]
        if hasattr(ref, "toarray"):
            got = got.tocsr()
            got.sort_indices()
            ref = ref.tocsr()
            ref.sort_indices()
            if got.nnz != ref.nnz or not np.array_equal(got.indices, ref.indices):
                raise AssertionError(f"{method}: the pattern of d{k} differs from the reference")
            got, ref = got.data, ref.data
        err = max(err, float(np.max(np.abs(got - ref), initial=0.0) / max(1.0, float(np.max(np.abs(ref), initial=0.0)))))
    if err > 1e-8:
        raise AssertionError(f"{method} on {case}: relative error {err:.2e}")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(d)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    M = d.get("A", d.get("W"))
    return {
        "case": case, "method": method, "nnz": int(M.nnz), "n": int(M.shape[0]),
        "median_ms": 1e3 * statistics.median(times), "first_call_s": first,
        "peak_rss_mb": peak, "rss_before_mb": base, "rel_err": err,
    }


def main(argv=None) -> list:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sparse_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="write the records as JSON here")
    p.add_argument("--one", nargs=2, metavar=("CASE", "METHOD"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(measure(a.one[0], a.one[1], a.quick, a.repeats)))
        return []
    out = []
    for case in a.cases.split(","):
        for method in a.methods.split(","):
            cmd = [sys.executable, "-m", "benchmarks.sparse_bench", "--one", case, method, "--repeats", str(a.repeats)]
            if a.quick:
                cmd.append("--quick")
            env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            res = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if res.returncode != 0:
                rec = {"case": case, "method": method, "error": res.stderr.strip().splitlines()[-1:]}
            else:
                rec = json.loads(res.stdout.strip().splitlines()[-1])
            out.append(rec)
            if "median_ms" in rec:
                print(f"{case:16s} {method:14s} nnz={rec['nnz']:>9d}  {rec['median_ms']:9.2f} ms   "
                      f"peak RSS {rec['peak_rss_mb']:7.0f} MB (data loaded: {rec['rss_before_mb']:.0f} MB)   "
                      f"first call {rec['first_call_s']:.2f} s", flush=True)
            else:
                print(f"{case:16s} {method:14s} {rec.get('skipped') or rec.get('error')}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
