"""1-D Burgers equation, T explicit upwind steps under ``tl.loop`` (issue #17,
"more workloads": a ``tl.maximum`` upwind flux; the value conditionals are
black-box functions of Fig. 3, the loop an extension of Section 4).

``u_t + (u²/2)_x = 0`` by explicit steps ``u_i <- u_i - c (F_i - F_{i-1})``
at interior points ``1 <= i <= n - 2`` (boundary values held), with the
Engquist-Osher upwind flux between points ``j`` and ``j + 1``::

    F_j = max(u_j, 0)² / 2 + min(u_{j+1}, 0)² / 2

(its derivatives ``max(u_j, 0)`` and ``min(u_{j+1}, 0)`` are continuous, so
finite differences check the gradient).  Loss ``Σ (u_T - z)²``, gradient
with respect to the initial state ``u0`` and the Courant number ``c``
(``dt/dx``).  ``benchmarks/workloads.py`` has the one-step unrolled
``burgers``; this is the same step carried ``T`` times by the loop.

Registered in ``benchmarks/workloads.py`` (``python -m benchmarks --only
burgers_loop``); the JAX peer (``jax_spec``) is the same step under
``lax.fori_loop``.  ``python -m benchmarks.burgers_loop [--n N] [--T T]``
prints best-of-``repeats`` primal and gradient times for tensorlang
(``checkpoint="all"`` and ``k = √T``) and JAX, with the load average.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from functools import lru_cache

import numpy as np

C = 0.25  # dt/dx; |u| <= 1 keeps the CFL number <= 1/4


def program(T="T", checkpoint="all"):
    """(loss, {name: Var}); ``T`` a size name or an int."""
    import tensorlang as tl

    n = tl.size("n")
    steps = tl.size(T) if isinstance(T, str) else T
    u0, z, c = tl.tensor("u0", n), tl.tensor("z", n), tl.scalar("c")

    def step(t, u):
        flux = tl.gen(n - 1, lambda j: 0.5 * tl.maximum(u[j], 0.0) ** 2 + 0.5 * tl.minimum(u[j + 1], 0.0) ** 2)
        return tl.let(flux, lambda F: tl.gen(n, lambda i: u[i] - c * tl.iverson((i >= 1) & (i <= n - 2), F[i] - F[i - 1])))

    uT = tl.loop(steps, u0, step, checkpoint=checkpoint)
    loss = tl.sum(n, lambda i: (uT[i] - z[i]) ** 2)
    return loss, {"u0": u0, "z": z, "c": c}


@lru_cache(maxsize=None)
def _workload_program():
    return program("T", "all")


def data(sizes, rng):
    n, T = sizes["n"], sizes["T"]
    xs = np.linspace(0.0, 2.0 * np.pi, n)
    return {"u0": 0.8 * np.sin(xs) + rng.uniform(-0.2, 0.2, n), "z": rng.uniform(-0.5, 0.5, n),
            "c": np.array(C), "T": int(T)}


def _flux(u):
    return 0.5 * np.maximum(u[:-1], 0.0) ** 2 + 0.5 * np.minimum(u[1:], 0.0) ** 2


def _states(d):
    u = d["u0"]
    states = [u]
    for _ in range(d["T"]):
        F = _flux(u)
        u = u.copy()
        u[1:-1] -= d["c"] * (F[1:] - F[:-1])
        states.append(u)
    return states


def loss_ref(d) -> float:
    return float(((_states(d)[-1] - d["z"]) ** 2).sum())


def grad_ref(d) -> dict:
    """By hand: each step transposed (``dL/dF_j = c (g_{j+1}[j+1 interior] - g_j[j interior])``)."""
    states = _states(d)
    g = 2.0 * (states[-1] - d["z"])
    gc = 0.0
    for u in reversed(states[:-1]):
        F = _flux(u)
        gi = g.copy()
        gi[0] = gi[-1] = 0.0
        gc -= float((gi[1:-1] * (F[1:] - F[:-1])).sum())
        gF = d["c"] * (gi[1:] - gi[:-1])
        g = g.copy()
        g[:-1] += gF * np.maximum(u[:-1], 0.0)  # dF_j/du_j
        g[1:] += gF * np.minimum(u[1:], 0.0)  # dF_j/du_(j+1)
    return {"u0": g, "c": np.array(gc)}


def jax_spec(d):
    """``(loss, args, argnums, post)`` of the JAX peer (``baselines/jax_impl.py``)."""
    import jax
    import jax.numpy as jnp

    T = int(d["T"])

    def step(c, u):
        F = 0.5 * jnp.maximum(u[:-1], 0.0) ** 2 + 0.5 * jnp.minimum(u[1:], 0.0) ** 2
        return u - c * jnp.pad(F[1:] - F[:-1], 1)  # boundary values held (3x faster primal than u.at[1:-1].add)

    def loss(u0, c, z):
        uT = jax.lax.fori_loop(0, T, lambda t, u: step(c, u), u0)
        return jnp.sum((uT - z) ** 2)

    return loss, [d["u0"], d["c"], d["z"]], (0, 1), lambda g: {"u0": g[0], "c": g[1]}


def workload_fields() -> dict:
    """The fields of the runner's ``Workload`` (built in workloads.py, which this module does not import)."""
    return dict(
        name="burgers_loop", number=17, title="1D Burgers, upwind tl.maximum flux under tl.loop (T = 100 steps)",
        primary="n", sizes=(10_000, 100_000, 1_000_000), fixed={"T": 100},
        quick={"n": 64, "T": 10}, check={"n": 12, "T": 5}, wrt=("u0", "c"),
        program=_workload_program, data=data, loss_ref=loss_ref, grad_ref=grad_ref,
        work=lambda s: 12 * s["n"] * s["T"],
        notes="tl.loop, checkpoint='all'; flux max(u_j,0)²/2 + min(u_j+1,0)²/2; JAX peer: lax.fori_loop",
        tags=("loop",),
    )


