"""The tensorlang methods: compiled sparse adjoint, naive adjoint, and cost-model counts.

The naive column is the dense one-hot adjoint (``adjoint="naive"``) compiled
by the same backend with the same isl-narrowed loops as the sparse one, so
the two columns differ by the adjoint alone (issue #13 item 8); the older
``mode="naive"`` also ran every loop over its full box (``loops="box"``).

A workload may give tensorlang its data in the form its peers take
(``Workload.tl_form``): the sparse model's JAX, PyTorch and hand-written
kernels take A's values packed on S's pattern (prepared once, outside the
timing) and return A's cotangent packed, so tensorlang runs the same loss on
a sparse tensor (``tl.sparse_tensor("A", S)``) fed the same packed values
as a CSR matrix.  Every method's gradient is densified after timing, for the
check against NumPy.

Every column goes through the public entry points, so through their routes of
the one stage list (``tensorlang.driver.ROUTES``): ``tl.grad``, ``tl.compile``,
``tl.normalize``, ``tl.cost``.  Nothing is detected or retried: a stage that
refuses a program is an error row.
"""

from __future__ import annotations

from .methods import Impl


def _tl():
    import tensorlang

    return tensorlang


def build(workload, data, sizes, *, naive: bool = False) -> Impl:
    tl = _tl()
    if workload.tl_form is not None:
        loss, ins, data, post = workload.tl_form(data)
    else:
        (loss, ins), post = workload.program(), None
    wrt = [ins[name] for name in workload.wrt]
    kw = {"adjoint": "naive"} if naive else {}

    def make_grad():
        g = tl.grad(loss, wrt=wrt, **kw)
        return lambda: g(**data)

    def make_primal():
        f = tl.compile(loss)
        return lambda: f(**data)

    def grads(out):
        out = out if isinstance(out, (tuple, list)) else (out,)
        got = dict(zip(workload.wrt, out))
        return post(got) if post is not None else got

    note = "naive adjoint (sparse loops), compiled" if naive else "compiled"
    if workload.tl_form is not None:
        note += "; " + workload.tl_form.__doc__.strip().splitlines()[0]
    return Impl(make_primal, make_grad, value=float, grads=grads, note=note)


def costs(workload, data, sizes) -> dict:
    """Fig. 6 operation counts of the loss and of its gradient program (sparse and naive adjoint)."""
    tl = _tl()
    loss, ins = workload.program()
    wrt = [ins[name] for name in workload.wrt]
    out = {"primal": _cost(tl, loss, sizes, data)}
    try:
        out["primal_normalized"] = _cost(tl, tl.normalize(loss), sizes, data)
    except tl.TensorLangError as exc:  # reported in the table, never hidden
        out["primal_normalized_error"] = f"{type(exc).__name__}: {exc}"[:300]
    for key, kw in (("grad", {}), ("grad_naive", {"adjoint": "naive"})):
        try:
            g = tl.grad(loss, wrt=wrt, **kw)
            if not hasattr(g, "program"):  # a loop's gradient is several kernels, certified per policy
                out[key + "_error"] = "loop program: `tensorlang audit` certifies its adjoint per checkpoint policy"
                continue
            # the program tl.grad runs (adjoint with the seed 1, simplified)
            out[key] = _cost(tl, g.program, sizes, data)
        except tl.TensorLangError as exc:  # reported in the table, never hidden
            out[key + "_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if isinstance(out.get("grad"), (int, float)) and out["primal"]:
        out["ratio"] = out["grad"] / out["primal"]
    return out


def _cost(tl, expr, sizes, data):
    # a relation's count depends on its data (the nonzeros), so pass the relation arrays too
    rels = {k: v for k, v in data.items() if getattr(v, "dtype", None) == bool}
    return int(tl.cost(expr, **sizes, **rels))
