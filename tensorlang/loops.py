"""Time-stepping loops: ``tl.loop(T, init, lambda t, s: body, checkpoint=...)``
(issue #17 items 1-2; an extension of the paper's language, Section 4, Fig. 3).

``loop[t:T] (s = init) body`` is the state after ``T`` sequential steps:
``s_0 = init``, ``s_{t+1} = body[t, s_t]``, value ``s_T``.  ``T`` is a size
expression or an int ``>= 0``; ``t`` is an index in ``[0, T)`` usable in
affine indices (``forcing[t, i]``); the state is a tensor, a scalar or nested
pairs of them, and the body maps the state type to itself.

Stages (the node is ``ir.Loop``):

* typing (``typecheck``): the body's type is the state's, else a
  TypeCheckError naming both types;
* evaluation (``evaluator``, rule 4.x extended): the recurrence above, over
  floats or sympy;
* bounds (``bounds``): ``t`` ranges over ``[0, T)`` in the in-range proof,
  so ``forcing[t + 1, i]`` with ``forcing : [T]...`` is refused naming it;
* everything else works at *program level*, as JAX's ``scan`` does:
  :func:`split` cuts a program at its first innermost loop into ``pre``
  (computes ``init``), the ``body`` as its own
  program (the state an input, ``t`` a size), and ``post`` (consumes the
  final state); the body's loop-invariant terms are hoisted out of it
  (:func:`hoist_invariants`) and computed once, and an input read only as
  ``f[±t + c, …]`` becomes per-step row inputs (:func:`row_inputs`: its
  cotangent is built one row per step).  Each part is loop-free and goes through the existing
  normal forms, derivatives, cost model and backend unchanged
  (``tensorlang.loop_autodiff`` drives them).  With several loops ``post``
  holds the others and is split again (:func:`chain`: loops in sequence,
  one loop's result in another's init or body, independent loops feeding
  one loss); a per-element loop under ``gen``/``sum`` becomes one loop
  over the tensor of the elements' states (:func:`lift_loop`); a loop
  reading ``tl.let``-bound values gets their definitions (:func:`inline_lets`);
  a loop nested in a loop body that uses the outer ``t`` or state is refused.

Checkpoint policies (:func:`schedule`) decide which states the reverse sweep
stores: ``"all"`` (``T`` states), an int ``k`` (every ``k``-th state, each
segment recomputed), or ``"binomial"`` / ``("binomial", s)`` (Griewank's
Revolve: at most ``s`` snapshots, repetition number ``r`` minimal with
``C(s + r, s) >= T``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from .errors import TensorLangError, TypeCheckError, UnsupportedError, describe
from .ir import (
    Expr,
    IndexVar,
    Loop,
    SizeVar,
    Var,
    as_expr,
    fresh_uid,
    free_indices,
    free_vars,
    input_vars,
    rebuild,
    children,
    size_vars,
    subst,
    sym_aff,
    walk,
)
from .typecheck import type_of
# the checkpoint schedules (their own module), names kept here for their users
from .loop_schedule import Schedule, binomial_budget, repetitions, schedule  # noqa: F401

POLICIES = ("all", "every k (an int >= 1)", "binomial", "('binomial', s)")


def normalize_checkpoint(ck):
    """``"all"``, an int ``k >= 1``, or ``("binomial", s)`` (``s`` an int >= 1 or None: chosen per run)."""
    # names compared only as strings: ``array == "all"`` is an array, whose truth raised ValueError
    if ck is None or (isinstance(ck, str) and ck == "all"):
        return "all"
    if isinstance(ck, bool):
        raise TensorLangError(f"loop checkpoint must be one of {POLICIES}, got {ck!r}")
    if isinstance(ck, int):
        if ck < 1:
            raise TensorLangError(f"loop checkpoint every k steps needs k >= 1, got {ck}")
        return int(ck)
    if isinstance(ck, str) and ck == "binomial":
        return ("binomial", None)
    binomial = isinstance(ck, tuple) and len(ck) == 2 and isinstance(ck[0], str) and ck[0] == "binomial"
    if binomial and ck[1] is None:
        return ck
    if binomial and isinstance(ck[1], int) and not isinstance(ck[1], bool):
        if ck[1] < 1:
            raise TensorLangError(f"binomial checkpointing needs a snapshot budget >= 1, got {ck[1]}")
        return ("binomial", int(ck[1]))
    raise TensorLangError(f"loop checkpoint must be one of {POLICIES}, got {ck!r}")


def loop(T, init, fn, checkpoint="all") -> Expr:
    """``tl.loop(T, init, lambda t, s: body)``: the state after ``T`` steps (module doc)."""
    from .api import _extent, _names

    try:
        ext = _extent(T, "tl.loop: the number of steps T")
    except TensorLangError as exc:
        raise type(exc)(str(exc)) from None
    if ext.is_const and ext.const < 0:
        raise TensorLangError(f"tl.loop: the number of steps T = {ext.const} is negative; T is a size or an int >= 0")
    _check_steps_nonnegative(ext)
    ck = normalize_checkpoint(checkpoint)
    init = as_expr(init)
    t0 = type_of(init)
    tname, sname = _names(fn, 2, "t", "tl.loop")
    t = IndexVar(tname, fresh_uid())
    s = Var(sname, fresh_uid(), t0)
    body = as_expr(fn(sym_aff(t), s))
    tb = type_of(body)
    if tb is not t0:
        raise TypeCheckError(
            f"tl.loop: the body must map the state type to itself, but the initial state {describe(init)} "
            f"has type {t0} and the body {describe(body)} has type {tb}"
        )
    out = Loop(ext, init, t, s, body, ck)
    type_of(out)
    _check_bounds(out)
    return out


def _check_steps_nonnegative(ext) -> None:
    """A symbolic ``T`` must be ``>= 0`` at every size ``>= 1`` (the sizes the
    passes and the cost model reason about): ``n - 5`` is refused naming its
    value at ``n = 1``, rather than run as zero steps where it is negative
    (rule 4.7 would read a negative extent as empty).  ``n - 1`` passes."""
    if ext.is_const:
        return
    neg = [(s, c) for s, c in ext.terms if c < 0]
    ones = {s: 1 for s, _ in ext.terms}
    at_one = ext.evaluate(ones)
    if neg or at_one < 0:
        where = ", ".join(f"{s} = 1" for s in ones)
        why = (f"its coefficient of {neg[0][0]} is negative, so it is negative for large {neg[0][0]}" if neg
               else f"it is {at_one} at {where}")
        raise TensorLangError(
            f"tl.loop: the number of steps T = {ext} may be negative ({why}); T is a size or an int >= 0, "
            "or a size expression that is >= 0 for every size >= 1"
        )


def _check_bounds(lp: Loop) -> None:
    """The body's accesses are proven in range for ``t`` in ``[0, T)`` now,
    so an out-of-range ``t`` is reported naming the loop."""
    from . import bounds
    from .errors import BoundsError

    if free_indices(lp):  # an enclosing binder's index: checked with the whole program
        return
    try:
        bounds.check_program(lp)
    except BoundsError as exc:
        raise BoundsError(f"in the loop {describe(lp)}: {exc}") from None


def has_loop(e: Expr) -> bool:
    return any(isinstance(x, Loop) for x in walk(e))


# --------------------------------------------------------------------------
# Program-level split


@dataclass(frozen=True)
class Split:
    """A loop program cut at its loop (module doc).

    ``pre`` computes the initial state from the inputs; ``body`` is one step
    as a program of the inputs, the state input ``state`` and (when the body
    uses ``t``) the size ``t_size`` standing for ``t + 1`` (sizes are >= 1
    in the passes' and the cost model's reasoning, and ``t`` may be 0: see
    :func:`t_value`); ``post`` maps the inputs and the final
    state input ``final`` to the program's value."""

    loop: Loop
    steps: object  # the Aff T
    pre: Expr
    body: Expr
    state: Var
    t_size: SizeVar | None
    post: Expr
    final: Var
    hoisted: tuple = ()  # ((Var, Expr), …): loop-invariant work, computed once before the loop
    rows: tuple = ()  # ((row Var, input Var, index Aff), …): ``f[±t + c]`` passed as its own input (row_inputs)

    @property
    def checkpoint(self):
        return self.loop.checkpoint


