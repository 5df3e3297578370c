"""Multi-core speed-up and the parallel threshold (issue #13, item 4).

``python -m benchmarks.parallel_bench [--sizes ...] [--repeat R]`` times the
deconvolution loss (m = 16) and the 5-point Laplacian prior, their compiled
loss and ``tl.grad``, with ``threads=1`` and ``threads=2`` (kernels built
once; medians of R timed calls, each the mean of enough calls to last
~20 ms; the best of them is printed too: what the machine does when no
other process holds a core), and prints the speed-up per size and the work (``work_points``)
of each kernel: the smallest work at which two threads win is the
threshold ``backend.api.PARALLEL_MIN``.  The machine is shared: run it a
few times and read medians.

``--interleaved`` measures in one process instead, the calls alternated
round by round (``--rounds``): one thread, two threads with the inputs'
NaN/inf scan kept serial (``PARALLEL_SCAN_MIN`` raised past every size) and
two threads as shipped (the scan on both threads, backend/finite.py), and
prints medians over the rounds.  This machine's single-thread times are
bimodal between processes (the deconvolution gradient at n = 1e6: 10-11 or
15-18 ms, either way on either commit), so the A/B of a change to the call
path is read in one process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("TENSORLANG_RUNTIME", "compiled")

import tensorlang as tl  # noqa: E402
from tensorlang.backend.api import work_points  # noqa: E402


def deconvolution(N: int, M: int = 16):
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    rng = np.random.default_rng(0)
    data = dict(x=rng.standard_normal(N + M - 1), c=rng.standard_normal(M), z=rng.standard_normal(N))
    return loss, [x, c], data


def laplacian(N: int):
    """sum over the interior of (4 u - neighbours)^2 plus a data term (u - f)^2."""
    n = tl.size("n")
    u, f = tl.tensor("u", n, n), tl.tensor("f", n, n)
    inner = lambda i, j: (i >= 1) & (i < n - 1) & (j >= 1) & (j < n - 1)  # noqa: E731
    lap = lambda i, j: 4 * u[i, j] - u[i - 1, j] - u[i + 1, j] - u[i, j - 1] - u[i, j + 1]  # noqa: E731
    loss = tl.sum([n, n], lambda i, j: tl.iverson(inner(i, j), lap(i, j) ** 2) + (u[i, j] - f[i, j]) ** 2)
    rng = np.random.default_rng(0)
    data = dict(u=rng.standard_normal((N, N)), f=rng.standard_normal((N, N)))
    return loss, [u], data


def per_call(fn, repeat: int) -> float:
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(0.02 / one))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times), min(times)


def measure(name: str, build, sizes, repeat: int) -> list:
    rows = []
    for N in sizes:
        loss, wrt, data = build(N)
        for what in ("loss", "grad"):
            t, best = {}, {}
            for k in (1, 2):
                fn = tl.compile(loss, threads=k) if what == "loss" else tl.grad(loss, wrt=wrt, threads=k)
                t[k], best[k] = per_call(lambda: fn(**data), repeat)
            prog = loss if what == "loss" else tl.grad(loss, wrt=wrt).program
            from tensorlang.driver import prepare

            sizes_ = _sizes(name, N)
            work = work_points(prepare(prog), sizes_)
            rows.append((name, what, N, work, t[1] * 1e3, t[2] * 1e3, t[1] / t[2], best[1] / best[2]))
            print(f"{name:14s} {what:5s} N={N:>8d} work={work:>10d}  median: 1 thread {t[1] * 1e3:9.3f} ms  "
                  f"2 threads {t[2] * 1e3:9.3f} ms  speed-up {t[1] / t[2]:5.2f}  (best-of: {best[1] / best[2]:5.2f})",
                  flush=True)
    return rows


def interleaved(name: str, build, sizes, rounds: int) -> None:
    from tensorlang.backend import dispatch

    shipped = dispatch.PARALLEL_SCAN_MIN
    for N in sizes:
        loss, wrt, data = build(N)
        fns = {"loss": {k: tl.compile(loss, threads=k) for k in (1, 2)},
               "grad": {k: tl.grad(loss, wrt=wrt, threads=k) for k in (1, 2)}}
        for what, by in fns.items():
            t = {"1 thread": [], "2, serial scan": [], "2 threads": []}
            try:
                for _ in range(rounds):
                    t["1 thread"].append(per_call(lambda: by[1](**data), 5)[0])
                    dispatch.PARALLEL_SCAN_MIN = 1 << 62
                    t["2, serial scan"].append(per_call(lambda: by[2](**data), 5)[0])
                    dispatch.PARALLEL_SCAN_MIN = shipped
                    t["2 threads"].append(per_call(lambda: by[2](**data), 5)[0])
            finally:
                dispatch.PARALLEL_SCAN_MIN = shipped
            m = {k: statistics.median(v) * 1e3 for k, v in t.items()}
            print(f"{name:14s} {what:5s} N={N:>8d}  " + "  ".join(f"{k} {v:8.3f} ms" for k, v in m.items())
                  + f"  speed-up {m['1 thread'] / m['2, serial scan']:5.2f} -> {m['1 thread'] / m['2 threads']:5.2f}",
                  flush=True)


def _sizes(name, N):
    return {"n": N, "m": 16} if name == "deconvolution" else {"n": N}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deconv", type=int, nargs="*", default=[1000, 4000, 16000, 100_000, 1_000_000])
    ap.add_argument("--laplacian", type=int, nargs="*", default=[32, 64, 128, 256, 512, 1024])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--interleaved", action="store_true", help="one process, variants alternated (module doc)")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    if a.interleaved:
        interleaved("deconvolution", deconvolution, a.deconv, a.rounds)
        interleaved("laplacian", laplacian, a.laplacian, a.rounds)
        return
    measure("deconvolution", deconvolution, a.deconv, a.repeat)
    measure("laplacian", laplacian, a.laplacian, a.repeat)


if __name__ == "__main__":
    main()
