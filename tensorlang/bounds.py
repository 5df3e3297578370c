"""Bounds: every access is proven in range before anything runs.

The paper leaves an out-of-range access undefined (rule 4.11, Fig. 4), and
its derivatives assume none happens: the total and adjoint derivatives
(Section 6) substitute accesses away, so a derived program can silently
compute a value where the source program had none.  This module closes
that gap before any entry point runs a program.

For every access ``a[idx]`` (``a`` of type ``[A]T``) we take its *context*:
the enclosing ``gen``/``sum`` binders ``0 <= i < n`` and the Iverson guards
around it (rule 4.12: a guarded term is only read where its guard holds).
Sizes are parameters, ``>= 0``.  Then:

* ``idx`` mentions bound indices: isl must prove ``0 <= idx < A`` on the
  context for every size.  If it cannot, :func:`check_program` raises
  :class:`~tensorlang.errors.BoundsError` naming the access and the Iverson
  guard that would make it legal.
* ``idx`` depends on sizes only (``x[2]``, ``y[n]``): its validity is a
  property of the sizes, so it becomes a *call-time size constraint*;
  :func:`check_sizes` refuses sizes that break one with an InputError.  One
  that no size satisfies is refused at once.

Relations are data: ``R(a0, ...)`` in a guard is read as the affine facts
it implies, ``0 <= a_k < extent_k`` (a tuple outside the extents is not in
the relation), which over-approximates the guard and so keeps the proof
sound.

``check_program`` is memoized per program in a module-level weak table (not
in the node).  ``inherit(derived, source)`` records that a derived program
carries its source's size constraints (a derivative may have substituted
the constant access away, but its sizes are still the source's).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from functools import lru_cache

from .isl_bridge import isl

from . import isl_bridge
from .errors import BoundsError, InputError, TensorLangError, UnsupportedError, describe
from .ir import (
    TRUE,
    Access,
    Aff,
    And,
    BoolLit,
    Cmp,
    Exists,
    Expr,
    Gen,
    IndexVar,
    Iverson,
    Loop,
    Or,
    PairT,
    Pred,
    Rel,
    Sum,
    TensorT,
    canonicalize,
    children,
    conj,
    free_indices,
    input_vars,
    size_vars,
)
from .printer import pretty_aff
from .typecheck import type_of


@dataclass(frozen=True, eq=False)
class SizeConstraint:
    """An access ``what`` = ``arr[index]`` (extent ``extent``), reached on the
    context ``binders``/``guard``, that is in range only at some sizes.

    ``positive``: isl proved it in range whenever every size is >= 1, so it
    needs a look only at sizes with a zero (the convention of the cost model
    and the kernels; an input ``[m + n - 1]`` at ``m = 0`` is the case)."""

    node: Access
    index: Aff
    extent: Aff
    binders: tuple
    guard: Pred
    positive: bool

    @property
    def what(self) -> str:
        """The access as printed (only on the error path: printing costs)."""
        return describe(self.node)

    @property
    def key(self) -> tuple:
        """Identity of the constraint (its parts are interned nodes; ``==`` on
        affine indices builds predicates, so compare by identity)."""
        return (id(self.node), id(self.index), id(self.extent), tuple(id(x) for b in self.binders for x in b), id(self.guard))

    def size_names(self) -> set:
        names = {s.name for s in size_vars(self.index) | size_vars(self.extent) | size_vars(self.guard)}
        return names | {s.name for _, n in self.binders for s in n.size_vars()}

    def violated(self, sizes: dict) -> str | None:
        """A message if the access is out of range at ``sizes`` (name -> int)."""
        if not self.index.index_vars() and all(s.name in sizes for s in self.index.size_vars() | self.extent.size_vars()):
            if 0 <= self.index.evaluate(sizes) < self.extent.evaluate(sizes):
                return None  # the common case, decided without isl
        names = self.size_names()
        missing = sorted(k for k in names if k not in sizes)
        if missing:
            raise InputError(f"size(s) {missing} have no value, needed to check the access {self.what}")
        if self.positive and all(sizes[k] >= 1 for k in names):
            return None
        shown = ", ".join(f"{k} = {sizes[k]}" for k in sorted(names))
        if not self.index.index_vars():
            k = self.index.evaluate(sizes)
            n = self.extent.evaluate(sizes)
            if 0 <= k < n or not _reachable(self.binders, self.guard, self.index, self.extent, sizes):
                return None  # in range, or never evaluated at these sizes
            at = "" if self.index.is_const else f" = {k}"
            return f"the access {self.what} reads index {self.index}{at}, outside [0, {self.extent}) = [0, {n}) at {shown}"
        oob = Or(Cmp("<", self.index, Aff((), 0)), Cmp("<=", self.extent, self.index))
        if not _reachable(self.binders, conj(self.guard, oob), self.index, self.extent, sizes):
            return None
        return f"the access {self.what} reads outside [0, {self.extent}) at {shown}"


_MEMO: "weakref.WeakKeyDictionary[Expr, tuple]" = weakref.WeakKeyDictionary()
_INHERITED: "weakref.WeakKeyDictionary[Expr, tuple]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def check_program(expr: Expr) -> tuple:
    """Prove every access of ``expr`` in bounds; return its call-time size
    constraints (a tuple of :class:`SizeConstraint`).

    Raises BoundsError for an access over bound indices that isl cannot
    prove in range, or a size-only access that no sizes make legal."""
    with _LOCK:
        got = _MEMO.get(expr)
    if got is None:
        got = _check(expr)
        with _LOCK:
            _MEMO[expr] = got
    with _LOCK:
        extra = _INHERITED.get(expr, ())
    have = {c.key for c in got}
    return got + tuple(c for c in extra if c.key not in have)


def inherit(derived: Expr, source: Expr) -> None:
    """``derived`` (a derivative of ``source``) runs at the source's sizes
    only when the source's constraints hold there."""
    cons = check_program(source)
    if not cons or derived is source:
        return
    # only what can be checked at the derived program's own sizes (it is run
    # with those; the source's other sizes are checked where it runs as a whole)
    have = {s.name for s in size_vars(derived)}
    cons = tuple(c for c in cons if c.size_names() <= have)
    if not cons:
        return
    with _LOCK:
        old = _INHERITED.get(derived, ())
        have = {c.key for c in old}
        _INHERITED[derived] = old + tuple(c for c in cons if c.key not in have)


