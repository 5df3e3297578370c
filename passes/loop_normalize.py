"""``tl.normalize`` of a loop program (issue #17 item 1, "normal forms: the
body is normalized as its own program; loop-invariant work is hoisted out of
the loop"; the paper's Section 5 applied per part, as the loop stages do).

A ``Loop`` node is not in the grammar of Figs. 7-10, so the four passes
cannot run across it (let-lifting refused it as "not a value expression").
The program is cut at its loop by ``loops.split`` (a per-element loop under
``gen``/``sum`` lifted first, loops in sequence one after the other) and
every loop-free part goes through the normal-form route on its own: the
initial state, the body (one step: the state an input, ``t`` the size
``t + 1``), each hoisted loop-invariant term, and the rest of the program
(which holds the next loops, normalized the same way).  The parts are then
put back together: the body's rows ``f[±t + c]`` (``loops.row_inputs``) go
back in their places before it is normalized (a guarded row stays guarded),
the normalized body's state input becomes the loop's state again, its
hoisted terms (normalized) go back in their places, the size standing for
``t + 1`` becomes ``t + 1``, and the normalized rest receives the new loop where it
used the final state.  The result has the original's value and inputs;
``split`` finds the same loop in it, so compiling, costing or
differentiating it takes the same per-part routes.

A part that cannot be normalized is reported as a TensorLangError naming
the loop and the stage (``tl.normalize``: the part).
"""

from __future__ import annotations

from tensorlang.errors import TensorLangError, UnsupportedError, describe
from tensorlang.ir import (Access, Aff, Gen, Let, Loop, Node, SizeVar, Sum, Var, children, input_vars, rebuild, size_vars,
                           subst, sym_aff, walk)
from tensorlang.loops import has_loop, split
from tensorlang.typecheck import check_program

STAGE = "tl.normalize"


def normalize_loop_program(expr, normalize_part):
    """The normalized loop program (module doc); ``normalize_part``: the
    normal-form route of a loop-free program (``pipeline.normalize``)."""
    sp = split(expr, STAGE)
    lp = sp.loop

    def part(e, what):
        if isinstance(e, Var) and e.uid == 0:  # an input or the state itself: nothing to normalize
            return e
        try:
            return normalize_part(e)
        except TensorLangError as exc:
            raise UnsupportedError(f"{STAGE}: the {what} of the loop {describe(lp)} cannot be normalized: {exc}") from None

    if sp.steps.is_const and sp.steps.const == 0:  # the body never runs (it may read out of range): kept
        body = lp.body
    else:
        # the rows f[±t + c] (loops.row_inputs) go back before normalizing: a
        # row read under a guard ([1 ≤ t]·f[t - 1]) must stay under it
        t_size = sp.t_size
        if t_size is None and sp.rows:  # t was read in rows only
            taken = {s.name for s in size_vars(expr)} | {v.name for v in input_vars(expr)}
            t_size = SizeVar(next(nm for nm in (("_" * k) + "loop_t" for k in range(len(taken) + 1)) if nm not in taken))
        rows = {row: Access(f, idx.subst({lp.ivar: sym_aff(t_size) - 1})) for row, f, idx in sp.rows}
        body = part(subst(sp.body, vals=rows), "body")
        if t_size is not None:
            body = _size_to_index(body, t_size, sym_aff(lp.ivar) + 1, lp)
        vals = {sp.state: lp.svar}
        vals.update({v: part(e, f"loop-invariant term {describe(e)}") for v, e in sp.hoisted})
        body = subst(body, vals=vals)
    init = part(sp.pre, "initial state")
    new = Loop(lp.extent, init, lp.ivar, lp.svar, body, lp.checkpoint)
    if has_loop(sp.post):  # the next loops (loops.chain): the same, recursively
        post = normalize_loop_program(sp.post, normalize_part)
    else:
        post = part(sp.post, "program after")
    out = subst(post, vals={sp.final: new})
    try:
        check_program(out)
    except TensorLangError as exc:  # pragma: no cover - each part keeps its type
        raise UnsupportedError(f"{STAGE}: the normalized parts of the loop {describe(lp)} do not fit together: {exc}") from None
    return out


def _size_to_index(body, size, aff, lp):
    """``body`` with the size ``size`` (``Split.t_size``, standing for
    ``t + 1``) replaced by the affine index ``aff`` in every index and
    predicate.  Refused, naming the loop, where the size has reached an
    extent or a type (a normalized ``Σ_i [i ≤ t]`` may have become a sum
    over ``[0, t + 1)``): an extent cannot depend on a loop's step index."""
    for x in walk(body):
        bad = None
        if isinstance(x, (Gen, Sum)) and size in x.extent.size_vars():
            bad = f"the extent {x.extent} of {describe(x)}"
        elif isinstance(x, (Var, Let)) and size in size_vars(x.type if isinstance(x, Var) else x.var.type):
            bad = f"the type of {describe(x)}"
        if bad is not None:
            raise UnsupportedError(
                f"{STAGE}: the normalized body of the loop {describe(lp)} uses the step index t in {bad}; "
                "an extent cannot depend on a loop's step index (normalize the loop's parts with tl.loops.split)")
    memo: dict = {}

    def go(n):
        if isinstance(n, Aff):
            return n.subst({size: aff})
        if isinstance(n, tuple):
            return tuple(go(c) for c in n)
        if not isinstance(n, Node) or size not in size_vars(n):
            return n
        got = memo.get(n)
        if got is None:
            got = memo[n] = rebuild(n, [go(c) for c in children(n)])
        return got

    return go(body)


__all__ = ["normalize_loop_program"]
