"""Compile latency (issue #14 item 6): the ``compile`` section of the benchmarks.

``python -m benchmarks.compile_bench [--only W ...] [--chain N ...] [--out DIR]``

Three measurements, each in fresh processes so that nothing is warm by accident:

* **cold**: per benchmark program (benchmarks/workloads.py), a new process with
  an empty kernel cache: seconds from after ``import tensorlang`` to the first
  gradient (``tl.grad`` built, then called once at the workload's quick sizes
  with ``TENSORLANG_RUNTIME=compiled``, so the kernel is compiled), split into
  the stages of ``passes.profile`` (sharing … simplify, bounds, backend) and
  the first kernel call (Numba's JIT plus the run).  Median and worst over the
  programs; goals: median <= 1 s, worst <= 3 s.
* **warm**: the same, in a second new process with the cache the cold run
  filled (derived programs: backend/derived_cache.py; kernels:
  backend/cache.py; scalar functions: Numba's cache, ``NUMBA_CACHE_DIR`` set
  to the same directory); goal <= 0.1 s beyond import.  Reported beside Numba's
  own floor: the same measurement for a trivial ``cache=True`` function.
* **chain**: building (not calling) the gradient of a sum of N terms
  (``x0*x0 + x0*1.5 + …``) for each N, with stage times; goal: 5000 terms
  in under 10 s, near-linear growth.

Every gradient is checked against the workload's NumPy reference; a wrong one
is reported as an error row, never timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "@@COMPILE@@ "


# --------------------------------------------------------------------------
# Child processes


def _child_workload(name: str) -> dict:
    t0 = time.perf_counter()
    import numpy as np

    import tensorlang as tl
    from tensorlang.passes.profile import recording

    from . import workloads as W

    t_import = time.perf_counter() - t0
    w = W.BY_NAME[name]
    sizes = dict(w.quick)
    data = w.make_data(sizes)
    t1 = time.perf_counter()
    with recording() as times:
        loss, inputs = w.program()
        g = tl.grad(loss, wrt=[inputs[k] for k in w.wrt])
        t_build = time.perf_counter() - t1
        t2 = time.perf_counter()
        out = g(**data)
        t_call = time.perf_counter() - t2
    total = time.perf_counter() - t1
    ref = w.grad_ref(data)
    out = (out,) if len(w.wrt) == 1 else out  # one input: the gradient itself, not a tuple
    err = 0.0
    for k, got in zip(w.wrt, out):
        got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
        want = ref[k].toarray() if hasattr(ref[k], "toarray") else np.asarray(ref[k])
        err = max(err, float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))))
    stages = dict(times)
    # the first call's time beyond the backend stage: Numba's JIT (or cache load) and the run
    stages["first call"] = max(0.0, t_call - stages.get("backend", 0.0))
    return {"workload": name, "import": t_import, "build": t_build, "call": t_call, "total": total,
            "stages": stages, "error": err}


def _child_chain(n_terms: int) -> dict:
    t0 = time.perf_counter()
    import tensorlang as tl
    from tensorlang.passes.profile import recording

    t_import = time.perf_counter() - t0
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * n_terms + 1000))
    n = tl.size("n")
    x = tl.tensor("x", n)
    e = x[0] * x[0]
    for k in range(1, n_terms):
        e = e + x[0] * (k + 1.5)
    # the build itself, not a derived program an earlier run left in the cache
    old = os.environ.get("TENSORLANG_DERIVED_CACHE")
    os.environ["TENSORLANG_DERIVED_CACHE"] = "0"
    try:
        t1 = time.perf_counter()
        with recording() as times:
            g = tl.grad(e, wrt=x)
        build = time.perf_counter() - t1
    finally:
        if old is None:
            del os.environ["TENSORLANG_DERIVED_CACHE"]
        else:
            os.environ["TENSORLANG_DERIVED_CACHE"] = old
    want = 2 * 2.0 + sum(k + 1.5 for k in range(1, n_terms))
    got = float(tl.evaluate(g.program, x=[2.0])[0])
    return {"chain": n_terms, "import": t_import, "build": build, "stages": dict(times),
            "error": abs(got - want) / abs(want)}


_FLOOR_SRC = """
import numba


@numba.njit(cache=True)
def total(a):
    s = 0.0
    for v in a:
        s += v
    return s
