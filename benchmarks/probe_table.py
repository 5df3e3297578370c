"""Interleaved timing and the table the hand-kernel probes print
(probes_heat.py, probes_burgers.py, probes_wave.py; issue #17): every
method once to compile, then ``repeat`` rounds of all methods in turn, so
that a change of load hits all of them alike; wall and CPU medians."""

from __future__ import annotations

import os
import statistics
import time


def interleaved(methods: dict, repeat: int):
    """``(wall, cpu, load)``: median seconds per method and the load average before and after."""
    for fn in methods.values():
        fn()
    wall = {name: [] for name in methods}
    cpu = {name: [] for name in methods}
    load0 = os.getloadavg()[0]
    for _ in range(repeat):
        for name, fn in methods.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    load1 = os.getloadavg()[0]
    med = {name: statistics.median(v) for name, v in wall.items()}
    cmed = {name: statistics.median(v) for name, v in cpu.items()}
    return med, cmed, (load0, load1)


def print_table(methods: dict, repeat: int, n, T: int, err: float, steps: bool = False) -> None:
    """Time ``methods`` (which include ``tl_primal``, ``tl_grad`` and the hand
    ``primal``) and print one row each, relative to both primals; ``steps``:
    a column of CPU microseconds per time step too."""
    med, cmed, (load0, load1) = interleaved(methods, repeat)
    print(f"n = {n}, T = {T}, {repeat} interleaved reps, one thread, load average {load0:.2f} -> {load1:.2f}")
    print(f"max relative error of the hand gradients against tl.grad: {err:.1e}")
    step_head, step_rule = (" CPU us/step |", "---:|") if steps else ("", "")
    print(f"| method | median wall ms | median CPU ms |{step_head} CPU / tl primal | CPU / hand primal |")
    print(f"|---|---:|---:|{step_rule}---:|---:|")
    for name in methods:
        c = cmed[name]
        step = f" {c / T * 1e6:.1f} |" if steps else ""
        print(f"| {name} | {med[name] * 1e3:.2f} | {c * 1e3:.2f} |{step} {c / cmed['tl_primal']:.2f} "
              f"| {c / cmed['primal']:.2f} |")
    print(f"tensorlang grad/primal: {cmed['tl_grad'] / cmed['tl_primal']:.2f} (CPU), "
          f"{med['tl_grad'] / med['tl_primal']:.2f} (wall)")
