"""Compile latency (issue #14 item 6): the ``compile`` section of the benchmarks.

``python -m benchmarks.compile_bench [--only W ...] [--chain N ...] [--out DIR]``

Measurements, each in fresh processes so that nothing is warm by accident:

* **cold**: per benchmark program (benchmarks/workloads.py), a new process with
  an empty kernel cache: seconds from after ``import tensorlang`` to the first
  gradient (``tl.grad`` built, then called once at the workload's quick sizes
  with ``TENSORLANG_RUNTIME=compiled``, so the kernel is compiled), split into
  the stages of ``passes.profile`` (sharing … simplify, bounds, backend) and
  the first kernel call (Numba's JIT plus the run).  Median and worst over the
  programs; goals: median <= 1 s, worst <= 3 s.  The child's CPU time (user +
  system) over the same span is reported beside the wall time: with other
  work on the machine the wall time stretches, the CPU time far less, so an
  A/B under load reads the CPU column.
* **warm**: the same, in a second new process with the cache the cold run
  filled (derived programs: backend/derived_cache.py; kernels:
  backend/cache.py; scalar functions: Numba's cache, ``NUMBA_CACHE_DIR`` set
  to the same directory).  Goal: at most 0.1 s beyond import, read as
  tensorlang's share beside Numba's own floor:
* **split** (a third new process on the warm cache) takes the warm time apart:
  *floor*, Numba's own cost, is the first result of a trivial ``cache=True``
  function whose code is on disk (importing Numba, its CPU target and lazy
  registries, loading cached code); *imports*, the tensorlang modules the
  warm process imported after ``import tensorlang`` (the compiler modules
  that the cached path loads: driver, passes, kernel preparation ...);
  *work*, the first result itself once both are done.  **share** = warm -
  floor (measured in the split process of the same program), the number the
  0.1 s goal is about; imports + work is the same thing measured directly.
  The floor is also measured alone in fresh processes before and after the
  programs, with the load average, since other work on the machine moves it.
* **chain**: building (not calling) the gradient of a sum of N terms
  (``x0*x0 + x0*1.5 + …``) for each N, with stage times; goal: 5000 terms
  in under 10 s, near-linear growth.

Children read Python's bytecode caches, byte-compiled first as an installation
does (``--bytecode off`` removes those ``.pyc`` files and sets
``PYTHONDONTWRITEBYTECODE=1``: every module of tensorlang is then compiled from
source in every process, as in an environment that never writes bytecode).

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


def _cpu() -> float:
    """This process's CPU seconds (user + system): on a loaded machine the
    wall time of a cold compile stretches with the other work, its CPU time
    much less."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _child_workload(name: str) -> dict:
    t0 = time.perf_counter()
    import numpy as np

    import tensorlang as tl
    from tensorlang.passes.profile import recording

    from . import workloads as W

    t_import = time.perf_counter() - t0
    before = set(sys.modules)
    w = W.BY_NAME[name]
    sizes = dict(w.quick)
    data = w.make_data(sizes)
    c1 = _cpu()
    t1 = time.perf_counter()
    with recording() as times:
        loss, inputs = w.program()
        g = tl.grad(loss, wrt=[inputs[k] for k in w.wrt])
        t_build = time.perf_counter() - t1
        t2 = time.perf_counter()
        out = g(**data)
        t_call = time.perf_counter() - t2
    total = time.perf_counter() - t1
    cpu = _cpu() - c1
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
    return {"workload": name, "import": t_import, "build": t_build, "call": t_call, "total": total, "cpu": cpu,
            "stages": stages, "error": err, "modules": _our_modules(before)}


def _our_modules(before: set) -> list:
    """tensorlang's modules imported since ``before`` (generated kernel modules aside)."""
    return sorted(m for m in set(sys.modules) - before
                  if m.split(".")[0] == "tensorlang" and not m.startswith("tensorlang_kernel_"))


