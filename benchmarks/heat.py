"""Heat equation: a 5-point explicit step under ``tl.loop`` (issue #17, goals).

``u_{t+1}[i, j] = u_t[i, j] + κ (u_t[i-1, j] + u_t[i+1, j] + u_t[i, j-1] +
u_t[i, j+1] - 4 u_t[i, j])`` with zero (Dirichlet) boundaries, ``T`` steps,
loss ``Σ (u_T - z)²``, gradient with respect to the initial state ``u0`` and
the diffusivity ``κ``.

Two uses:

* ``workload_fields`` (registered in ``benchmarks/workloads.py``) runs in the
  common runner (``python -m benchmarks --only heat``); ``T`` is a size passed
  with the data; ``jax_spec`` is its JAX ``lax.fori_loop`` peer;
* ``python -m benchmarks.heat [--quick]`` measures what the issue asks:
  gradient/primal time for ``checkpoint="all"`` and ``k = √T``, the stored
  states of each policy, build+compile time at ``T = 10`` and ``T = 10000``
  (fresh kernel caches, separate processes), and JAX peers when JAX is
  installed: ``lax.fori_loop`` (T stored states) and JAX's idiom for
  ``k = √T`` checkpointing (``jax_sqrt_loop``: a ``jax.checkpoint``-ed inner
  scan per segment), in time and (``--memory``) peak memory; ``--pin 1``
  confines the run and its children to one core, as ``benchmarks/worker.py``
  does for the suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from functools import lru_cache

import numpy as np

KAPPA = 0.2  # <= 1/4 keeps the explicit step stable


def program(T="T", checkpoint="all"):
    """(loss, {name: Var}); ``T`` a size name or an int."""
    import tensorlang as tl

    n = tl.size("n")
    steps = tl.size(T) if isinstance(T, str) else T
    u0, z, kappa = tl.tensor("u0", n, n), tl.tensor("z", n, n), tl.scalar("kappa")

    def step(t, u):
        return tl.gen([n, n], lambda i, j: u[i, j] + kappa * (
            tl.iverson(i >= 1, u[i - 1, j]) + tl.iverson(i + 1 <= n - 1, u[i + 1, j])
            + tl.iverson(j >= 1, u[i, j - 1]) + tl.iverson(j + 1 <= n - 1, u[i, j + 1]) - 4 * u[i, j]))

    uT = tl.loop(steps, u0, step, checkpoint=checkpoint)
    loss = tl.sum([n, n], lambda i, j: (uT[i, j] - z[i, j]) ** 2)
    return loss, {"u0": u0, "z": z, "kappa": kappa}


@lru_cache(maxsize=None)
def _workload_program():
    return program("T", "all")


def data(sizes, rng):
    n, T = sizes["n"], sizes["T"]
    return {"u0": rng.uniform(0.0, 1.0, (n, n)), "z": rng.uniform(0.0, 0.5, (n, n)),
            "kappa": np.array(KAPPA), "T": int(T)}


def _lap(u):
    out = -4.0 * u
    out[1:, :] += u[:-1, :]
    out[:-1, :] += u[1:, :]
    out[:, 1:] += u[:, :-1]
    out[:, :-1] += u[:, 1:]
    return out


def _states(d):
    u = d["u0"]
    states = [u]
    for _ in range(d["T"]):
        u = u + d["kappa"] * _lap(u)
        states.append(u)
    return states


def loss_ref(d) -> float:
    return float(((_states(d)[-1] - d["z"]) ** 2).sum())


def grad_ref(d) -> dict:
    states = _states(d)
    g = 2.0 * (states[-1] - d["z"])
    gk = 0.0
    for u in reversed(states[:-1]):
        # the step is u + κ L u with L symmetric (zero boundaries): its transpose is g + κ L g
        gk += float((g * _lap(u)).sum())
        g = g + d["kappa"] * _lap(g)
    return {"u0": g, "kappa": np.array(gk)}


def jax_spec(d):
    """``(loss, args, argnums, post)`` of the JAX peer (``baselines/jax_impl.py``): the same step under ``lax.fori_loop``."""
    import jax
    import jax.numpy as jnp

    T = int(d["T"])

    def lap(u):
        p = jnp.pad(u, 1)
        return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u

    def loss(u0, kappa, z):
        uT = jax.lax.fori_loop(0, T, lambda t, u: u + kappa * lap(u), u0)
        return jnp.sum((uT - z) ** 2)

    return loss, [d["u0"], d["kappa"], d["z"]], (0, 1), lambda g: {"u0": g[0], "kappa": g[1]}


def workload_fields() -> dict:
    """The fields of the runner's ``Workload`` (built in workloads.py, which this module does not import)."""
    return dict(
        name="heat", number=17, title="2D heat equation, 5-point explicit step under tl.loop (T = 1000 steps)",
        primary="n", sizes=(64, 128, 256), fixed={"T": 1000},
        quick={"n": 16, "T": 10}, check={"n": 6, "T": 4}, wrt=("u0", "kappa"),
        program=_workload_program, data=data, loss_ref=loss_ref, grad_ref=grad_ref,
        work=lambda s: 12 * s["n"] ** 2 * s["T"],
        notes="tl.loop with checkpoint='all'; python -m benchmarks.heat measures k = sqrt(T) and build time in T",
        tags=("loop",),
    )