def _fresh_name(taken: set, base: str) -> str:
    """``base``, or ``_base``, ``__base``, ...: not taken, and neither is its
    tangent's name ``d<name>`` (jvp names the tangent of the state, of a row
    and of a hoisted term so: a user input ``dloop_state`` refused jvp)."""
    name = base
    while name in taken or "d" + name in taken:
        name = "_" + name
    return name


def split(expr: Expr, stage: str = "this stage") -> Split:
    """Cut ``expr`` at its first innermost top-level loop (a loop with no
    loop inside its init or body), or raise UnsupportedError naming the loop
    and ``stage``.

    With several loops (a chain or a DAG of them: a second loop's init, or
    its body's loop-invariant input, computed from the first's final state,
    or two independent loops feeding one loss) ``pre`` and ``body`` are
    loop-free and ``post`` holds the remaining loops, with the final state an
    input: ``post`` is itself a loop program, split the same way
    (:func:`chain`).  A loop inside another loop's body that uses that loop's
    ``t`` or state is refused; a loop under ``gen``/``sum`` binders (a
    per-element time loop) is lifted first (:func:`lift_loop`), after the
    ``tl.let``-bound values it reads are put in (:func:`inline_lets`)."""
    loops = [x for x in walk(expr) if isinstance(x, Loop)]
    if not loops:
        raise TensorLangError(f"{stage}: the program has no loop")
    lp = next(x for x in loops if not any(isinstance(y, Loop) for y in walk(x) if y is not x))
    inlined = inline_lets(expr, lp)
    if inlined is not None:  # the loop reads let-bound values: their definitions put in
        return split(inlined, stage)
    lifted = lift_loop(expr, lp, loops, stage)
    if lifted is not None:  # a per-element loop under gen/sum: one loop over a tensor of states
        return split(lifted, stage)
    _check_top_level(lp, loops, stage)
    taken = {v.name for v in input_vars(expr)} | {s.name for s in size_vars(expr)}
    final = Var(_fresh_name(taken, "loop_final"), 0, lp.svar.type)
    state = Var(_fresh_name(taken, "loop_state"), 0, lp.svar.type)
    body = subst(lp.body, vals={lp.svar: state})
    body, hoisted = hoist_invariants(body, state, taken | {final.name, state.name})
    body, rows = row_inputs(body, lp.ivar, taken | {final.name, state.name} | {v.name for v, _ in hoisted})
    t_size = None
    if lp.ivar in free_indices(body):
        t_size = SizeVar(_fresh_name(taken, "loop_t"))
        body = subst(body, idx={lp.ivar: sym_aff(t_size) - 1})
    post = _replace(expr, lp, final)
    return Split(lp, lp.extent, lp.init, body, state, t_size, post, final, hoisted, rows)