"""


def _child_floor(cache: str) -> dict:
    """Numba's own per-process cost, for reading the warm numbers: seconds from
    after ``import tensorlang`` to the first result of a trivial Numba
    function with ``cache=True`` whose machine code is already on disk
    (importing Numba, initialising its CPU target, loading the cached code)."""
    import importlib.util

    t0 = time.perf_counter()
    import numpy as np

    import tensorlang  # noqa: F401

    t_import = time.perf_counter() - t0
    path = os.path.join(cache, "numba_floor.py")
    if not os.path.exists(path):
        Path(path).write_text(_FLOOR_SRC)
    t1 = time.perf_counter()
    spec = importlib.util.spec_from_file_location("numba_floor", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["numba_floor"] = mod  # Numba's cache loader imports the module by name (as backend/cache.py)
    spec.loader.exec_module(mod)
    mod.total(np.ones(4))
    return {"floor": time.perf_counter() - t1, "import": t_import}


def _run_child(args: list, cache: str, timeout: float) -> dict:
    # Numba's own disk cache (scalar functions, backend/scalars.py) in the same
    # directory: a cold run finds nothing a previous workload left behind
    env = dict(os.environ, TENSORLANG_CACHE_DIR=cache, TENSORLANG_RUNTIME="compiled",
               NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
    env.pop("TENSORLANG_PROFILE", None)
    cmd = [sys.executable, "-m", "benchmarks.compile_bench", "--child", *args]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timeout after {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith(TAG):
            return json.loads(line[len(TAG):])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"failed": f"exit {p.returncode}: {tail}"}


# --------------------------------------------------------------------------
# The parent


def run(only=None, chains=(100, 400, 800, 2000, 5000), timeout: float = 600.0) -> dict:
    from . import workloads as W

    rows = []
    for w in W.select(only):
        with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
            cold = _run_child(["workload", w.name], cache, timeout)
            warm = _run_child(["workload", w.name], cache, timeout) if "failed" not in cold else {"failed": "no cold run"}
        rows.append({"workload": w.name, "cold": cold, "warm": warm})
        _print_row(rows[-1])
    with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
        _run_child(["floor", cache], cache, timeout)  # compiles and caches the function
        floor = _run_child(["floor", cache], cache, timeout)
    if "floor" in floor:
        print(f"numba floor (warm, trivial cached function): {floor['floor']:.2f} s beyond import", flush=True)
    chain_rows = []
    for n_terms in chains:
        with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
            r = _run_child(["chain", str(n_terms)], cache, timeout)
        chain_rows.append(r)
        print(_fmt_chain(n_terms, r), flush=True)
    summary = _summary(rows)
    summary["numba_floor"] = floor.get("floor")
    print(summary["text"], flush=True)
    return {"workloads": rows, "chain": chain_rows, "summary": summary, "floor": floor}


def _ok(r: dict) -> bool:
    return "failed" not in r and r.get("error", 1.0) <= 1e-6


def _summary(rows) -> dict:
    cold = [r["cold"]["total"] for r in rows if _ok(r["cold"])]
    warm = [r["warm"]["total"] for r in rows if _ok(r["warm"])]
    out = {"cold_median": statistics.median(cold) if cold else None, "cold_worst": max(cold) if cold else None,
           "warm_median": statistics.median(warm) if warm else None, "warm_worst": max(warm) if warm else None,
           "failed": [r["workload"] for r in rows if not (_ok(r["cold"]) and _ok(r["warm"]))]}

    def f(v):
        return "-" if v is None else f"{v:.2f} s"

    out["text"] = (f"cold first gradient: median {f(out['cold_median'])}, worst {f(out['cold_worst'])} (goals 1 s, 3 s); "
                   f"warm: median {f(out['warm_median'])}, worst {f(out['warm_worst'])} (goal 0.1 s)"
                   + (f"; FAILED: {out['failed']}" if out["failed"] else ""))
    return out


def _stages(st: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1]) if v >= 0.005)


def _print_row(r: dict) -> None:
    for kind in ("cold", "warm"):
        x = r[kind]
        if "failed" in x:
            print(f"{r['workload']:18s} {kind}: FAILED {x['failed']}", flush=True)
        elif not _ok(x):
            print(f"{r['workload']:18s} {kind}: WRONG gradient (relative error {x['error']:.2e})", flush=True)
        else:
            print(f"{r['workload']:18s} {kind}: {x['total']:.2f} s beyond import ({x['import']:.2f} s) "
                  f"[{_stages(x['stages'])}]", flush=True)


def _fmt_chain(n_terms: int, r: dict) -> str:
    if "failed" in r:
        return f"chain N={n_terms}: FAILED {r['failed']}"
    if r["error"] > 1e-9:
        return f"chain N={n_terms}: WRONG gradient (relative error {r['error']:.2e})"
    return f"chain N={n_terms}: gradient built in {r['build']:.2f} s [{_stages(r['stages'])}]"


def markdown(res: dict) -> str:
    lines = ["| program | cold (s) | warm (s) | slowest cold stages |", "|---|---|---|---|"]
    for r in res["workloads"]:
        c, w = r["cold"], r["warm"]
        cs = f"{c['total']:.2f}" if _ok(c) else "failed"
        ws = f"{w['total']:.3f}" if _ok(w) else "failed"
        lines.append(f"| {r['workload']} | {cs} | {ws} | {_stages(c.get('stages', {}))} |")
    lines += ["", "| chain N | gradient build (s) |", "|---|---|"]
    for r in res["chain"]:
        lines.append(f"| {r.get('chain', '?')} | {r['build']:.2f} |" if "build" in r else f"| ? | {r.get('failed')} |")
    lines += ["", res["summary"]["text"]]
    if res["summary"].get("numba_floor") is not None:
        lines.append(f"Numba's own warm floor (import, CPU target, cached code of a trivial function): "
                     f"{res['summary']['numba_floor']:.2f} s beyond import")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        kind, arg = argv[1], argv[2]
        if kind == "floor":
            res = _child_floor(arg)
        else:
            res = _child_workload(arg) if kind == "workload" else _child_chain(int(arg))
        print(TAG + json.dumps(res), flush=True)
        return 0
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="WORKLOAD", help="workload names, prefixes or numbers")
    p.add_argument("--chain", nargs="*", type=int, default=[100, 400, 800, 2000, 5000], metavar="N",
                   help="sizes of the N-term sum whose gradient build is timed (none: skip)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child process")
    p.add_argument("--out", help="directory for compile.json and compile.md")
    a = p.parse_args(argv)
    res = run(a.only, tuple(a.chain), a.timeout)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        Path(a.out, "compile.json").write_text(json.dumps(res, indent=1))
        Path(a.out, "compile.md").write_text(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
