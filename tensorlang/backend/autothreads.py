"""The automatic thread choice, ``threads=None`` (issue #13 item 4: multi-core;
paper Section 4.3's loops run in parallel where the backend can).

A kernel with a parallel variant runs it when the machine has at least
``PARALLEL_MIN_CPUS`` cores, the call's work (``work_points``) is at least
``PARALLEL_MIN`` and a core is free (``cores_free``).  Those tests say when a
parallel variant *can* pay; whether it does depends on the memory system
and on what the parallel variant keeps of the serial passes.  Measured on
this 2-core machine (session 12, quiet): the deconvolution loss (m = 16) at
n = 1e5 took 0.22 ms serial and 0.43 ms on two threads, before its parallel
variant ran the serial loop nests in chunks (chunks.py; session 13: 0.24
against 0.14 ms), while the heat loop's gradient gains less than its primal.
So each plan (one call signature) also times the two
variants on its own calls (``AutoChoice``): calls 1-3 run serially and
4-6 in parallel, the first of each loading or compiling its variant and
the fastest of the other two counting, then every later call of the
signature runs the faster (the parallel one must take at most
``PARALLEL_GAIN`` of the serial time).  Each call runs one
variant once; the results of the first calls may differ from the later ones
by rounding (both are right; ``threads=k`` fixes the order for good).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from ..ir import Expr

# Measured on the 2-core development machine (benchmarks/parallel_bench.py,
# deconvolution and 5-point Laplacian losses and gradients, threads=2 vs 1):
# when both cores were free, two threads won from about 1.6e4 work points
# (1.5-2x) and lost below (thread wake-up costs 10-30 us).
PARALLEL_MIN = 1 << 15
PARALLEL_MIN_CPUS = 2
# On the same machine under load (other processes runnable on every core),
# a two-thread kernel waits for a preempted thread's time slice: 10-40 ms
# medians where one thread took 1 ms.  So the automatic choice also needs a
# core to spare: the 1-minute load average at most cpus - IDLE_MARGIN.
IDLE_MARGIN = 0.5
# the parallel variant is kept when it takes at most this share of the serial time
PARALLEL_GAIN = 0.9


def cores_free() -> bool:
    """Is a core idle enough for a parallel kernel (see ``IDLE_MARGIN``)?"""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this system: trust the core count
        return True
    return load <= (os.cpu_count() or 1) - IDLE_MARGIN


class AutoChoice:
    """One plan's choice between its serial and parallel variants (module doc)."""

    __slots__ = ("calls", "best", "choice")
    clock = staticmethod(time.perf_counter)  # tests replace it
    SAMPLES = 2  # timed calls per variant, after one that loads or compiles it

    def __init__(self):
        self.calls = 0
        self.best = [math.inf, math.inf]  # the fastest timed serial and parallel call
        self.choice = None  # "serial" or "parallel" once decided

    def run(self, serial, parallel, args, k: int):
        """Run the call on the variant chosen (or being timed)."""
        if self.choice == "serial":
            return serial(*args)
        if self.choice == "parallel":
            return parallel(*args, np.int64(k))
        n = self.calls
        self.calls = n + 1
        per = 1 + self.SAMPLES
        side, step = divmod(n, per)  # side 0: serial, 1: parallel; step 0 loads or compiles
        t = self.clock()
        res = serial(*args) if side == 0 else parallel(*args, np.int64(k))
        if step:
            self.best[side] = min(self.best[side], self.clock() - t)
        if n == 2 * per - 1:
            self.choice = "parallel" if self.best[1] <= PARALLEL_GAIN * self.best[0] else "serial"
        return res


def work_points(prepared: Expr, sizes: dict) -> int:
    """The points of the program's top-level loop nests at ``sizes``: for each
    binding, its gen extents times the extents of the sums directly under
    them (brackets ignored: an upper bound of the work the loops visit)."""
    from ..ir import Iverson, gens, lets, sums

    def at(n) -> int:
        return max(0, n.const + sum(c * sizes.get(sym.name, 0) for sym, c in n.terms))

    binds, out = lets(prepared)
    total = 0
    for rhs in [e for _, e in binds] + [out]:
        gb, body = gens(rhs)
        while isinstance(body, Iverson):
            body = body.body
        sb, _ = sums(body)
        if not gb and not sb:
            continue
        pts = 1
        for _, n in gb + sb:
            pts *= at(n)
        total += pts
    return total


__all__ = ["AutoChoice", "cores_free", "work_points", "PARALLEL_MIN", "PARALLEL_MIN_CPUS", "IDLE_MARGIN"]