def check_sizes(constraints, sizes: dict) -> None:
    """Refuse ``sizes`` (name -> int) that put a constant access out of range."""
    for c in constraints:
        msg = c.violated(sizes)
        if msg is not None:
            raise InputError(f"{msg}; these sizes are outside the program's domain")


# --------------------------------------------------------------------------
# The walk (iterative: programs may be thousands of nodes deep)


def _input_facts(expr: Expr) -> Pred:
    """The program's own size constraints: every input's extents are >= 0
    (an array has a length), e.g. ``m + n - 1 >= 0`` for ``x : [m + n - 1]``."""
    facts = []
    todo = [v.type for v in input_vars(expr)]
    while todo:
        t = todo.pop()
        if isinstance(t, TensorT):
            if not t.extent.is_const:
                facts.append(Cmp("<=", Aff((), 0), t.extent))
            todo.append(t.elem)
        elif isinstance(t, PairT):
            todo.extend((t.fst, t.snd))
    return conj(*dict.fromkeys(facts))


def _check(expr: Expr) -> tuple:
    facts = _input_facts(expr)
    out: list = []
    keys: set = set()
    seen: set = set()
    stack = [(expr, (), ())]
    while stack:
        e, binders, guards = _relevant_context(*stack.pop())
        key = (e, binders, guards)
        if key in seen:
            continue
        seen.add(key)
        match e:
            case Gen(var=i, extent=n, body=b) | Sum(var=i, extent=n, body=b):
                stack.append((b, *_enter(binders, guards, i, n)))
                continue
            case Iverson(pred=p, body=b):
                stack.append((b, binders, guards + (p,)))
                continue
            case Loop(extent=n, init=e0, ivar=i, body=b):  # issue #17: t ranges over [0, T)
                stack.append((e0, binders, guards))
                stack.append((b, *_enter(binders, guards, i, n)))
                continue
            case Access(arr=a, index=ix):
                c = _check_access(e, a, ix, binders, guards, facts)
                if c is not None and c.key not in keys:
                    keys.add(c.key)
                    out.append(c)
                stack.append((a, binders, guards))
                continue
        for c in children(e):
            if isinstance(c, Expr):
                stack.append((c, binders, guards))
            elif isinstance(c, tuple):
                stack.extend((x, binders, guards) for x in c if isinstance(x, Expr))
    return tuple(out)