def _child_split(name: str, cache: str, modules: str) -> dict:
    """The warm first result taken apart in one process (see the module doc):
    Numba's floor (and, within it, ``import numba``), then importing
    ``modules`` (comma-separated), then the first gradient."""
    import importlib

    import tensorlang as tl

    from . import workloads as W

    w = W.BY_NAME[name]
    data = w.make_data(dict(w.quick))
    t_floor, t_numba = _floor_call(cache)
    t0 = time.perf_counter()
    for m in filter(None, modules.split(",")):
        importlib.import_module(m)
    t_imports = time.perf_counter() - t0
    t1 = time.perf_counter()
    loss, inputs = w.program()
    g = tl.grad(loss, wrt=[inputs[k] for k in w.wrt])
    g(**data)
    t_work = time.perf_counter() - t1
    return {"workload": name, "floor": t_floor, "numba_import": t_numba, "imports": t_imports, "work": t_work}


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


# loaded as tensorlang loads its kernels (backend/warm_load.py: no target refresh)
_FLOOR_SRC = """
import numba
from tensorlang.backend.warm_load import warm_loading


@warm_loading
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
    (importing Numba, initialising its CPU target, loading the cached code
    as backend/warm_load.py loads kernels)."""
    t0 = time.perf_counter()
    import tensorlang  # noqa: F401

    t_import = time.perf_counter() - t0
    t_floor, t_numba = _floor_call(cache)
    return {"floor": t_floor, "numba_import": t_numba, "import": t_import}


