"""``tensorlang audit`` of a loop program (issue #17 item 2: certified
checkpointing; the paper's Theorem 6.55 applied to the loop's body).

The loop's body is audited as its own program (every normal-form pass, the
total derivative and the adjoint, with the paper's verdicts), with the state
an input.  Then, per checkpoint policy (the loop's own, ``"all"``, ``k =
√T`` and ``"binomial"``), the reverse sweep's Fig. 6 cost is certified:

    $(adjoint) = $(primal) + $(pre^T) + T·($(body^T) + A) + R·$(body) + $(post^T)

with ``R`` the schedule's recomputed steps, ``A`` the additions of one
step's input cotangents into their accumulators (one ``[n]`` row per row
input read as ``f[±t + c, …]``, the whole input otherwise: counted as run,
so ``f[2t, i]`` shows its ``O(T²n)``), and the peak number of stored
states.  The policy's factor over the primal is at most ``1 + 4 + R/T``
(the primal's sweep, each part's adjoint within Theorem 6.55's factor 4 of
the part, and the recomputation): ``"all"`` 5, ``k`` at most 6, binomial
with repetition number ``r`` at most ``5 + r``; the verdict checks the
computed factor against it at the audit's sizes (the body's own verdicts
decide its factor symbolically).
"""

from __future__ import annotations

import math

from .ir import input_vars, size_vars
from .loop_autodiff import adjoint_cost
from .loops import binomial_budget, normalize_checkpoint, repetitions, schedule, split, t_value

DEFAULT_SIZE = 100


def certified_factor(policy, T: int) -> float:
    """The proved bound on $(adjoint) / $(primal) of a checkpoint policy at
    ``T`` steps (module doc): ``"all"`` 5, every ``k`` 6, binomial with
    repetition number ``r`` ``5 + r`` (``R <= r·T`` recomputed steps)."""
    pol = normalize_checkpoint(policy)
    if isinstance(pol, int):
        return 6.0
    if isinstance(pol, tuple):
        return 5.0 + (repetitions(binomial_budget(pol, T), T) if T else 0)
    return 5.0


def audit_loop(expr, *, wrt=None, sizes=None, entry: str = "loss", show_kernels: bool = False):
    from . import audit as A
    from .sharing import pretty

    sp = split(expr, "tensorlang audit")
    names = [w if isinstance(w, str) else w.name for w in (wrt or [])]
    wrt_vars = A.resolve_wrt(expr, names)
    known, sizes = A.audit_sizes(expr, sizes)
    body_in = {v.name for v in input_vars(sp.body)}
    body_wrt = [sp.state.name] + [v.name for v in wrt_vars if v.name in body_in]
    # an input read as f[±t + c, …] is the body's row inputs (loops.row_inputs): [n] cotangents per step
    body_wrt += [row.name for row, f, _ in sp.rows if f in set(wrt_vars)]
    # hoisted loop-invariant terms (loops.hoist_invariants) of the wrt inputs: inputs of the body too
    body_wrt += [v.name for v, e in sp.hoisted if v.name in body_in and set(input_vars(e)) & set(wrt_vars)]
    body_sizes = {k: v for k, v in sizes.items() if k in {s.name for s in size_vars(sp.body)}}
    if sp.t_size is not None:
        body_sizes[sp.t_size.name] = t_value(0)
    body = A.audit(sp.body, wrt=body_wrt, sizes=body_sizes, entry=entry + " (loop body)", show_kernels=show_kernels)
    report = A.AuditReport(pretty(expr), entry, [v.name for v in wrt_vars], {k: sizes[k] for k in known})
    primal = A.StageRow("loop program", expr=expr, cost=A.cost_at(expr, sizes), symbolic=A.symbolic_cost_of(expr))
    primal.declared = tuple(input_vars(expr))
    report.rows.append(primal)
    for r in body.rows:
        r.name = "body: " + r.name
        report.rows.append(r)
    for v in body.verdicts:
        v.name = "body: " + v.name
        report.verdicts.append(v)
    T = sp.steps.evaluate(sizes)
    policies = [sp.checkpoint, "all", max(1, math.isqrt(T)), ("binomial", None)]
    seen = []
    for pol in policies:
        pol = normalize_checkpoint(pol)
        if pol in seen:
            continue
        seen.append(pol)
        c = adjoint_cost(expr, wrt_vars, pol, **sizes)
        sch = schedule(pol, T) if T else None
        bound = certified_factor(pol, T)
        label = "all" if pol == "all" else (f"every {pol}" if isinstance(pol, int) else
                                            f"binomial, s = {binomial_budget(pol, T) if T else pol[1]}")
        row = A.StageRow(f"loop adjoint, checkpoint {label}", expr=expr, cost=c["adjoint"],
                         reason=f"stored states {c['stored_states']}, recomputed steps {c['recomputed_steps']}")
        row.declared = primal.declared
        row.ratio = c["factor"]
        report.rows.append(row)
        holds = bool(c["factor"] <= bound) if primal.cost else None
        report.verdicts.append(A.Verdict(
            f"loop adjoint ({label})", f"$(adjoint) <= {bound:g}·$(primal), {c['stored_states']} stored states",
            holds, "grid", f"factor {c['factor']:.3f} at {sizes}; peak stored states {sch.slots if sch else 0}"))
    report.asymptotic = {"primal": A.leading_monomial(primal.symbolic)}
    report.kernels = body.kernels
    return report