def _enter(binders: tuple, guards: tuple, i, n) -> tuple:
    """``(binders', guards')`` inside a binder ``i < n``.  A binder may shadow
    an enclosing one of the same index (a pass that inlines a let-bound gen
    under a loop over the same canonical index): the enclosing ``i`` and the
    guards about it are then out of scope, and isl must not see two
    dimensions of one name (it would read them as equal)."""
    if any(j == i for j, _ in binders) or any(i in free_indices(g) for g in guards):
        return (tuple(b for b in binders if b[0] != i) + ((i, n),),
                tuple(g for g in guards if i not in free_indices(g)))
    return binders + ((i, n),), guards


def _relevant_context(e: Expr, binders: tuple, guards: tuple):
    """``(e, binders', guards')``: the binders and guards that can constrain
    ``e``'s indices (those over its free index variables, closed under
    guards linking them to other binders: a guard ``j <= i`` keeps ``i``'s
    range), plus, for each group of the others, the size-only fact that it
    can be satisfied: ``e`` is evaluated only if every enclosing loop runs
    and every enclosing guard can hold (an access under an empty sum is
    never made).  That fact is ``∃ i < n. g(i)``, alpha-canonical, so the
    same loop reached along different paths gives the same context: without
    this, a tensor read at several offsets (``u[i-1] + u[i] + u[i+1]``, ``u``
    a gen built the same way K times) was checked once per path, 3^K."""
    if not binders:
        return e, binders, guards
    free = free_indices(e)
    if not guards and all(i in free for i, _ in binders):
        return e, binders, guards
    bound = {i for i, _ in binders}
    gvars = [free_indices(g) & bound for g in guards]
    need = set(free) & bound
    keep = [not gv for gv in gvars]  # guards over sizes only stay
    grew = True
    while grew:
        grew = False
        for k, gv in enumerate(gvars):
            if not keep[k] and gv & need:
                keep[k], grew = True, True
                need |= gv
    if len(need) == len(bound) and all(keep):
        return e, binders, guards
    facts = _reached_facts(tuple(b for b in binders if b[0] not in need),
                           tuple(g for g, k in zip(guards, keep) if not k))
    kept = tuple(g for g, k in zip(guards, keep) if k)
    return (e, tuple(b for b in binders if b[0] in need),
            kept + tuple(f for f in facts if f not in kept))