def _floor_call(cache: str) -> tuple:
    """``(floor, numba_import)``: seconds to the first result of the trivial
    function (compiled and cached by the first call in ``cache``), and the
    part of them that is ``import numba`` alone."""
    import importlib.util

    import numpy as np

    path = os.path.join(cache, "numba_floor.py")
    if not os.path.exists(path):
        Path(path).write_text(_FLOOR_SRC)
    t1 = time.perf_counter()
    import numba  # noqa: F401

    t_numba = time.perf_counter() - t1
    spec = importlib.util.spec_from_file_location("numba_floor", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["numba_floor"] = mod  # Numba's cache loader imports the module by name (as backend/cache.py)
    spec.loader.exec_module(mod)
    mod.total(np.ones(4))
    return time.perf_counter() - t1, t_numba


BYTECODE = {"cached": True}  # set by --bytecode (run())


def _byte_compile() -> None:
    """Python's bytecode for tensorlang, its passes and the benchmarks, as an
    installation leaves it (pip byte-compiles what it installs), so that a
    child's imports read ``.pyc`` files instead of compiling every module."""
    import compileall

    for d in ("tensorlang", "passes", "benchmarks"):
        compileall.compile_dir(str(ROOT / d), quiet=1)


def _drop_bytecode() -> None:
    """Remove the ``.pyc`` files of tensorlang, its passes and the benchmarks
    (``--bytecode off``: with PYTHONDONTWRITEBYTECODE=1 none is written back,
    so every child compiles those modules from source)."""
    for d in ("tensorlang", "passes", "benchmarks"):
        for pyc in (ROOT / d).rglob("__pycache__/*.pyc"):
            pyc.unlink()


def _run_child(args: list, cache: str, timeout: float) -> dict:
    # Numba's own disk cache (scalar functions, backend/scalars.py) in the same
    # directory: a cold run finds nothing a previous workload left behind
    env = dict(os.environ, TENSORLANG_CACHE_DIR=cache, TENSORLANG_RUNTIME="compiled",
               NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
    env.pop("TENSORLANG_PROFILE", None)
    if BYTECODE["cached"]:
        # Python's default: an environment with PYTHONDONTWRITEBYTECODE set
        # (a CI sandbox) compiles every module from source in every process
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
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


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _floors(cache: str, timeout: float, n: int = 3) -> dict:
    """Numba's floor alone, ``n`` fresh processes (the first one compiles)."""
    _run_child(["floor", cache], cache, timeout)
    got = [r["floor"] for r in (_run_child(["floor", cache], cache, timeout) for _ in range(n)) if "floor" in r]
    return {"median": statistics.median(got) if got else None, "runs": got, "load": _load()}


def run(only=None, chains=(100, 400, 800, 2000, 5000), timeout: float = 600.0, bytecode: bool = True) -> dict:
    from . import workloads as W

    BYTECODE["cached"] = bytecode
    if bytecode:
        _byte_compile()
    else:
        _drop_bytecode()

    with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
        floor_before = _floors(cache, timeout)
    print(f"numba floor before: {_f(floor_before['median'])} (load {floor_before['load']})", flush=True)
    rows = []
    for w in W.select(only):
        with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
            cold = _run_child(["workload", w.name], cache, timeout)
            if "failed" in cold:
                warm = split = {"failed": "no cold run"}
            else:
                _run_child(["floor", cache], cache, timeout)  # the trivial function, compiled into this cache
                warm = _run_child(["workload", w.name], cache, timeout)
                mods = ",".join(warm.get("modules", ()))
                split = _run_child(["split", w.name, cache, mods], cache, timeout)
        rows.append({"workload": w.name, "cold": cold, "warm": warm, "split": split, "load": _load()})
        _print_row(rows[-1])
    with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
        floor_after = _floors(cache, timeout)
    print(f"numba floor after: {_f(floor_after['median'])} (load {floor_after['load']})", flush=True)
    chain_rows = []
    for n_terms in chains:
        with tempfile.TemporaryDirectory(prefix="tl-compile-bench-") as cache:
            r = _run_child(["chain", str(n_terms)], cache, timeout)
        chain_rows.append(r)
        print(_fmt_chain(n_terms, r), flush=True)
    summary = _summary(rows)
    summary["numba_floor"] = {"before": floor_before, "after": floor_after}
    summary["bytecode"] = "cached" if bytecode else "off (PYTHONDONTWRITEBYTECODE=1)"
    print(summary["text"], flush=True)
    return {"workloads": rows, "chain": chain_rows, "summary": summary}


def _ok(r: dict) -> bool:
    return "failed" not in r and r.get("error", 1.0) <= 1e-6


def share(r: dict):
    """tensorlang's share of the warm first result: warm minus Numba's floor
    measured in the same program's split process (None if either is missing)."""
    if not _ok(r["warm"]) or "floor" not in r.get("split", {}):
        return None
    return r["warm"]["total"] - r["split"]["floor"]


def _f(v, unit=" s"):
    return "-" if v is None else f"{v:.2f}{unit}"


def _stat(vals):
    return (statistics.median(vals), max(vals)) if vals else (None, None)


def _summary(rows) -> dict:
    cold = [r["cold"]["total"] for r in rows if _ok(r["cold"])]
    warm = [r["warm"]["total"] for r in rows if _ok(r["warm"])]
    shares = [v for v in map(share, rows) if v is not None]
    floors = [r["split"]["floor"] for r in rows if "floor" in r.get("split", {})]
    out = {"failed": [r["workload"] for r in rows if not (_ok(r["cold"]) and _ok(r["warm"]))]}
    out["cold_median"], out["cold_worst"] = _stat(cold)
    out["cold_cpu_median"], out["cold_cpu_worst"] = _stat([r["cold"]["cpu"] for r in rows if _ok(r["cold"]) and "cpu" in r["cold"]])
    out["warm_median"], out["warm_worst"] = _stat(warm)
    out["share_median"], out["share_worst"] = _stat(shares)
    direct = [r["split"]["imports"] + r["split"]["work"] for r in rows if "work" in r.get("split", {})]
    out["direct_median"], out["direct_worst"] = _stat(direct)
    # the cold time beyond Numba's floor of the same program (a load-stable part: a busy
    # machine stretches the floor as much as the compile); the floor is a cached load,
    # so a cold process also pays Numba's first compilation set-up on top of it
    beyond = [r["cold"]["total"] - r["split"]["floor"] for r in rows if _ok(r["cold"]) and "floor" in r.get("split", {})]
    out["cold_beyond_floor_median"], out["cold_beyond_floor_worst"] = _stat(beyond)
    loads = [r["load"] for r in rows if r.get("load") is not None]
    out["load_range"] = (min(loads), max(loads)) if loads else None
    imports = [r["split"]["imports"] for r in rows if "imports" in r.get("split", {})]
    out["imports_median"] = statistics.median(imports) if imports else None
    out["floor_median"] = statistics.median(floors) if floors else None
    numba_imports = [r["split"]["numba_import"] for r in rows if "numba_import" in r.get("split", {})]
    out["numba_import_median"] = statistics.median(numba_imports) if numba_imports else None
    out["text"] = (f"cold first gradient: median {_f(out['cold_median'])}, worst {_f(out['cold_worst'])} "
                   f"(goals 1 s, 3 s; CPU time: median {_f(out['cold_cpu_median'])}, worst {_f(out['cold_cpu_worst'])}), beyond Numba's floor: median {_f(out['cold_beyond_floor_median'])}, "
                   f"worst {_f(out['cold_beyond_floor_worst'])}; warm: median {_f(out['warm_median'])}, worst {_f(out['warm_worst'])}, "
                   f"of which Numba's floor (median) {_f(out['floor_median'])}, itself mostly `import numba` "
                   f"({_f(out['numba_import_median'])}); tensorlang's share: median "
                   f"{_f(out['share_median'])}, worst {_f(out['share_worst'])} (goal 0.1 s); measured directly "
                   f"(imports + work after the floor, one process): median {_f(out['direct_median'])}, worst "
                   f"{_f(out['direct_worst'])}, of which importing tensorlang's modules {_f(out['imports_median'])}"
                   + (f"; load average {out['load_range'][0]}-{out['load_range'][1]}" if out["load_range"] else "")
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
            print(f"{r['workload']:18s} {kind}: {x['total']:.2f} s beyond import ({x['import']:.2f} s), "
                  f"CPU {x.get('cpu', float('nan')):.2f} s "
                  f"[{_stages(x['stages'])}]", flush=True)
    sp = r.get("split", {})
    if "floor" in sp:
        print(f"{r['workload']:18s} split: floor {sp['floor']:.2f} (import numba {sp.get('numba_import', float('nan')):.2f}), imports {sp['imports']:.3f}, "
              f"work {sp['work']:.3f}; share {_f(share(r))}", flush=True)


def _fmt_chain(n_terms: int, r: dict) -> str:
    if "failed" in r:
        return f"chain N={n_terms}: FAILED {r['failed']}"
    if r["error"] > 1e-9:
        return f"chain N={n_terms}: WRONG gradient (relative error {r['error']:.2e})"
    return f"chain N={n_terms}: gradient built in {r['build']:.2f} s [{_stages(r['stages'])}]"


def markdown(res: dict) -> str:
    lines = ["| program | cold (s) | cold CPU (s) | warm (s) | Numba floor (s) | share (s) | imports (s) | work (s) | "
             "load | slowest cold stages |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["workloads"]:
        c, w, sp = r["cold"], r["warm"], r.get("split", {})
        cs = f"{c['total']:.2f}" if _ok(c) else "failed"
        ws = f"{w['total']:.3f}" if _ok(w) else "failed"
        fl = f"{sp['floor']:.3f}" if "floor" in sp else "-"
        im = f"{sp['imports']:.3f}" if "imports" in sp else "-"
        wk = f"{sp['work']:.3f}" if "work" in sp else "-"
        sh = share(r)
        cc = f"{c['cpu']:.2f}" if _ok(c) and "cpu" in c else "-"
        lines.append(f"| {r['workload']} | {cs} | {cc} | {ws} | {fl} | {_f(sh, '')} | {im} | {wk} | {r.get('load', '-')} | "
                     f"{_stages(c.get('stages', {}))} |")
    if res["chain"]:
        lines += ["", "| chain N | gradient build (s) |", "|---|---|"]
        for r in res["chain"]:
            lines.append(f"| {r.get('chain', '?')} | {r['build']:.2f} |" if "build" in r
                         else f"| ? | {r.get('failed')} |")
    lines += ["", res["summary"]["text"], f"Python bytecode caches: {res['summary'].get('bytecode', '?')}"]
    fl = res["summary"].get("numba_floor") or {}
    if fl:
        b, a = fl.get("before", {}), fl.get("after", {})
        lines.append(f"Numba's floor alone (fresh processes; import, CPU target, cached code of a trivial function): "
                     f"{_f(b.get('median'))} before the programs (load {b.get('load')}), "
                     f"{_f(a.get('median'))} after (load {a.get('load')})")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        kind, arg = argv[1], argv[2]
        if kind == "floor":
            res = _child_floor(arg)
        elif kind == "split":
            res = _child_split(arg, argv[3], argv[4] if len(argv) > 4 else "")
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
    p.add_argument("--bytecode", choices=("cached", "off"), default="cached",
                   help="children read Python bytecode caches (default, as installed) or compile every module "
                        "from source (PYTHONDONTWRITEBYTECODE=1)")
    a = p.parse_args(argv)
    res = run(a.only, tuple(a.chain), a.timeout, a.bytecode == "cached")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        Path(a.out, "compile.json").write_text(json.dumps(res, indent=1))
        Path(a.out, "compile.md").write_text(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
