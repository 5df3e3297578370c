"""Dispatch overhead of a tiny compiled program (issue #13, item 7).

``python -m benchmarks.dispatch_bench`` times, in-process with ``timeit``
(median of many repeats, microseconds per call): a compiled loss, its
``tl.grad``, its ``tl.value_and_grad``, and a bare call of the kernel's
Numba entry with prepared arguments (the floor).  Runtime is 'compiled' so
the kernel runs even at tiny sizes.

Measured on the shared 2-core machine (load average 5-6 from other
sessions; medians of 3 runs): before the fast path loss 12-16 us, grad
28-37 us, value_and_grad 48-64 us (two kernels); after it loss 5-11 us,
grad 5-10 us, value_and_grad 6-12 us (one kernel); a bare Numba call 0.48 us.
"""

from __future__ import annotations

import statistics
import timeit

import numpy as np

import tensorlang as tl
from tensorlang.runtime import make_callable


def tiny_loss():
    n = tl.size("n")
    x = tl.tensor("x", n)
    w = tl.tensor("w", n)
    return tl.sum(n, lambda i: w[i] * x[i] * x[i]), x


def per_call_us(fn, number=2000, repeat=15) -> float:
    fn()  # compile / plan
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def main() -> dict:
    loss, x = tiny_loss()
    xs = np.linspace(0.1, 1.0, 8)
    ws = np.linspace(1.0, 2.0, 8)
    import os

    # before the callables are made: the runtime is chosen when they are
    # (under "auto", n = 8 would run on the reference evaluator)
    os.environ["TENSORLANG_RUNTIME"] = "compiled"
    f = make_callable(loss, runtime="compiled")
    g = tl.grad(loss, wrt=x)
    vg = tl.value_and_grad(loss, wrt=x)
    out = {"loss": per_call_us(lambda: f(x=xs, w=ws))}
    out["grad"] = per_call_us(lambda: g(x=xs, w=ws))
    out["value_and_grad"] = per_call_us(lambda: vg(x=xs, w=ws))
    k = f._get()
    var = k.variant("float64")
    args = [np.int64(8)] + [xs, ws][: len(var.spec["inputs"])]
    spec_names = [name for name, _, _ in var.spec["inputs"]]
    vals = {"x": xs, "w": ws}
    args = [np.int64(8)] + [vals[nm] for nm in spec_names] + []
    out["bare numba"] = per_call_us(lambda: var.module.kernel_serial(*args))
    return out


if __name__ == "__main__":
    for name, us in main().items():
        print(f"{name:16s} {us:8.2f} us/call")