def inline_lets(expr: Expr, lp: Loop):
    """``expr`` with the let-bound variables ``lp`` reads (``tl.let(v, lambda
    w: … loop(…, w …) …)``) replaced, in ``lp`` only, by their definitions
    (transitively), so the loop is computed from the inputs alone, as it is
    when the same value is shared as a Python object; None when ``lp`` reads
    none, or one bound elsewhere than by a let around it (a gen/sum index's
    let, a loop's state: refused by ``_check_top_level``).  The definition
    is then computed for the loop's parts (its init, or once as a hoisted
    loop-invariant term) and again where the rest of the program reads it."""
    from .ir import Let

    bound = {v for v in free_vars(lp) if v.uid != 0}
    if not bound:
        return None
    defs = {x.var: x.value for x in _path(expr, lp)
            if isinstance(x, Let) and (x.body is lp or lp in _subterms(x.body))}
    new = lp
    for _ in range(len(defs) + 1):
        use = {v: defs[v] for v in free_vars(new) if v in defs}
        if not use:
            break
        new = subst(new, vals=use)
    if new is lp or any(v.uid != 0 for v in free_vars(new)):
        return None
    return _replace(expr, lp, new)


def _check_top_level(lp: Loop, loops: list, stage: str) -> None:
    """``lp`` is computed once per run of the program: it uses no enclosing
    loop's ``t`` or state, no gen/sum index and no let-bound variable."""
    idx, fv = free_indices(lp), set(free_vars(lp))
    for outer in loops:
        if outer is lp:
            continue
        uses = ([repr(outer.ivar)] if outer.ivar in idx else []) + ([outer.svar.name] if outer.svar in fv else [])
        if uses:
            raise UnsupportedError(
                f"{stage}: the loop {describe(lp)} is nested in the body of the loop {describe(outer)} and uses its "
                f"{' and '.join(uses)}; a loop nested in a loop body is not supported (only one that uses neither "
                "the enclosing step index nor its state, computed once): supported are loops in sequence, "
                "a loop's init or body using another loop's final state, and independent loops in one program"
            )
    if idx:
        names = ", ".join(sorted(repr(i) for i in idx))
        raise UnsupportedError(
            f"{stage}: the loop {describe(lp)} sits inside a gen/sum binder (it uses its index {names}); "
            "that no enclosing gen/sum binds; loops must be at top level or directly under gen/sum binders "
            "(per-element loops, run as one loop over the elements)"
        )
    bound = [v for v in fv if v.uid != 0]
    if bound:
        raise UnsupportedError(
            f"{stage}: the loop {describe(lp)} uses the let-bound {bound[0].name}; "
            "loops must be at top level (pass the value as an input or compute it inside the loop's init)"
        )


