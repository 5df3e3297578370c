"""Machine-limit probes (issue #13, goal "the deconvolution primal within 2x
of this machine's limit").

Two probes, single-threaded, float64, compiled by the same Numba as the
kernels:

* **STREAM triad** ``a[i] = b[i] + s * c[i]`` over arrays far larger than
  the caches: the sustainable memory bandwidth (bytes counted as STREAM
  does, 24 per element: two reads and one write).
* **Peak FMA**: ``x[i] = x[i] * a + b`` swept many times over a small array
  that stays in L1, so the loop is bound by the floating-point units, not
  memory (2 flops per element per sweep).

The deconvolution's primal ``sum_i (sum_j x[i-j+m-1] c[j] - z[i])^2`` moves
at least 16 bytes per output (x and z read once) and does ``2m + 3`` flops
per output; its limit is the larger of the two times, and the report gives
tensorlang's compiled primal against it.

    python -m benchmarks.probes [--n 4000000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def _median_time(fn, repeat: int) -> float:
    fn()  # compile / warm the caches
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def stream_triad(n: int, repeat: int) -> float:
    """Sustained bandwidth in GB/s (24 bytes per element, as STREAM counts)."""
    import numba

    @numba.njit(fastmath=True, boundscheck=False)
    def triad(a, b, c, s):
        for i in range(a.shape[0]):
            a[i] = b[i] + s * c[i]

    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    t = _median_time(lambda: triad(a, b, c, 3.0), repeat)
    return 24.0 * n / t / 1e9


def peak_fma(repeat: int, width: int = 512, sweeps: int = 200_000) -> float:
    """Sustained double-precision GFLOP/s of a vectorized multiply-add loop."""
    import numba

    @numba.njit(fastmath=True, boundscheck=False)
    def fma(x, a, b, sweeps):
        for _ in range(sweeps):
            for i in range(x.shape[0]):
                x[i] = x[i] * a + b
        return x[0]

    x = np.full(width, 0.5)
    # a * x + b with a < 1 keeps x bounded (converges to b / (1 - a)): no denormals or overflow
    t = _median_time(lambda: fma(x, 0.999, 0.001, sweeps), repeat)
    return 2.0 * width * sweeps / t / 1e9


def deconv_primal(n: int, m: int, repeat: int) -> float:
    """tensorlang's compiled deconvolution loss (one thread), seconds."""
    import tensorlang as tl

    from .workloads import _deconv_data, _deconv_program

    loss, _ = _deconv_program()
    f = tl.compile(loss, threads=1)
    d = _deconv_data({"n": n, "m": m}, np.random.default_rng(0))
    return _median_time(lambda: f(n=n, m=m, **d), repeat)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4_000_000, help="deconvolution length (and STREAM array size x4)")
    ap.add_argument("--ms", type=int, nargs="*", default=[3, 16, 64], help="deconvolution filter lengths")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    bw = stream_triad(4 * args.n, args.repeat)
    gf = peak_fma(args.repeat)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f}")
    print(f"STREAM triad: {bw:.1f} GB/s; peak FMA: {gf:.1f} GFLOP/s (one thread, float64)")
    print("| m | n | bytes limit (ms) | flops limit (ms) | limit (ms) | tensorlang primal (ms) | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    n = args.n
    for m in args.ms:
        t_mem = 16.0 * n / (bw * 1e9)
        t_flop = (2.0 * m + 3.0) * n / (gf * 1e9)
        limit = max(t_mem, t_flop)
        t = deconv_primal(n, m, args.repeat)
        print(f"| {m} | {n} | {t_mem * 1e3:.2f} | {t_flop * 1e3:.2f} | {limit * 1e3:.2f} | {t * 1e3:.2f} | {t / limit:.2f} |")


if __name__ == "__main__":
    main()
