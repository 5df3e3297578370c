"""The tensorlang methods: compiled sparse adjoint, naive adjoint, and cost-model counts.

The naive column is the dense one-hot adjoint (``adjoint="naive"``) compiled
by the same backend with the same isl-narrowed loops as the sparse one, so
the two columns differ by the adjoint alone (issue #13 item 8); the older
``mode="naive"`` also ran every loop over its full box (``loops="box"``).

Every column goes through the public entry points, so through their routes of
the one stage list (``tensorlang.driver.ROUTES``): ``tl.grad``, ``tl.compile``,
``tl.normalize``, ``tl.cost``.  Nothing is detected or retried: a stage that
refuses a program is an error row.
"""

from __future__ import annotations

import tensorlang as tl

from .methods import Impl


def stages() -> dict:
    """The routes of the stage list (recorded with the results)."""
    from tensorlang.driver import ROUTE_NAMES

    return {name: list(names) for name, names in ROUTE_NAMES.items() if name in ("grad", "grad naive", "compile", "cost")}


def build(workload, data, sizes, *, naive: bool = False) -> Impl:
    loss, ins = workload.program()
    wrt = [ins[name] for name in workload.wrt]
    kw = {"adjoint": "naive"} if naive else {}

    def make_grad():
        g = tl.grad(loss, wrt=wrt, **kw)
        state["grad"] = g
        return lambda: g(**data)

    def make_primal():
        f = tl.compile(loss)
        return lambda: f(**data)

    def grads(out):
        out = out if isinstance(out, (tuple, list)) else (out,)
        return dict(zip(workload.wrt, out))

    def note():
        flag = kernel_compiled(state.get("grad"))
        how = {True: "compiled", False: "ran on the reference evaluator"}.get(flag, "backend")
        return ("naive adjoint (sparse loops), " if naive else "") + how

    state = {}
    return Impl(make_primal, make_grad, value=float, grads=grads, note=note)


def kernel_compiled(g):
    """Whether tl.grad's kernel was compiled (True), fell back to the evaluator (False), or unknown (None).

    Best effort: tensorlang.runtime's lazy kernel exposes ``.compiled``; tl.grad's
    callable holds it through its program object.
    """
    for cell in getattr(g, "__closure__", None) or ():
        try:
            fn = getattr(cell.cell_contents, "fn", None)
        except ValueError:  # an empty cell
            continue
        flag = getattr(fn, "compiled", None)
        if isinstance(flag, bool):
            return flag
    return None


def costs(workload, data, sizes) -> dict:
    """Fig. 6 operation counts of the loss and of its gradient program (sparse and naive adjoint)."""
    loss, ins = workload.program()
    wrt = [ins[name] for name in workload.wrt]
    out = {"primal": _cost(tl, loss, sizes, data)}
    try:
        out["primal_normalized"] = _cost(tl, tl.normalize(loss), sizes, data)
    except Exception as exc:  # reported in the table, never hidden
        out["primal_normalized_error"] = f"{type(exc).__name__}: {exc}"[:300]
    for key, kw in (("grad", {}), ("grad_naive", {"adjoint": "naive"})):
        try:
            # the program tl.grad runs (adjoint with the seed 1, simplified or dense)
            prog = tl.grad(loss, wrt=wrt, **kw).program
            out[key] = _cost(tl, prog, sizes, data)
        except Exception as exc:  # reported in the table, never hidden
            out[key + "_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if isinstance(out.get("grad"), (int, float)) and out["primal"]:
        out["ratio"] = out["grad"] / out["primal"]
    return out


def _cost(tl, expr, sizes, data):
    # a relation's count depends on its data (the nonzeros), so pass the relation arrays too
    rels = {k: v for k, v in data.items() if getattr(v, "dtype", None) == bool}
    return int(tl.cost(expr, **sizes, **rels))