def _path(expr: Expr, lp: Loop) -> list:
    """The nodes from ``expr`` down to ``lp`` (``lp`` excluded)."""
    out, x = [], expr
    while x is not lp:
        out.append(x)
        x = next(c for c in _flat_children(x) if isinstance(c, Expr) and (c is lp or lp in _subterms(c)))
    return out


def _flat_children(x):
    for c in children(x):
        if isinstance(c, tuple):
            yield from c
        else:
            yield c


def lift_loop(expr: Expr, lp: Loop, loops: list, stage: str):
    """Per-element time loops (issue #17): ``gen[j:m] … loop[t:T] (s = init_j)
    body_j …`` is ``gen[j:m] … L[j] …`` with ``L = loop[t:T] (S = gen[j:m]
    init_j) gen[j:m] body_j[s := S[j]]``: one loop whose state is the
    tensor of the elements' states, each step the elements' steps side by
    side (the same operations: the cost is the per-element loops' own).  So
    for every enclosing gen/sum index the loop uses, outermost first.
    Returns the rewritten program, or None when ``lp`` uses no such index;
    refuses (UnsupportedError naming the loop and ``stage``) a pair state, a
    binder extent or a step count that depends on an index, and a loop whose
    lifted init or body would read out of range (a loop under a guard such
    as ``[j >= 1]·loop(…, X[j - 1] …)``)."""
    from . import bounds
    from .errors import BoundsError
    from .ir import Access, Gen, PairT, Sum, TensorT

    idx = free_indices(lp)
    if not idx or any(o.ivar in idx or o.svar in set(free_vars(lp)) for o in loops if o is not lp):
        return None  # top level, or nested in a loop body (refused by _check_top_level)
    path = _path(expr, lp)
    binders = [b for b in path if isinstance(b, (Gen, Sum)) and b.var in idx]
    if {b.var for b in binders} != set(idx):
        return None
    what = f"{stage}: the loop {describe(lp)} sits inside a gen/sum binder (it uses its index " \
           f"{', '.join(repr(b.var) for b in binders)})"
    if lp.extent.index_vars():
        raise UnsupportedError(f"{what} and its number of steps {lp.extent} depends on it; a per-element loop "
                               "is supported when every element runs the same number of steps")
    if any(t for t in walk_types(lp.svar.type) if isinstance(t, PairT)):
        raise UnsupportedError(f"{what} and its state has the pair type {lp.svar.type}; a per-element loop is "
                               "supported with a scalar or tensor state (build one loop over pairs of tensors)")
    st = lp.svar.type
    for b in reversed(binders):
        st = TensorT(b.extent, st)
    fresh = {b.var: IndexVar(b.var.name, fresh_uid()) for b in binders}
    S = Var(lp.svar.name, fresh_uid(), st)
    s_at = S
    for b in binders:
        s_at = Access(s_at, sym_aff(fresh[b.var]))
    ren = {j: sym_aff(k) for j, k in fresh.items()}
    init, body = subst(lp.init, idx=ren), subst(lp.body, vals={lp.svar: s_at}, idx=ren)
    for b in reversed(binders):
        init, body = Gen(fresh[b.var], b.extent, init), Gen(fresh[b.var], b.extent, body)
    new = Loop(lp.extent, init, lp.ivar, S, body, lp.checkpoint)
    at = new
    for b in binders:
        at = Access(at, sym_aff(b.var))
    out = _replace(expr, lp, at)
    type_of(out)
    try:
        after = bounds.check_program(out)
    except BoundsError as exc:
        raise UnsupportedError(f"{what}; run as one loop over all its elements, it would read out of range "
                               f"({exc}); a per-element loop under a guard on its index is not supported") from None
    before = {_sig(c) for c in bounds.check_program(expr)}
    extra = [c for c in after if _sig(c) not in before]
    if extra:
        raise UnsupportedError(f"{what}; run as one loop over all its elements it needs sizes the program does "
                               f"not ({extra[0].node} in range); a per-element loop under a guard on its index "
                               "is not supported")
    return out


