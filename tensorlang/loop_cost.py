"""Cost certificates of loop programs' reverse sweeps, per checkpoint policy
(issue #17 item 2; the paper's Fig. 6 counts, Section 4.3, and Theorem
6.55's factor applied per part).

:func:`adjoint_cost` certifies ``cost(pre^T) + cost(inv^T) + T·(cost(body^T)
+ A) + R·cost(body) + cost(post^T)`` with ``R`` the schedule's recomputed
steps and ``A`` the additions of one step's input cotangents into their
accumulators, and the peak number of stored states; with several loops
(``loops.chain``) the later loops' certificates are computed the same way
on ``post`` and added, each loop's share listed.
"""

from __future__ import annotations

from .errors import describe
from .loop_autodiff import adjoint
from .ir import Var, input_vars, size_vars
from .loops import binomial_budget, has_loop, normalize_checkpoint, schedule, split, t_value
from .typecheck import wrt_inputs as _wrt




def _elements(t, sizes) -> int:
    """The number of reals in a value of type ``t`` at ``sizes``."""
    from .ir import PairT, TensorT

    if isinstance(t, PairT):
        return _elements(t.fst, sizes) + _elements(t.snd, sizes)
    k = 1
    while isinstance(t, TensorT):
        k *= max(0, t.extent.evaluate(sizes))
        t = t.elem
    return k


def adjoint_cost(loss, wrt, policy=None, **sizes) -> dict:
    """The reverse sweep's Fig. 6 operation count and peak stored states at
    the given sizes, for a checkpoint policy (default: each loop's own):
    ``{"primal", "adjoint", "factor", "stored_states", "stored_reals",
    "recomputed_steps", "accumulated_per_step", "loops"}``; the adjoint
    counts the additions of each step's input cotangents into their
    accumulators (what the sweep runs).  With several loops
    (``loops.chain``) ``"loops"`` lists each loop's own share (its steps,
    policy, stored states and reals, recomputed steps, primal and adjoint
    counts) in execution order, and the totals add them up."""
    from .costmodel import cost

    xs, _ = _wrt(wrt, loss)
    sp = split(loss, "adjoint cost")
    override = None if policy is None else normalize_checkpoint(policy)  # None: each loop its own
    policy = sp.checkpoint if override is None else override
    T = sp.steps.evaluate(sizes)

    def c(prog, **extra):
        if isinstance(prog, Var):
            return 0
        return cost(prog, **{k: v for k, v in {**sizes, **extra}.items() if k in {s.name for s in size_vars(prog)}})

    def adj(prog, wrt_):
        wrt_ = [w for w in wrt_ if w in set(input_vars(prog))]
        if not wrt_ or isinstance(prog, Var):
            return None
        return adjoint(prog, wrt_, cotangent="_loop_cot")

    def ct(prog, wrt_):
        a = adj(prog, wrt_)
        return 0 if a is None else c(a)

    def per_step(prog) -> int:
        """Σ_{t<T} of a body program's count: a body that uses t (the size
        loop_t = t + 1) is counted at every step (a guard such as [t >= 1]
        makes steps differ), else T times its count."""
        if prog is None or not T:
            return 0
        if sp.t_size is None:
            return T * c(prog)
        return sum(at_t(prog, t) for t in range(T))

    step_memo: dict = {}

    def at_t(prog, t: int) -> int:  # O(T) counts at given sizes (the recomputed steps reuse them)
        got = step_memo.get((id(prog), t))
        if got is None:
            got = step_memo[(id(prog), t)] = c(prog, **{sp.t_size.name: t_value(t)})
        return got

    hs = [(v, e) for v, e in sp.hoisted if set(input_vars(e)) & set(xs)] if T else []
    bwrt = [row for row, f, _ in sp.rows if f in xs] + xs + [v for v, _ in hs]
    # no step runs at T = 0: the body (and its adjoint, whose t-indexed reads
    # would be out of range) is not built
    body_adj = adj(sp.body, [sp.state] + bwrt) if T else None
    body, body_t = per_step(sp.body), per_step(body_adj)
    body_once = body // T if T and sp.t_size is None else None
    # what runs besides: every step adds the body adjoint's cotangent of each
    # input into its accumulator: one [n] row for f[±t + c, …] (loops.row_inputs),
    # a whole [T][n] array for an input read otherwise (f[2t]: O(T²n) in all)
    body_in = set(input_vars(sp.body))
    accum = sum(_elements(w.type, sizes) for w in bwrt if w in body_in)
    inv = sum(c(e) for _, e in sp.hoisted) if T else 0  # hoisted: once, not per step
    if has_loop(sp.post):  # the next loops (loops.chain): their sweeps, certified the same way
        pxs = [sp.final] + [x for x in xs if x in set(input_vars(sp.post))]
        rest = adjoint_cost(sp.post, pxs, override, **sizes)
        post, post_adj = rest["primal"], rest["adjoint"] - rest["primal"]
    else:
        rest = None
        post, post_adj = c(sp.post), ct(sp.post, [sp.final] + xs)
    primal = c(sp.pre) + inv + body + post
    sch = schedule(policy, T) if T else None
    rec = sch.recomputed if sch else 0
    # recomputed steps: the count of the steps the schedule re-runs (each step's own count when they differ):
    # every advance of the schedule, less the primal's one pass over t = 0 … T-1
    if body_once is not None or sch is None:
        recomputed = rec * (body_once or 0)
    else:
        recomputed = _advanced_count(sch, lambda t: at_t(sp.body, t)) - body
    own = ct(sp.pre, xs) + body_t + T * accum + recomputed + sum(ct(e, xs) for _, e in hs)
    total = primal + own + post_adj
    shown = policy if not (isinstance(policy, tuple) and policy[1] is None) else ("binomial", binomial_budget(policy, T))
    slots = sch.slots if sch else 0
    mine = {
        "loop": describe(sp.loop), "steps": T, "policy": shown, "stored_states": slots,
        "recomputed_steps": rec, "accumulated_per_step": accum,
        # peak state memory in reals: the stored states (the sweeps' two scratch states aside)
        "stored_reals": slots * _elements(sp.state.type, sizes),
        "primal": c(sp.pre) + inv + body, "adjoint": c(sp.pre) + inv + body + own,
    }
    loops_ = [mine] + (rest["loops"] if rest else [])
    out = {
        "policy": shown,
        "primal": primal,
        "adjoint": total,
        "factor": total / primal if primal else float("nan"),
        # every loop's checkpoints are live at once: the first loop's are held
        # while the later loops' reverse sweeps run (they run first)
        "stored_states": sum(x["stored_states"] for x in loops_),
        "stored_reals": sum(x["stored_reals"] for x in loops_),
        "recomputed_steps": sum(x["recomputed_steps"] for x in loops_),
        "accumulated_per_step": accum,
        "loops": loops_,
    }
    if sp.t_size is not None:
        out["note"] = "the body uses t: each step is counted at its own t"
    return out


def _advanced_count(sch, step_cost) -> int:
    """Σ of ``step_cost(t)`` over every step the schedule's advances run
    (``("advance", t0, t1)`` runs the body at t0 … t1 - 1), the primal's included."""
    total = 0
    for act in sch.actions:
        if act[0] == "advance":
            total += sum(step_cost(t) for t in range(act[1], act[2]))
    return total

