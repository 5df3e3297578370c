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
from .loop_cost import adjoint_cost
from .loops import binomial_budget, chain, normalize_checkpoint, repetitions, t_value

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


def _label(pol, T: int) -> str:
    if pol == "all":
        return "all"
    if isinstance(pol, int):
        return f"every {pol}"
    return f"binomial, s = {binomial_budget(pol, T) if T else pol[1]}"


def audit_loop(expr, *, wrt=None, sizes=None, entry: str = "loss", show_kernels: bool = False):
    """The audit of a program with one loop or several (``loops.chain``):
    each loop's body audited as its own program, then per checkpoint policy
    (each loop's own, and ``"all"``, ``k = √T``, ``"binomial"`` for every
    loop) each loop's certified adjoint count, stored states and peak state
    memory (reals), and with several loops the whole program's."""
    from . import audit as A
    from .sharing import pretty

    sps = chain(expr, "tensorlang audit")
    many = len(sps) > 1
    names = [w if isinstance(w, str) else w.name for w in (wrt or [])]
    wrt_vars = A.resolve_wrt(expr, names)
    known, sizes = A.audit_sizes(expr, sizes)
    report = A.AuditReport(pretty(expr), entry, [v.name for v in wrt_vars], {k: sizes[k] for k in known})
    primal = A.StageRow("loop program", expr=expr, cost=A.cost_at(expr, sizes), symbolic=A.symbolic_cost_of(expr))
    primal.declared = tuple(input_vars(expr))
    report.rows.append(primal)
    kernels: dict = {}
    wrt_k = list(wrt_vars)  # the k-th loop program's wrt: the inputs and the earlier loops' final states it reads
    for k, sp in enumerate(sps):
        if k:
            prog_in = set(input_vars(sps[k - 1].post))
            wrt_k = [x for x in wrt_k + [sps[k - 1].final] if x in prog_in]
        body_in = {v.name for v in input_vars(sp.body)}
        body_wrt = [sp.state.name] + [v.name for v in wrt_k if v.name in body_in]
        # an input read as f[±t + c, …] is the body's row inputs (loops.row_inputs): [n] cotangents per step
        body_wrt += [row.name for row, f, _ in sp.rows if f in set(wrt_k)]
        # hoisted loop-invariant terms (loops.hoist_invariants) of the wrt inputs: inputs of the body too
        body_wrt += [v.name for v, e in sp.hoisted if v.name in body_in and set(input_vars(e)) & set(wrt_k)]
        body_sizes = {kk: v for kk, v in sizes.items() if kk in {s.name for s in size_vars(sp.body)}}
        if sp.t_size is not None:
            body_sizes[sp.t_size.name] = t_value(0)
        where = f"loop {k + 1} body" if many else "loop body"
        body = A.audit(sp.body, wrt=body_wrt, sizes=body_sizes, entry=f"{entry} ({where})", show_kernels=show_kernels)
        tag = f"body {k + 1}: " if many else "body: "
        for r in body.rows:
            r.name = tag + r.name
            report.rows.append(r)
        for v in body.verdicts:
            v.name = tag + v.name
            report.verdicts.append(v)
        kernels.update({(f"loop {k + 1}: {name}" if many else name): src for name, src in body.kernels.items()})
    Ts = [sp.steps.evaluate(sizes) for sp in sps]
    own = [normalize_checkpoint(sp.checkpoint) for sp in sps]
    seen = []
    for pol in [None, "all", max(1, math.isqrt(max(Ts))), ("binomial", None)]:
        pols = own if pol is None else [normalize_checkpoint(pol)] * len(sps)
        if pols in seen:
            continue
        seen.append(pols)
        c = adjoint_cost(expr, wrt_vars, pol, **sizes)
        bounds = [certified_factor(p, T) for p, T in zip(pols, Ts)]
        for k, (p, T, lc, bound) in enumerate(zip(pols, Ts, c["loops"], bounds)):
            label = _label(p, T)
            name = f"loop {k + 1} adjoint" if many else "loop adjoint"
            row = A.StageRow(f"{name}, checkpoint {label}", expr=expr, cost=lc["adjoint"] if many else c["adjoint"],
                             reason=f"stored states {lc['stored_states']}, recomputed steps {lc['recomputed_steps']}, "
                                    f"peak state memory {lc['stored_reals']} reals")
            row.declared = primal.declared
            mine = (lc["adjoint"] / lc["primal"] if lc["primal"] else float("nan")) if many else c["factor"]
            row.ratio = mine
            report.rows.append(row)
            ok = lc["primal"] if many else primal.cost
            report.verdicts.append(A.Verdict(
                f"{name} ({label})", f"$(adjoint) <= {bound:g}·$(primal), {lc['stored_states']} stored states",
                bool(mine <= bound) if ok else None, "grid",
                f"factor {mine:.3f} at {sizes}; peak stored states {lc['stored_states']} "
                f"({lc['stored_reals']} reals)"))
        if many:  # the whole program: every part within the largest of the loops' factors (each >= 5 >= a part's)
            label = ("each loop's own" if pol is None else
                     "binomial" if isinstance(pols[0], tuple) and pols[0][1] is None else _label(pols[0], max(Ts)))
            row = A.StageRow(f"loops adjoint (all {len(sps)}), checkpoint {label}", expr=expr, cost=c["adjoint"],
                             reason=f"stored states {c['stored_states']}, recomputed steps {c['recomputed_steps']}, "
                                    f"peak state memory {c['stored_reals']} reals")
            row.declared = primal.declared
            row.ratio = c["factor"]
            report.rows.append(row)
            report.verdicts.append(A.Verdict(
                f"loops adjoint ({label})", f"$(adjoint) <= {max(bounds):g}·$(primal)",
                bool(c["factor"] <= max(bounds)) if primal.cost else None, "grid",
                f"factor {c['factor']:.3f} at {sizes}; peak stored states {c['stored_states']} "
                f"({c['stored_reals']} reals, all loops' checkpoints live at once)"))
    report.asymptotic = {"primal": A.leading_monomial(primal.symbolic)}
    report.kernels = kernels
    return report
