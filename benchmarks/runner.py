"""The benchmark runner: ``python -m benchmarks`` / ``tensorlang bench`` (issue #8).

Usage: ``python -m benchmarks [--quick] [--only WORKLOAD ...] [--sizes N ...] [--out DIR]
[--methods m1,m2] [--timeout S] [--threads T] [--mem-limit-gb G]``.

Every method runs in its own subprocess (benchmarks/worker.py) with its thread
count fixed through the environment, a per-task timeout and a resident-memory
limit enforced from here; a missing package, a crash, a timeout or a wrong
gradient becomes a row of the table, never a silent gap.  After a timeout or a
memory kill the method's larger sizes of that workload are skipped.
Outputs in --out: results.json, results.md, one log-log PNG per workload and gradients.png
(every workload's gradient time against size on one page).  Progress: one rich bar per method
on a terminal, plain result lines otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import workloads as W
from .methods import METHODS

ROOT = Path(__file__).resolve().parent.parent
TAG = b"@@BENCH@@ "
COST = "tensorlang-cost"
# slowest first, so that with --jobs 2 the compile-heavy tensorlang runs overlap the baselines
RUN_ORDER = ("tensorlang-naive", "tensorlang", COST, "numba-hand", "jax", "torch", "autograd")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CI smoke run: tiny sizes, few repeats, still checks every result")
    p.add_argument("--only", nargs="+", action="extend", metavar="WORKLOAD",
                   help="workload names, prefixes (deconv) or numbers (1..8)")
    p.add_argument("--sizes", nargs="+", type=int, metavar="N", help="values of each workload's primary size")
    p.add_argument("--out", default="bench-out", help="output directory (default: bench-out)")
    p.add_argument("--methods", default=",".join(METHODS + (COST,)),
                   help=f"comma-separated subset of {', '.join(METHODS + (COST,))}")
    p.add_argument("--timeout", type=float, help="seconds per task (default 10 quick, 600 full)")
    p.add_argument("--repeats", type=int, help="max timed repeats (default 3 quick, 7 full)")
    p.add_argument("--budget", type=float, help="seconds of timed calls per measurement (default 0.5 quick, 10 full)")
    p.add_argument("--threads", type=int, default=1, help="threads for every framework (default 1)")
    p.add_argument("--jobs", type=int, help="methods run at the same time (default 2 quick, 1 full: timings need a quiet machine)")
    p.add_argument("--mem-limit-gb", type=float, default=8.0, help="kill a method's process above this RSS")
    p.add_argument("--tol", type=float, default=1e-6, help="max relative error of a gradient")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--kernel-cache", choices=("fresh", "shared"),
                   help="tensorlang kernel cache: fresh (in --out, emptied first: compile times are real; "
                        "default for full runs) or shared (the user's cache; default for --quick)")
    a = p.parse_args(argv)
    _check_args(a)
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in METHODS + (COST,)]
    if bad:
        p.error(f"unknown method(s) {bad}")
    a.timeout = a.timeout or (10.0 if a.quick else 600.0)
    a.repeats = a.repeats or (3 if a.quick else 7)
    a.budget = a.budget if a.budget is not None else (0.5 if a.quick else 10.0)
    a.jobs = max(1, a.jobs or (2 if a.quick else 1))
    a.kernel_cache = a.kernel_cache or ("shared" if a.quick else "fresh")
    return a


def _usage_error(msg: str):
    """A bad argument: one line on stderr, exit status 2 (as for any usage error)."""
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def _check_args(a) -> None:
    import math

    for v in a.sizes or ():
        if v < 1:
            _usage_error(f"--sizes {v}: every size must be an int >= 1")
    for name in ("timeout", "budget", "mem_limit_gb", "tol"):
        v = getattr(a, name)
        if v is not None and (not math.isfinite(v) or v < 0 or (v == 0 and name != "budget")):
            _usage_error(f"--{name.replace('_', '-')} {v}: must be a positive number")
    for name in ("repeats", "threads", "jobs"):
        v = getattr(a, name)
        if v is not None and v < 1:
            _usage_error(f"--{name} {v}: must be an int >= 1")


def plan(args) -> list:
    """The task list: one entry per (workload, sizes), sizes ascending within a workload."""
    tasks = []
    for w in W.select(args.only):
        if args.sizes:
            size_list = [w.size_dict(v) for v in sorted(args.sizes)]
        elif args.quick:
            size_list = [dict(w.quick)]
        else:
            size_list = [w.size_dict(v) for v in w.sizes]
        for s in size_list:
            tasks.append({"id": f"{w.name}|{json.dumps(s, sort_keys=True)}", "workload": w.name, "sizes": s})
    return tasks


def thread_env(threads: int) -> dict:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[k] = str(threads)
    env["BENCH_THREADS"] = str(threads)
    if threads == 1:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _child_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_method(method: str, tasks: list, args, env: dict, log) -> tuple[dict, dict]:
    """Run ``tasks`` for one method in worker subprocesses; returns ({task id: result}, versions)."""
    results, versions = {}, {}
    pending = list(tasks)
    limit = int(args.mem_limit_gb * 2**30)
    cfg = {"method": method, "seed": args.seed, "tol": args.tol, "repeats": args.repeats, "budget": args.budget}
    while pending:
        errpath = Path(args.out) / f".stderr-{method}.txt"
        with open(errpath, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "benchmarks.worker"], cwd=ROOT, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    start_new_session=True)
            proc.stdin.write(json.dumps({**cfg, "tasks": pending}).encode())
            proc.stdin.close()
            fd = proc.stdout.fileno()
            buf, current, since, peak, killed = b"", None, time.monotonic(), 0, None
            while True:
                ready, _, _ = select.select([fd], [], [], 0.05)
                if ready:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.startswith(TAG):
                            continue
                        ev = json.loads(line[len(TAG):])
                        kind = ev.pop("event")
                        if kind == "env":
                            versions = ev["versions"]
                        elif kind == "start":
                            current, since, peak = ev["id"], time.monotonic(), 0
                            log.start(method, current)
                        elif kind == "result":
                            tid = ev.pop("id")
                            results[tid] = ev
                            _log_result(log, method, tid, ev)
                            current, since = None, time.monotonic()
                rss = _child_rss(proc.pid)
                peak = max(peak, rss)
                if rss > limit:
                    killed = ("OOM", f"resident memory above {args.mem_limit_gb:g} GB, killed")
                elif time.monotonic() - since > args.timeout:
                    killed = ("TIMEOUT", f"no result within {args.timeout:g} s")
                if killed:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    break
            rc = proc.wait()
            proc.stdout.close()
        tail = errpath.read_text(errors="replace")[-1500:]
        before = len(pending)
        pending = [t for t in pending if t["id"] not in results]
        if not pending:
            break
        # the task that was running (or, if the worker died between tasks, the next one) failed
        failed = current or pending[0]["id"]
        if killed:
            status, reason = killed
        else:
            status, reason = "CRASH", f"worker exited with code {rc}; stderr: {tail.strip()[-600:]}"
        results[failed] = {"status": status, "reason": reason, "peak_rss_mb": peak / 2**20}
        _log_result(log, method, failed, results[failed])
        wname = failed.split("|", 1)[0]
        after_failed = False
        for t in pending:
            if t["id"] == failed:
                after_failed = True
            elif after_failed and t["workload"] == wname and status in ("OOM", "TIMEOUT"):
                results[t["id"]] = {"status": "skipped", "reason": f"{status} at a smaller size"}
                log.done(method)
        pending = [t for t in pending if t["id"] not in results]
        if len(pending) >= before:  # no progress: never loop forever
            for t in pending:
                results[t["id"]] = {"status": "CRASH", "reason": reason}
                log.done(method)
            break
    return results, versions


class Progress:
    """Where the run reports: one rich progress bar per method (tasks done, the task running, elapsed
    time) with the result lines printed above the bars on a terminal; plain lines on stderr otherwise
    (logs, CI), so that nothing is lost when no one watches."""

    def __init__(self, methods, n_tasks: int, stream=None):
        from rich.console import Console

        self.stream = stream or sys.stderr
        self.console = Console(file=self.stream)
        self.bars = None
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bars, TextColumn, TimeElapsedColumn

            self.bars = Bars(TextColumn("[bold]{task.fields[method]:<16}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.description}"), console=self.console)
            self.ids = {m: self.bars.add_task("waiting", total=n_tasks, method=m) for m in methods}

    def __enter__(self):
        if self.bars:
            self.bars.start()
        return self

    def __exit__(self, *exc):
        if self.bars:
            self.bars.stop()

    def line(self, text: str) -> None:
        if self.bars:
            self.bars.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, method: str, tid: str) -> None:
        if self.bars:
            self.bars.update(self.ids[method], description=tid.replace("|", " "))

    def done(self, method: str) -> None:
        if self.bars:
            self.bars.update(self.ids[method], advance=1, description="")


def _log_result(log, method, tid, ev):
    w, s = tid.split("|", 1)
    msg = ev["status"]
    if ev["status"] == "ok" and "grad_s" in ev:
        msg += f"  grad {ev['grad_s'] * 1e3:.3g} ms  primal {ev['primal_s'] * 1e3:.3g} ms  err {ev.get('max_rel_err', 0):.1e}"
    elif ev["status"] == "ok" and "costs" in ev:
        msg += f"  {ev['costs']}"
    elif ev.get("reason"):
        msg += f"  ({ev['reason'][:140]})"
    log.line(f"[{method:16s}] {w:14s} {s:32s} {msg}")
    log.done(method)


def machine_info(threads: int) -> dict:
    info = {
        "platform": platform.platform(), "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "threads": threads,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": round(os.getloadavg()[0], 2),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, StopIteration):
        pass
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                            text=True, timeout=10).stdout.strip()
    except Exception:  # not a checkout: the rest of the info still stands
        info["git_commit"] = "?"
    import numpy

    info["numpy"] = numpy.__version__
    return info


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tasks = plan(args)
    env = thread_env(args.threads)
    if not args.quick:
        # measure the compiled path even where tensorlang's runtime would pick the evaluator for a small input
        env.setdefault("TENSORLANG_RUNTIME", "compiled")
    if args.kernel_cache == "fresh":
        cache = (out / ".tensorlang-cache").resolve()
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir()
        env["TENSORLANG_CACHE_DIR"] = str(cache)
    meta = {"command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
            "mode": "quick" if args.quick else "full", "machine": machine_info(args.threads),
            "thread_env": {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                               "NUMBA_NUM_THREADS", "XLA_FLAGS", "TENSORLANG_RUNTIME") if k in env},
            "jobs": args.jobs, "kernel_cache": args.kernel_cache, "timeout_s": args.timeout, "repeats": args.repeats, "budget_s": args.budget,
            "mem_limit_gb": args.mem_limit_gb, "tol": args.tol, "seed": args.seed}

    order = [m for m in RUN_ORDER if m in args.methods]
    log = Progress(order, len(tasks))
    # the NumPy references are the oracle of every row: check them against finite differences first
    ref_checks = {}
    for w in W.select(args.only):
        err = W.finite_difference_check(w)
        ref_checks[w.name] = {"fd_max_rel_err": err, "ok": err < 1e-5}
        if err >= 1e-5:
            log.line(f"WARNING: NumPy reference gradient of {w.name} disagrees with finite differences ({err:.2e})")

    rows, costs, versions = [], [], {}
    with log, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {m: pool.submit(run_method, m, tasks, args, env, log) for m in order}
        done = {m: f.result() for m, f in futures.items()}
    for method in order:
        res, ver = done[method]
        versions[method] = ver
        for t in tasks:
            r = res.get(t["id"], {"status": "CRASH", "reason": "no result"})
            w = W.BY_NAME[t["workload"]]
            row = {"workload": w.name, "number": w.number, "primary": w.primary, "size": t["sizes"][w.primary],
                   "sizes": t["sizes"], "method": method, **r}
            (costs if method == COST else rows).append(row)
    meta["versions"] = versions
    meta["elapsed_s"] = time.monotonic() - t0
    meta["loadavg_end"] = round(os.getloadavg()[0], 2)
    doc = {"meta": meta, "reference_checks": ref_checks, "results": rows, "costs": costs,
           "workloads": {w.name: {"number": w.number, "title": w.title, "primary": w.primary, "wrt": list(w.wrt)}
                         for w in W.select(args.only)}}
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
    from . import report

    (out / "results.md").write_text(report.markdown(doc))
    if not args.no_plots:
        try:
            report.plots(doc, out)
        except ImportError as exc:
            log.line(f"plots skipped: {exc}")
    n_bad = sum(r["status"] in ("FAILED", "ERROR", "CRASH") for r in rows + costs)
    log.line(f"wrote {out}/results.json, results.md ({len(rows)} rows, {n_bad} failed/error/crash) "
             f"in {meta['elapsed_s']:.0f} s")
    return 1 if any(r["status"] == "FAILED" for r in rows) or not all(c["ok"] for c in ref_checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