# --------------------------------------------------------------------------
# Standalone measurement (best of ``repeats``, single thread)


def _best(fn, repeats: int) -> float:
    fn()  # warm: compiles
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def measure(n: int, T: int, repeats: int) -> dict:
    import tensorlang as tl

    d = data({"n": n, "T": T}, np.random.default_rng(0))
    kw = {k: v for k, v in d.items()}
    out: dict = {"n": n, "T": T}
    want = grad_ref(d) if n * T <= 10**7 else None
    for ck in ("all", max(1, math.isqrt(T))):
        loss, ins = program("T", ck)
        f = tl.compile(loss)
        g = tl.grad(loss, wrt=[ins["u0"], ins["c"]])
        if want is not None:
            gu, gcv = g(**kw)
            assert np.abs(gu - want["u0"]).max() <= 1e-9 * max(1.0, np.abs(want["u0"]).max())
            assert abs(float(gcv) - float(want["c"])) <= 1e-9 * max(1.0, abs(float(want["c"])))
        tp, tg = _best(lambda: f(**kw), repeats), _best(lambda: g(**kw), repeats)
        out[f"tensorlang checkpoint={ck}"] = {"primal_s": tp, "grad_s": tg, "ratio": tg / tp}
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        out["jax"] = {"skipped": "jax is not installed"}
        return out
    jax.config.update("jax_enable_x64", True)
    loss, args, argnums, post = jax_spec(d)
    args = [jnp.asarray(a) for a in args]
    fj, gj = jax.jit(loss), jax.jit(jax.grad(loss, argnums=argnums))
    if want is not None:
        gu = np.asarray(gj(*args)[0])
        assert np.abs(gu - want["u0"]).max() <= 1e-9 * max(1.0, np.abs(want["u0"]).max())
    tp = _best(lambda: fj(*args).block_until_ready(), repeats)
    tg = _best(lambda: jax.block_until_ready(gj(*args)), repeats)
    out["jax fori_loop"] = {"primal_s": tp, "grad_s": tg, "ratio": tg / tp}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.burgers_loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--T", type=int, default=100)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args(argv)
    res = {"load_average": os.getloadavg(), **measure(a.n, a.T, a.repeats), "load_average_after": os.getloadavg()}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