def _sig(c) -> tuple:
    return (str(c.index), str(c.extent), getattr(c, "positive", None))


def walk_types(t):
    from .ir import PairT, TensorT

    yield t
    if isinstance(t, PairT):
        yield from walk_types(t.fst)
        yield from walk_types(t.snd)
    elif isinstance(t, TensorT):
        yield from walk_types(t.elem)


def chain(expr: Expr, stage: str = "this stage") -> list:
    """The splits of a program's loops in execution order: ``split(expr)``,
    then ``split`` of its ``post`` while that holds a loop."""
    out = [split(expr, stage)]
    while has_loop(out[-1].post):
        out.append(split(out[-1].post, stage))
    return out


def row_inputs(body: Expr, t: IndexVar, taken: set):
    """Per-step rows (cheap gradients through ``forcing[t, i]``): an input
    ``f`` whose every access in ``body`` has a leading index ``±t + c``
    (``c`` made of sizes and a constant: ``f[t]``, ``f[t + 1]``,
    ``f[T - 1 - t]``) is replaced by one input per such index, of ``f``'s
    element type, bound to that row of ``f`` at step ``t`` (:func:`row_at`).
    The body's adjoint then returns an ``[n]`` cotangent per row and step,
    added into that row of the ``[T][n]`` cotangent, instead of a whole
    ``[T][n]`` array per step (which made one gradient cost ``O(T²n)``).
    Inputs read otherwise (``f[i]`` with a bound index, ``f[2t]``) stay
    whole.  Returns ``(body', ((row Var, f, index Aff), …))``."""
    from .ir import Access, TensorT

    taken = set(taken)
    rows = []
    for f in sorted(input_vars(body), key=lambda v: v.name):
        if type(f) is not Var or not isinstance(f.type, TensorT):
            continue  # a sparse tensor keeps its relation guard: stays whole
        idxs = {x.index for x in walk(body) if isinstance(x, Access) and x.arr is f
                and x.index.index_vars() == {t} and x.index.coeff(t) in (1, -1)}
        new, mine = body, []
        for k, idx in enumerate(sorted(idxs, key=lambda a: (a.coeff(t), str(a)))):
            name = _fresh_name(taken, f"loop_row_{f.name}" + (f"_{k}" if k else ""))
            taken.add(name)
            row = Var(name, 0, f.type.elem)
            new = _replace_where(new, lambda x, idx=idx: isinstance(x, Access) and x.arr is f and x.index is idx, row)
            mine.append((row, f, idx))
        if mine and f not in set(input_vars(new)):  # else some access is not a row: f stays whole
            body = new
            rows += mine
    return body, tuple(rows)


def row_at(idx, t_var: IndexVar, t: int, sizes: dict) -> int:
    """The row of a row input (``row_inputs``) at step ``t``."""
    return idx.evaluate({t_var: t, **sizes})


def _replace_where(e: Expr, hit, new: Expr) -> Expr:
    memo: dict = {}

    def go(x):
        if not isinstance(x, Expr):
            return x
        if hit(x):
            return new
        got = memo.get(x)
        if got is None:
            got = memo[x] = rebuild(x, (go_any(c) for c in children(x)))
        return got

    def go_any(c):
        if isinstance(c, tuple):
            return tuple(go_any(y) for y in c)
        return go(c)

    return go(e)


def _invariant(x, state: Var) -> bool:
    """A closed term of the body that does arithmetic and depends neither on
    the state nor on ``t`` (a free index), nor on a let-bound variable."""
    from .ir import Add, Call, Const, Mul, Sum, TensorT, REAL, Rel

    if isinstance(x, (Var, Const)) or free_indices(x):
        return False
    if any(v.uid != 0 or v is state for v in free_vars(x)):
        return False
    t = type_of(x)
    while isinstance(t, TensorT):
        t = t.elem
    if t is not REAL:
        return False  # pairs stay in the body
    work = False
    for y in walk(x):
        if isinstance(y, (Loop, Rel)):
            return False  # relation data and nested loops stay in the body
        work = work or isinstance(y, (Add, Mul, Call, Sum))
    return work