def _reached_facts(binders: tuple, guards: tuple) -> tuple:
    """One size-only predicate per group of ``binders`` linked by ``guards``:
    the group's loops run and its guards can hold (sorted: one key per set)."""
    groups: list = []  # [vars, binders, guards]
    for i, n in binders:
        groups.append([{i}, [(i, n)], []])
    for g in guards:
        gv = free_indices(g)
        hit = [G for G in groups if G[0] & gv]
        merged = [set().union(*(G[0] for G in hit)), [b for G in hit for b in G[1]], [x for G in hit for x in G[2]] + [g]]
        groups = [G for G in groups if not any(G is H for H in hit)] + [merged]
    out = set()
    for _, bs, gs in groups:
        if not gs and len(bs) == 1:  # a loop alone: it runs when its extent is positive
            out.add(Cmp("<", Aff((), 0), bs[0][1]))
            continue
        p = conj(*gs)
        for i, n in reversed(bs):
            p = Exists(i, n, p)
        out.add(canonicalize(p))
    return tuple(sorted(out, key=id))


def _check_access(node: Access, arr: Expr, ix: Aff, binders: tuple, guards: tuple, facts: Pred):
    t = type_of(arr)
    if not isinstance(t, TensorT):  # pragma: no cover - the type checker refuses it
        raise TensorLangError(f"{describe(node)} indexes a non-tensor")
    ext = t.extent
    if not binders and not guards and ix.is_const and ix.const >= 0 and all(c > 0 for _, c in ext.terms):
        if ext.is_const:
            if ix.const < ext.const:
                return None
        else:
            # x[2] at top level: in range for all large sizes, so a plain call-time
            # constraint (a sum of thousands of such terms needs no isl at all)
            return SizeConstraint(node, ix, ext, (), _relevant(facts, ix, ext), False)
    if _box_proves(ix, ext, binders):
        return None
    guard = conj(*(_affine(g) for g in guards))
    guard = conj(_relevant(facts, ix, ext, guard, *(n for _, n in binders)), guard)
    try:
        low = _is_empty(_bad_text(binders, guard, ix, ext, Cmp("<", ix, Aff((), 0)), 0))
        high = _is_empty(_bad_text(binders, guard, ix, ext, Cmp("<=", ext, ix), 0))
        if low and high:
            return None
        oob = Or(Cmp("<", ix, Aff((), 0)), Cmp("<=", ext, ix))
        positive = _is_empty(_bad_text(binders, guard, ix, ext, oob, 1))
    except UnsupportedError as exc:  # e.g. an index over a variable bound elsewhere
        raise BoundsError(f"cannot check the access {describe(node)} in bounds: {exc}") from None
    what = describe(node)
    if positive:  # in range whenever every size is >= 1: check sizes with a zero at call time
        return SizeConstraint(node, ix, ext, binders, guard, True)
    need = _legal(ix, ext, low, high)
    if ix.index_vars():
        raise BoundsError(
            f"the access {what} may read outside [0, {ext}): isl cannot prove it in bounds "
            f"({need} at every point of its loops, for every size); guard it: tl.iverson({need}, {what})"
        )
    if _never_legal(binders, guard, ix, ext):
        raise BoundsError(
            f"the access {what} is outside [0, {ext}) for every size at which it is evaluated "
            f"(it needs {need})"
        )
    return SizeConstraint(node, ix, ext, binders, guard, False)


def _relevant(facts: Pred, *nodes) -> Pred:
    """The conjuncts of ``facts`` about the sizes ``nodes`` mention."""
    ss = set()
    for x in nodes:
        ss |= size_vars(x)
    out, todo = [], [facts]
    while todo:
        p = todo.pop()
        if isinstance(p, And):
            todo.extend((p.rhs, p.lhs))
        elif p is not TRUE and size_vars(p) <= ss:
            out.append(p)
    return conj(*out)


def _box_proves(ix: Aff, ext: Aff, binders: tuple) -> bool:
    """Cheap interval proof, ignoring guards (sound: guards only shrink the
    context): the smallest and largest values of ``ix`` over the binders'
    box differ from 0 and ``ext - 1`` by non-negative constants."""
    extents = {i: n for i, n in binders}
    lo = hi = Aff((), ix.const)
    for s, c in ix.terms:
        if isinstance(s, IndexVar):
            n = extents.get(s)
            if n is None:
                return False
            if c > 0:
                hi = hi + (n - 1) * c
            else:
                lo = lo + (n - 1) * c
        else:
            lo = lo + Aff(((s, c),), 0)
            hi = hi + Aff(((s, c),), 0)
    upper = ext - 1 - hi
    return lo.is_const and lo.const >= 0 and upper.is_const and upper.const >= 0