# --------------------------------------------------------------------------
# Standalone measurements


def _best(fn, repeats: int, clock=time.perf_counter) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def _times(fn, repeats: int) -> tuple:
    """(best wall-clock seconds, median wall-clock, best CPU seconds of this
    process): on the shared 2-core machine the wall clock includes time
    slices given to other processes, the CPU time does not."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return min(wall), float(np.median(wall)), min(cpu)


def _interleaved(f, g, repeats: int) -> tuple:
    """``_times`` of ``f`` and ``g`` called alternately (f, g, f, g, ...): on a
    shared machine both see the same load, so their ratio is load-robust;
    each: (best wall, median wall, best CPU, median CPU)."""
    f(), g()
    res = ([], [], [], [])  # f wall, f cpu, g wall, g cpu
    for _ in range(repeats):
        for k, fn in ((0, f), (2, g)):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            res[k].append(time.perf_counter() - w0)
            res[k + 1].append(time.process_time() - c0)
    return tuple((min(res[k]), float(np.median(res[k])), min(res[k + 1]), float(np.median(res[k + 1])))
                 for k in (0, 2))


def measure_policies(n: int, T: int, repeats: int, mod=None) -> dict:
    """Gradient/primal times per checkpoint policy; ``mod``: another loop
    workload module with the same functions (``python -m benchmarks.wave``), else heat."""
    import tensorlang as tl
    from tensorlang.loops import schedule

    mod = mod or sys.modules[__name__]
    wrt = mod.workload_fields()["wrt"]
    d = mod.data({"n": n, "T": T}, np.random.default_rng(0))
    want = mod.grad_ref(d) if n * n * T <= 256 * 256 * 1000 else None
    out = {"n": n, "T": T}
    k = max(1, math.isqrt(T))
    for name, ck in (("all", "all"), (f"k={k}", k), ("binomial", "binomial")):
        loss, ins = mod.program("T", ck)
        f = tl.compile(loss)
        g = tl.grad(loss, wrt=[ins[w] for w in wrt])
        gu, gk = g(**d)
        if want is not None:
            err = max(float(np.abs(gu - want[wrt[0]]).max() / max(1.0, np.abs(want[wrt[0]]).max())),
                      abs(gk - float(want[wrt[1]])) / max(1.0, abs(float(want[wrt[1]]))))
            assert err < 1e-8, f"{name}: gradient differs from the NumPy reference by {err}"
        (tp, tpm, tpc, tpcm), (tg, tgm, tgc, tgcm) = _interleaved(lambda: f(**d), lambda: g(**d), repeats)
        sc = schedule(loss_policy(ck), T)
        out[name] = {"primal_s": tp, "grad_s": tg, "ratio": tg / tp,
                     "primal_median_s": tpm, "grad_median_s": tgm, "ratio_median": tgm / tpm,
                     "primal_cpu_s": tpc, "grad_cpu_s": tgc, "ratio_cpu": tgc / tpc,
                     "primal_cpu_median_s": tpcm, "grad_cpu_median_s": tgcm, "ratio_cpu_median": tgcm / tpcm,
                     "stored_states": sc.slots, "recomputed_steps": sc.recomputed, "state_MB": n * n * 8 / 1e6}
    return out


def measure_steps(n: int, T: int, repeats: int) -> dict:
    """Microseconds per step (best CPU time of ``repeats`` sweeps / T) of the
    step programs alone, for ``"all"`` and ``k = √T``: the primal's sweep
    (two buffers), the gradient's forward sweep (into the checkpoint slots),
    its reverse sweep, and a diagnostic reverse sweep whose every step reads
    the state in slot 0 (cache-resident: the same operations on the wrong
    state, its values unused), whose difference from the true one is the cost
    of reading the stored states back from memory."""
    import tensorlang as tl
    from tensorlang import loop_autodiff as LA
    from tensorlang.backend import loop_kernel as LK
    from tensorlang.loops import normalize_checkpoint

    d = data({"n": n, "T": T}, np.random.default_rng(0))
    out = {"n": n, "T": T}

    def cpu(fn):
        fn()
        best = math.inf
        for _ in range(repeats):
            c0 = time.process_time()
            fn()
            best = min(best, time.process_time() - c0)
        return best / T * 1e6

    for ck in ("all", max(1, math.isqrt(T))):
        loss, ins = program("T", ck)
        g = tl.grad(loss, wrt=[ins["u0"], ins["kappa"]])
        g(**d)
        rev = g.loop_program
        lp, sp = rev.lp, rev.lp.sp
        sizes, values = lp.sizes(d), dict(d)
        s0 = lp.pre(values, sizes)
        lp.invariants(values, sizes, T)
        s0l, fargs = lp.table_args(values, sizes, s0)
        fp, rp = lp.step_program(), rev._reverse_program()
        ph = LK.build_value(sp.state.type, list(s0l))
        signs = {nm: 1.0 for nm in rev._signs.values()}  # (none for heat's one leaf: backend/step_signs.py)
        rargs = LK.kernel_args(rp.base, {**values, sp.state.name: ph, rev.dstate: ph, **signs}, sizes,
                               LK.t_name(sp), LK.row_sources(sp, sizes))
        fcode, rcode, _, npool = LA._tables(normalize_checkpoint(ck), T, fp.groups, fp.alias)
        bufs = LK.make_pools(fp.groups, s0l, npool)
        pcode, _, ppool = LK.forward_table(T, fp.groups, fp.alias)
        pbufs = LK.make_pools(fp.groups, s0l, ppool)
        hot = rcode.copy()
        hot[:, 2] = np.where(hot[:, 0] == LK.REV, 0, hot[:, 2])  # (a one-leaf state: column 2 is its buffer)

        def rsweep(code):
            def run():
                dp, ids, sgs = LK.cotangent_pools(fp.groups, [np.ones_like(x) for x in s0l])
                return rp.run("rev_prog", None, code, *s0l, *bufs, *dp, ids, sgs, np.float64(0.0), *fargs, *rargs)
            return run

        fp.run("fwd_prog", None, fcode, *s0l, *bufs, *fargs)
        out[str(ck)] = {"primal_step_us": cpu(lambda: fp.run("fwd_prog", None, pcode, *s0l, *pbufs, *fargs)),
                        "forward_step_us": cpu(lambda: fp.run("fwd_prog", None, fcode, *s0l, *bufs, *fargs)),
                        "reverse_step_us": cpu(rsweep(rcode)),
                        "reverse_step_state_in_cache_us": cpu(rsweep(hot)) if ck == "all" else None}
    return out


def loss_policy(ck):
    from tensorlang.loops import normalize_checkpoint

    return normalize_checkpoint(ck)


def measure_jax(n: int, T: int, repeats: int) -> dict:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {"skipped": "jax is not installed"}
    jax.config.update("jax_enable_x64", True)
    d = data({"n": n, "T": T}, np.random.default_rng(0))

    def lap(u):
        p = jnp.pad(u, 1)
        return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u

    def loss(u0, kappa, z):
        uT = jax.lax.fori_loop(0, T, lambda t, u: u + kappa * lap(u), u0)
        return jnp.sum((uT - z) ** 2)

    def loss_ck(u0, kappa, z):  # scan with a remat'd step (JAX's per-step checkpointing)
        step = jax.checkpoint(lambda u, _: (u + kappa * lap(u), None))
        uT, _ = jax.lax.scan(step, u0, None, length=T)
        return jnp.sum((uT - z) ** 2)

    def loss_sqrt(u0, kappa, z):  # JAX's idiom for sqrt(T) checkpointing: a checkpointed inner scan per segment
        uT = jax_sqrt_loop(lambda u: u + kappa * lap(u), u0, T)
        return jnp.sum((uT - z) ** 2)

    args = (jnp.asarray(d["u0"]), jnp.asarray(d["kappa"]), jnp.asarray(d["z"]))
    gs = jax.jit(jax.grad(loss_sqrt, argnums=(0, 1)))
    tgs, tgsm, tgscpu = _times(lambda: jax.block_until_ready(gs(*args)), repeats)
    f = jax.jit(loss)
    g = jax.jit(jax.grad(loss, argnums=(0, 1)))
    gc = jax.jit(jax.grad(loss_ck, argnums=(0, 1)))
    tp, tpm, tpc = _times(lambda: f(*args).block_until_ready(), repeats)
    tg, tgm, tgcpu = _times(lambda: jax.block_until_ready(g(*args)), repeats)
    tgc = _best(lambda: jax.block_until_ready(gc(*args)), repeats)
    want = grad_ref(d) if n * n * T <= 256 * 256 * 1000 else None
    if want is not None:
        gu = np.asarray(g(*args)[0])
        assert np.abs(gu - want["u0"]).max() < 1e-8 * max(1.0, np.abs(want["u0"]).max())
    if want is not None:
        gu = np.asarray(gs(*args)[0])
        assert np.abs(gu - want["u0"]).max() < 1e-8 * max(1.0, np.abs(want["u0"]).max())
    return {"primal_s": tp, "grad_s": tg, "ratio": tg / tp, "grad_remat_step_s": tgc,
            "grad_sqrt_s": tgs, "grad_sqrt_median_s": tgsm, "grad_sqrt_cpu_s": tgscpu,
            "ratio_sqrt": tgs / tp, "stored_states_sqrt": 2 * math.isqrt(T),
            "primal_median_s": tpm, "grad_median_s": tgm, "primal_cpu_s": tpc, "grad_cpu_s": tgcpu,
            "stored_states_fori_loop": T, "note": "jax.grad of fori_loop keeps every step's residuals (T states)"}


def jax_sqrt_loop(step, u0, T: int):
    """``T`` steps of ``step`` under JAX's idiom for sqrt(T) checkpointing: an
    outer ``lax.scan`` over segments of ``k = isqrt(T)`` steps whose body, the
    inner scan, is ``jax.checkpoint``-ed (the outer carries are stored, each
    segment recomputed in the reverse pass), then the remaining ``T - k²`` steps."""
    import jax

    k = max(1, math.isqrt(T))

    def inner(u):
        return jax.lax.scan(lambda v, _: (step(v), None), u, None, length=k)[0]

    seg = jax.checkpoint(inner)
    u, _ = jax.lax.scan(lambda v, _: (seg(v), None), u0, None, length=T // k)
    rest = T - (T // k) * k
    return jax.lax.scan(lambda v, _: (step(v), None), u, None, length=rest)[0] if rest else u


_BUILD_CHILD = """
import time, sys, json
t0 = time.perf_counter()
import numpy as np
import tensorlang as tl
from benchmarks.heat import program
T = int(sys.argv[1])
loss, ins = program(T, "all")
f = tl.compile(loss)
g = tl.grad(loss, wrt=[ins["u0"], ins["kappa"]])
t1 = time.perf_counter()
rng = np.random.default_rng(0)
d = {"u0": rng.uniform(size=(8, 8)), "z": rng.uniform(size=(8, 8)), "kappa": 0.2}
f(**d)
g(**d)  # the first calls compile the Numba step drivers (T is their runtime argument)
t2 = time.perf_counter()
print(json.dumps({"T": T, "build_compile_s": t1 - t0, "first_calls_n8_s": t2 - t1}))
"""


_MEMORY_CHILD = """
import json, resource, sys
import numpy as np
from benchmarks.heat import data, program
which, n, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = data({"n": n, "T": T}, np.random.default_rng(0))
if which.startswith("jax"):
    import jax, jax.numpy as jnp
    from benchmarks.heat import jax_spec
    jax.config.update("jax_enable_x64", True)
    loss, args, argnums, _ = jax_spec(d)
    args = [jnp.asarray(a) for a in args]
    if which == "jax-sqrt":  # the same step, JAX's sqrt(T) idiom (jax_sqrt_loop)
        import math
        from benchmarks.heat import jax_sqrt_loop, KAPPA
        T_ = T
        def lap(u):
            p = jnp.pad(u, 1)
            return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u
        def loss(u0, kappa, z):
            return jnp.sum((jax_sqrt_loop(lambda u: u + kappa * lap(u), u0, T_) - z) ** 2)
    g = jax.jit(jax.grad(loss, argnums=argnums)).lower(*args).compile()  # compiled ahead, not run
    run = lambda: jax.block_until_ready(g(*args))