def hoist_invariants(body: Expr, state: Var, taken: set):
    """Loop-invariant code motion (issue #17 item 1): each maximal closed
    term of ``body`` that does arithmetic and depends neither on the state
    nor on ``t`` (``_invariant``; a coefficient ``exp(a)``, a norm
    ``Σ w[i]²``) becomes an input ``loop_inv<k>`` of the body, computed once
    before the loop.  Returns ``(body', ((Var, term), …))``; the terms are
    programs of the loop program's inputs."""
    found: dict = {}
    memo: dict = {}
    taken = set(taken)

    def go(x):
        if not isinstance(x, Expr):
            return x
        got = memo.get(x)
        if got is not None:
            return got
        if _invariant(x, state):
            v = found.get(x)
            if v is None:
                name = _fresh_name(taken, f"loop_inv{len(found)}")
                taken.add(name)
                v = found[x] = Var(name, 0, type_of(x))
            got = v
        else:
            got = rebuild(x, (go_any(c) for c in children(x)))
        memo[x] = got
        return got

    def go_any(c):
        if isinstance(c, tuple):
            return tuple(go_any(y) for y in c)
        return go(c)

    if _invariant(body, state):  # the whole body is invariant: nothing to gain, keep it
        return body, ()
    out = go(body)
    return out, tuple((v, x) for x, v in found.items())


def t_value(t: int) -> int:
    """The value of ``Split.t_size`` at step ``t``: ``t + 1``, never 0 (a
    size of 0 would break the simplifier's and the cost model's ``>= 1``
    assumption: with ``t`` itself as the size, ``[a == t]`` at ``a in [0, 1)``
    was simplified to false and the step-0 cotangent of ``forcing[t]`` lost)."""
    return t + 1


def _replace(e, old, new):
    memo: dict = {}

    def go(x):
        if x is old:
            return new
        if not isinstance(x, Expr) or old not in _subterms(x):
            return x
        got = memo.get(x)
        if got is None:
            got = memo[x] = rebuild(x, (go_any(c) for c in children(x)))
        return got

    def go_any(c):
        if isinstance(c, tuple):
            return tuple(go_any(y) for y in c)
        return go(c) if isinstance(c, Expr) else c

    return go(e)


_LOOP_SUBTERMS = weakref.WeakKeyDictionary()  # x -> the loops strictly below x (this module's memo)


def _subterms(x) -> set:
    got = _LOOP_SUBTERMS.get(x)
    if got is None:  # x itself is not stored: a value referring to its key would keep it alive
        got = _LOOP_SUBTERMS[x] = frozenset(y for y in walk(x) if isinstance(y, Loop) and y is not x)
    return got | {x} if isinstance(x, Loop) else got


def loop_cost_parts(expr: Expr, context=((), None)) -> list:
    """The loop-free parts whose Fig. 6 counts add up to the loop program's:
    ``[(init, ctx), (body, ctx + t in [0, T)), (post, ctx)]`` (the body with
    the state an input, costed at every step ``t``: ``Σ_t $⟦body⟧``); with
    several loops ``post`` holds the next ones, costed the same way (each
    loop symbolically in its own ``T``)."""
    sp = split(expr, "cost")
    B0, P0 = tuple(context[0]), context[1]
    body_t = subst(sp.loop.body, vals={sp.loop.svar: sp.state})
    return [(sp.pre, (B0, P0)), (body_t, (B0 + ((sp.loop.ivar, sp.steps),), P0)), (sp.post, (B0, P0))]


def loop_cost_carrier(expr: Expr) -> Expr:
    """A loop-free term with the loop program's sizes (for the symbolic counts' isl parameters)."""
    from .ir import Gen, Pair

    sp = split(expr, "cost")
    body_t = subst(sp.loop.body, vals={sp.loop.svar: sp.state})
    post = loop_cost_carrier(sp.post) if has_loop(sp.post) else sp.post  # the next loops' (chain)
    return Pair(sp.pre, Pair(Gen(sp.loop.ivar, sp.steps, body_t), post))


def steps_at(sp: Split, sizes: dict) -> int:
    return sp.steps.evaluate(sizes)
