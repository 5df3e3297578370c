"""Wave equation: second order in time under ``tl.loop`` (issue #17, "more workloads").

``u_{t+1} = 2 u_t - u_{t-1} + c² L u_t`` with ``L`` the 5-point Laplacian
with zero (Dirichlet) boundaries; the loop's state is the pair
``(u_{t-1}, u_t)``, starting at rest: ``(u0, u0)``.  Loss ``Σ (u_T - z)²``,
gradient with respect to the initial displacement ``u0`` and ``c²``.

Registered in ``benchmarks/workloads.py`` (``python -m benchmarks --only
wave``); the JAX peer (``jax_spec``, used by ``baselines/jax_impl.py``) is
the same step under ``lax.fori_loop``.
"""

from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np

from .heat import _lap  # the same 5-point Laplacian (zero outside the grid)

C2 = 0.2  # c² Δt² / h² <= 1/2 keeps the explicit 2-D scheme stable


def program(T="T", checkpoint="all"):
    """(loss, {name: Var}); ``T`` a size name or an int."""
    import tensorlang as tl

    n = tl.size("n")
    steps = tl.size(T) if isinstance(T, str) else T
    u0, z, c2 = tl.tensor("u0", n, n), tl.tensor("z", n, n), tl.scalar("c2")

    def step(t, s):
        up, u = tl.proj(s, 0), tl.proj(s, 1)
        un = tl.gen([n, n], lambda i, j: 2 * u[i, j] - up[i, j] + c2 * (
            tl.iverson(i >= 1, u[i - 1, j]) + tl.iverson(i + 1 <= n - 1, u[i + 1, j])
            + tl.iverson(j >= 1, u[i, j - 1]) + tl.iverson(j + 1 <= n - 1, u[i, j + 1]) - 4 * u[i, j]))
        return tl.pair(u, un)

    sT = tl.loop(steps, tl.pair(u0, u0), step, checkpoint=checkpoint)
    uT = tl.proj(sT, 1)
    loss = tl.sum([n, n], lambda i, j: (uT[i, j] - z[i, j]) ** 2)
    return loss, {"u0": u0, "z": z, "c2": c2}


@lru_cache(maxsize=None)
def _workload_program():
    return program("T", "all")


def data(sizes, rng):
    n, T = sizes["n"], sizes["T"]
    return {"u0": rng.uniform(0.0, 1.0, (n, n)), "z": rng.uniform(0.0, 0.5, (n, n)),
            "c2": np.array(C2), "T": int(T)}


def _states(d):
    up, u = d["u0"], d["u0"]
    states = [(up, u)]
    for _ in range(d["T"]):
        up, u = u, 2.0 * u - up + d["c2"] * _lap(u)
        states.append((up, u))
    return states


def loss_ref(d) -> float:
    return float(((_states(d)[-1][1] - d["z"]) ** 2).sum())


def grad_ref(d) -> dict:
    """By hand: the step (up, u) -> (u, 2u - up + c² L u) transposed, with L symmetric."""
    states = _states(d)
    a, b = np.zeros_like(d["u0"]), 2.0 * (states[-1][1] - d["z"])  # cotangents of (u_{t-1}, u_t)
    gc = 0.0
    for up, u in reversed(states[:-1]):
        gc += float((b * _lap(u)).sum())
        a, b = -b, a + 2.0 * b + d["c2"] * _lap(b)
    return {"u0": a + b, "c2": np.array(gc)}


def jax_spec(d):
    """``(loss, args, argnums, post)`` of the JAX peer (``baselines/jax_impl.py``)."""
    import jax
    import jax.numpy as jnp

    T = int(d["T"])

    def lap(u):
        p = jnp.pad(u, 1)
        return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u

    def loss(u0, c2, z):
        _, uT = jax.lax.fori_loop(0, T, lambda t, s: (s[1], 2.0 * s[1] - s[0] + c2 * lap(s[1])), (u0, u0))
        return jnp.sum((uT - z) ** 2)

    return loss, [d["u0"], d["c2"], d["z"]], (0, 1), lambda g: {"u0": g[0], "c2": g[1]}


def workload_fields() -> dict:
    """The fields of the runner's ``Workload`` (built in workloads.py, which this module does not import)."""
    return dict(
        name="wave", number=17, title="2D wave equation, state (u_prev, u) under tl.loop (T = 1000 steps)",
        primary="n", sizes=(64, 128, 256), fixed={"T": 1000},
        quick={"n": 16, "T": 10}, check={"n": 6, "T": 4}, wrt=("u0", "c2"),
        program=_workload_program, data=data, loss_ref=loss_ref, grad_ref=grad_ref,
        work=lambda s: 14 * s["n"] ** 2 * s["T"],
        notes="tl.loop over a pair state, checkpoint='all'; JAX peer: lax.fori_loop",
        tags=("loop",),
    )


def main(argv=None) -> int:
    """``python -m benchmarks.wave [--quick]``: gradient/primal time per
    checkpoint policy, measured as ``benchmarks.heat`` does."""
    import argparse
    import json
    import os

    from .heat import measure_policies

    p = argparse.ArgumentParser(prog="python -m benchmarks.wave", description=main.__doc__.split(":")[0])
    p.add_argument("--quick", action="store_true", help="n = 32, T = 50")
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args(argv)
    n, T = (32, 50) if a.quick else (256, 1000)
    res = {"load_average": os.getloadavg(), "wave": measure_policies(n, T, a.repeats, sys.modules[__name__]),
           "load_average_after": os.getloadavg()}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