def _legal(ix: Aff, ext: Aff, low_ok: bool, high_ok: bool) -> str:
    """The Python predicate that makes ``ix`` legal, e.g. ``i + 1 < n``
    (only the sides that were not proven)."""
    parts = []
    if not low_ok:
        parts.append(f"{pretty_aff(ix)} >= 0")
    if not high_ok:
        parts.append(f"{pretty_aff(ix)} < {pretty_aff(ext)}")
    return " & ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]


def _affine(p: Pred) -> Pred:
    """``p`` with each relation replaced by the range facts it implies."""
    match p:
        case Rel(rel=r, args=args):
            return conj(*(conj(Cmp("<=", Aff((), 0), a), Cmp("<", a, n)) for a, n in zip(args, r.extents)))
        case And(lhs=a, rhs=b):
            return conj(_affine(a), _affine(b))
        case Or(lhs=a, rhs=b):
            return Or(_affine(a), _affine(b))
        case Exists(var=i, extent=n, body=b):
            return Exists(i, n, _affine(b))
        case BoolLit() | Cmp():
            return p
    raise TensorLangError(f"not a predicate: {p!r}")  # pragma: no cover


def _size_floor(low: int, *nodes) -> Pred:
    """Every size occurring in ``nodes`` is at least ``low``."""
    ss = set()
    for x in nodes:
        ss |= size_vars(x)
    return conj(*(Cmp("<=", Aff((), low), Aff(((s, 1),), 0)) for s in sorted(ss, key=lambda s: s.name)))


def _bad_text(binders, guard: Pred, ix: Aff, ext: Aff, oob: Pred, low: int) -> str:
    """isl text of the context points (and sizes >= ``low``) where ``oob`` holds."""
    return _context_text(binders, conj(guard, oob), ix, ext, low)


def _context_text(binders, guard: Pred, ix: Aff, ext: Aff, low: int = 0) -> str:
    extra = [n for _, n in binders]
    pred = conj(guard, _size_floor(low, guard, ix, ext, *extra))
    text, _ = isl_bridge.domain_text(list(binders), pred, sizes_positive=False, extra=(ix, ext))
    return text


@lru_cache(maxsize=65536)
def _is_empty(text: str) -> bool:
    try:
        return isl.Set(text).is_empty()
    except isl.Error as exc:  # pragma: no cover - sizes beyond isl's integers
        raise UnsupportedError(f"isl cannot decide the bounds query ({exc})") from None


def _never_legal(binders, guard: Pred, ix: Aff, ext: Aff) -> bool:
    """Is every size at which the context is reached one where the access is bad?"""
    oob = Or(Cmp("<", ix, Aff((), 0)), Cmp("<=", ext, ix))
    bad = isl.Set(_bad_text(binders, guard, ix, ext, oob, 0)).params()
    reached = isl.Set(_context_text(binders, guard, ix, ext)).params()
    return reached.is_subset(bad) and not reached.is_empty()


def _reachable(binders, guard: Pred, ix: Aff, ext: Aff, sizes: dict) -> bool:
    """Has the context (with ``guard``) a point at these sizes?  Asked only
    on the rare path (a size-only index out of range, or a zero size)."""
    text = _context_text(binders, guard, ix, ext)
    s = isl.Set(text)
    for k in range(s.dim(isl.dim_type.param)):
        name = s.get_dim_name(isl.dim_type.param, k)
        s = s.fix_val(isl.dim_type.param, k, int(sizes[isl_bridge.param_size(name)]))
    return not s.is_empty()


_ = (Pred,)
