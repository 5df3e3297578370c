"""One method's benchmark subprocess: ``python -m benchmarks.worker`` (config as JSON on stdin).

Runs a list of (workload, sizes) tasks for ONE method, streaming one line per
event to stdout prefixed with ``@@BENCH@@`` (framework chatter on stdout is
ignored by the runner).  For each task: build the data, compute the NumPy
reference, build the method, time the first gradient call (compile time),
check the gradient against the reference BEFORE any timing (a wrong gradient is
FAILED and not timed), then the primal likewise, then warm up and take medians.
Peak memory is sampled from /proc/self/statm during the task.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import resource
import statistics
import sys
import threading
import time
import traceback

import numpy as np

from .methods import NotApplicable, NotAvailable
from .workloads import BY_NAME

TAG = "@@BENCH@@ "
PAGE = os.sysconf("SC_PAGE_SIZE")

MODULES = {
    "jax": "benchmarks.baselines.jax_impl",
    "torch": "benchmarks.baselines.torch_impl",
    "autograd": "benchmarks.baselines.autograd_impl",
    "numba-hand": "benchmarks.baselines.numba_impl",
}


def emit(**event):
    sys.stdout.write(TAG + json.dumps(event, default=_jsonable) + "\n")
    sys.stdout.flush()


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakSampler:
    """Samples the resident set size every few milliseconds in a daemon thread."""

    def __init__(self, period: float = 0.005):
        self.period = period
        self.peak = rss_bytes()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.period):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss_bytes())


def max_rel_err(got: dict, ref: dict) -> tuple[float, str]:
    """Worst max|got - ref| / max|ref| over the wrt inputs; inf with a reason on a shape/name mismatch."""
    worst, why = 0.0, ""
    for name, r in ref.items():
        if name not in got:
            return float("inf"), f"no gradient for {name}"
        g = np.asarray(got[name], dtype=np.float64)
        if g.shape != r.shape:
            return float("inf"), f"gradient for {name} has shape {g.shape}, expected {r.shape}"
        if not np.all(np.isfinite(g)):
            return float("inf"), f"gradient for {name} is not finite"
        scale = max(float(np.abs(r).max()) if r.size else 0.0, 1e-300)
        e = float(np.abs(g - r).max()) / scale if r.size else 0.0
        if e > worst:
            worst, why = e, f"gradient for {name}"
    return worst, why


def measure(fn, repeats: int, budget: float) -> list:
    times = []
    while len(times) < repeats and (sum(times) < budget or not times):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def run_task(method: str, builder, task: dict, cfg: dict) -> dict:
    w = BY_NAME[task["workload"]]
    sizes = task["sizes"]
    res = {"status": "ERROR"}
    data = w.make_data(sizes, cfg["seed"])
    if method == "tensorlang-cost":
        try:
            res.update(status="ok", costs=builder(w, data, sizes))
        except NotAvailable as exc:
            res.update(status="not available", reason=str(exc))
        except Exception as exc:  # reported, never hidden
            res.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}"[:500])
        return res
    ref_value, ref_grad = w.loss_ref(data), w.grad_ref(data)
    rss0 = rss_bytes()
    tol, repeats, budget = cfg["tol"], cfg["repeats"], cfg["budget"]
    with PeakSampler() as peak:
        try:
            impl = builder(w, data, sizes)
            res["note"] = impl.note if isinstance(impl.note, str) else ""
            t = time.perf_counter()
            gfn = impl.make_grad()
            gout = gfn()
            res["compile_grad_s"] = time.perf_counter() - t
            err, why = max_rel_err(impl.grads(gout), ref_grad)
            res["max_rel_err"] = err
            if not err <= tol:
                res.update(status="FAILED", reason=f"{why}: max rel error {err:.3g} > {tol:g}")
                return res
            t = time.perf_counter()
            pfn = impl.make_primal()
            pout = pfn()
            res["compile_primal_s"] = time.perf_counter() - t
            value = impl.value(pout)
            verr = abs(value - ref_value) / max(abs(ref_value), 1e-300)
            res["value_rel_err"] = verr
            if not verr <= tol:
                res.update(status="FAILED", reason=f"loss value {value!r} vs reference {ref_value!r}")
                return res
            # warm up unless the first (compiling) call alone was already over the budget
            if res["compile_grad_s"] < budget:
                gfn()
            if res["compile_primal_s"] < budget:
                pfn()
            gt = measure(gfn, repeats, budget)
            pt = measure(pfn, repeats, budget)
            res["note"] = impl.note() if callable(impl.note) else impl.note
            res.update(status="ok", grad_s=statistics.median(gt), primal_s=statistics.median(pt),
                       grad_repeats=len(gt), primal_repeats=len(pt))
            res["ratio"] = res["grad_s"] / res["primal_s"] if res["primal_s"] > 0 else None
        except NotAvailable as exc:
            res.update(status="not available", reason=str(exc))
        except NotApplicable as exc:
            res.update(status="n/a", reason=str(exc))
        except MemoryError:
            res.update(status="OOM", reason="MemoryError")
        except Exception as exc:
            res.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}"[:500],
                       traceback=traceback.format_exc()[-2000:])
    res["peak_rss_mb"] = peak.peak / 2**20
    res["peak_delta_mb"] = max(0, peak.peak - rss0) / 2**20
    return res


def load(method: str):
    """(builder, versions) for a method; raises NotAvailable when its package is missing."""
    if method in ("tensorlang", "tensorlang-naive", "tensorlang-cost"):
        from . import tl_impl

        versions = {}
        if method == "tensorlang-cost":
            return tl_impl.costs, versions
        naive = method == "tensorlang-naive"
        return (lambda w, d, s: tl_impl.build(w, d, s, naive=naive)), versions
    try:
        mod = importlib.import_module(MODULES[method])
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("benchmarks", "tensorlang"):
            raise  # one of our own modules failing to import is a bug, not a missing package
        raise NotAvailable(f"{exc.name or exc} is not installed") from None
    versions = {}
    for pkg in {"jax": ("jax", "jaxlib"), "torch": ("torch",), "autograd": ("autograd",),
                "numba-hand": ("numba", "llvmlite")}[method]:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except Exception:  # not installed as a distribution: the table still names it
            versions[pkg] = "?"
    if method == "torch":
        import torch

        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
        versions["torch_threads"] = torch.get_num_threads()
    return (lambda w, d, s: mod.build(w, d)), versions


def pin_cores() -> None:
    """Confine this process to BENCH_THREADS cores before any framework starts its
    threads.  The thread variables are not enough for JAX: with them set, XLA's CPU
    runtime still ran the MLP gradient's independent products on two pool threads
    at once (55 and 54 ticks of CPU on two threads in one timed loop, session 7),
    so its "single-thread" rows used both cores."""
    want = int(os.environ.get("BENCH_THREADS", "0") or 0)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if 0 < want < len(cores):
        os.sched_setaffinity(0, cores[:want])


def main():
    cfg = json.loads(sys.stdin.read())
    method = cfg["method"]
    pin_cores()
    try:
        builder, versions = load(method)
    except NotAvailable as exc:
        for task in cfg["tasks"]:
            emit(event="result", id=task["id"], status="not available", reason=str(exc))
        return
    except Exception as exc:
        for task in cfg["tasks"]:
            emit(event="result", id=task["id"], status="ERROR", reason=f"import failed: {type(exc).__name__}: {exc}")
        return
    emit(event="env", versions=versions)
    for task in cfg["tasks"]:
        emit(event="start", id=task["id"])
        res = run_task(method, builder, task, cfg)
        res["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        emit(event="result", id=task["id"], **res)


if __name__ == "__main__":
    main()
