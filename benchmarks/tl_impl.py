"""The tensorlang methods: compiled sparse adjoint, naive adjoint, and cost-model counts.

The naive column is the dense one-hot adjoint (``adjoint="naive"``) compiled
by the same backend with the same isl-narrowed loops as the sparse one, so
the two columns differ by the adjoint alone (issue #13 item 8); the older
``mode="naive"`` also ran every loop over its full box (``loops="box"``).

The later compiler stages are detected, never assumed: ``tl.grad`` needs
tensorlang.autodiff, ``tl.compile`` needs tensorlang.backend.api, ``tl.cost``
needs tensorlang.costmodel.  Without the compiled backend ``tl.grad`` runs on the
reference evaluator (pure Python), which is allowed only at tiny sizes; larger
sizes are reported "not available" instead of running for hours.
"""

from __future__ import annotations

import importlib.util

from .methods import Impl, NotAvailable

# Largest workload.work(sizes) the reference evaluator is asked to run.
EVALUATOR_LIMIT = 20_000


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def stages() -> dict:
    """Which later stages exist in this checkout."""
    return {
        "autodiff": _have("tensorlang.autodiff"),
        "backend": _have("tensorlang.backend.api"),
        "cost": _have("tensorlang.costmodel"),
    }


class _API:
    """tensorlang's later-stage functions, resolved from their modules."""

    def __getattr__(self, name):
        import tensorlang as tl

        mod = tl._LAZY.get(name)
        if mod is None:
            return getattr(tl, name)
        return getattr(importlib.import_module(mod), name)


def build(workload, data, sizes, *, naive: bool = False) -> Impl:
    tl = _API()
    st = stages()
    if not st["autodiff"]:
        raise NotAvailable("tensorlang.autodiff (tl.grad) not present yet")
    compiled = st["backend"]
    if not compiled and workload.work(sizes) > EVALUATOR_LIMIT:
        raise NotAvailable("compiled backend (tensorlang.backend.api) not present; reference evaluator too slow here")
    loss, ins = workload.program()
    wrt = [ins[name] for name in workload.wrt]
    kw = {"adjoint": "naive"} if naive else {}

    def make_grad():
        try:
            g = tl.grad(loss, wrt=wrt, **kw)
        except TypeError as exc:
            if naive:
                raise NotAvailable(f"tl.grad does not accept adjoint='naive' yet ({exc})") from None
            raise
        state["grad"] = g
        return lambda: g(**data)

    def make_primal():
        if compiled:
            f = tl.compile(loss)
            return lambda: f(**data)
        return lambda: tl.evaluate(loss, **data)

    def grads(out):
        out = out if isinstance(out, (tuple, list)) else (out,)
        return dict(zip(workload.wrt, out))

    def note():
        if not compiled:
            how = "reference evaluator (no compiled backend yet)"
        else:
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
    tl = _API()
    st = stages()
    if not st["cost"]:
        raise NotAvailable("tensorlang.costmodel (tl.cost) not present yet")
    loss, ins = workload.program()
    wrt = [ins[name] for name in workload.wrt]
    out = {"primal": _cost(tl, loss, sizes, data)}
    if _have("tensorlang.passes.pipeline"):
        try:
            out["primal_normalized"] = _cost(tl, tl.normalize(loss), sizes, data)
        except Exception as exc:  # reported in the table, never hidden
            out["primal_normalized_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if not st["autodiff"]:
        out["grad_error"] = "tensorlang.autodiff (tl.adjoint) not present yet"
        return out
    for key, kw in (("grad", {}), ("grad_naive", {"adjoint": "naive"})):
        try:
            # the program tl.grad runs (adjoint with the seed 1, simplified); else the bare adjoint
            prog = getattr(tl.grad(loss, wrt=wrt, **kw), "program", None)
            if prog is None:
                prog = tl.adjoint(loss, wrt=wrt, **kw)
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