else:
    import tensorlang as tl
    ck = "all" if which == "all" else int(which)
    loss, ins = program("T", ck)
    gr = tl.grad(loss, wrt=[ins["u0"], ins["kappa"]])
    gr(**data({"n": 8, "T": T}, np.random.default_rng(1)))  # compiles the kernels (size-generic)
    run = lambda: gr(**d)
def peak_kb():
    # VmHWM: this process's own high-water mark; ru_maxrss carries the parent's
    # across fork + exec, so under a large parent (this benchmark, after its
    # policies and JAX) every rise read 0
    try:
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = peak_kb()
run()
after = peak_kb()
print(json.dumps({"method": which, "peak_rise_MB": (after - before) / 1024}))
"""


def measure_memory(n: int, T: int) -> list:
    """The rise of the process's peak RSS during one gradient call (fresh
    process each; kernels compiled beforehand): ``"all"``, ``k = √T`` and
    JAX ``fori_loop``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for which in ("all", str(max(1, math.isqrt(T))), "jax", "jax-sqrt"):
        r = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, which, str(n), str(T)], cwd=root,
                           capture_output=True, text=True, timeout=600)
        if r.returncode:
            out.append({"method": which, "error": r.stderr[-500:]})
        else:
            out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


def measure_build(Ts=(10, 100, 10000)) -> list:
    """Build + compile time of the primal and the gradient in a fresh process
    with a fresh kernel cache, ``T`` an int constant of the program.  Runs of
    fewer than ``loop_kernel.DRIVER_MIN_STEPS`` (32) steps never compile the
    Numba step programs (per-step calls are cheaper there), so T = 10 shows
    the kernels alone and T = 100 vs 10000 the step programs' compile time."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for T in Ts:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TENSORLANG_CACHE_DIR": cache}
            r = subprocess.run([sys.executable, "-c", _BUILD_CHILD, str(T)], cwd=root, env=env,
                               capture_output=True, text=True, timeout=600)
            if r.returncode:
                raise RuntimeError(r.stderr[-2000:])
            out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heat", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="n = 32, T = 50")
    p.add_argument("--n", type=int)
    p.add_argument("--T", type=int)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-build", action="store_true", help="skip the build-time measurement")
    p.add_argument("--memory", action="store_true", help="also the peak memory of one gradient call (fresh processes)")
    p.add_argument("--steps", action="store_true", help="also the step programs' microseconds per step (measure_steps)")
    p.add_argument("--pin", type=int, default=0, help="confine the process (and its children) to this many cores (worker.pin_cores)")
    a = p.parse_args(argv)
    if a.pin and hasattr(os, "sched_getaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        if 0 < a.pin < len(cores):
            os.sched_setaffinity(0, cores[:a.pin])
    n = a.n or (32 if a.quick else 256)
    T = a.T or (50 if a.quick else 1000)
    res = {"load_average": os.getloadavg(), "tensorlang": measure_policies(n, T, a.repeats),
           "jax": measure_jax(n, T, a.repeats)}
    res["load_average_after"] = os.getloadavg()
    if a.steps:
        res["steps"] = measure_steps(n, T, a.repeats)
    if a.memory:
        res["memory"] = measure_memory(n, T)
    if not a.no_build:
        res["build"] = measure_build((10, 100) if a.quick else (10, 100, 10000))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
