"""One traversal and one rewrite driver for the rule passes (paper Sections 5
and 6; issue 14 item 2).

A rule of the paper is a registered function (:mod:`.rules`) that returns
its right-hand side or ``None``.  A pass lists its rules in a
:class:`RuleTable`: ``(pattern, fn)`` entries grouped by figure, where the
pattern is a node kind (a class, matched along the MRO) and an optional
predicate.  The table is the only place that says which rule is tried on
which node, so the same table serves the pass, ``proofs/`` (which rule
numbers a pass applies) and the exhaustiveness checks of the derivative
tables.

:func:`bottom_up` is the one children-first traversal: it maps a function
over the value operands of a node (never over a binder's variable: the
``x`` of ``let x = ...`` is a name, not a term), rebuilds it with
:func:`tensorlang.ir.rebuild` (which returns the node itself when nothing
changed) and hands the rebuilt node to the pass's ``post`` step.  Memo:
one dict per run, keyed by node identity (nodes are interned, so ``a is b``
is equality; a term's rewrite here never depends on its context, and
interned binders are alpha-specific objects, so a memo hit under another
binder is the same term with the same free variables).  Passes whose
output is a fixed point mark it (``memo[out] = out``), so re-running the
pass on its own output is free.

:class:`ResultCache` keeps a pass's result per input program for as long as
the input lives (a weak key): normalizing one program twice gives one
object, as the downstream caches keyed by program identity expect, and
nothing is stored on the nodes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields
from typing import Callable

from tensorlang.errors import TensorLangError, UnsupportedError, describe
from tensorlang.ir import (
    Access,
    Add,
    Call,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Loop,
    Mul,
    Pair,
    Proj,
    Sum,
    Var,
)

from . import rules as _rules
from .rules import RULES

# The value constructors of Figure 3 (Loop is issue 17's, handled by its own stages).
VALUE_KINDS = (Var, Const, Add, Mul, Call, Pair, Proj, Gen, Sum, Access, Iverson, Let)

# Fields that bind a value variable: a traversal maps terms, never binders.
# (Index binders are IndexVar fields, not Exprs, so they are never mapped.)
_BINDER_FIELDS = {Let: ("var",), Loop: ("svar",)}

_OPERANDS: dict = {}  # class -> positions of its value operands (Expr or tuple-of-Expr fields)


def _operand_positions(cls) -> tuple:
    got = _OPERANDS.get(cls)
    if got is None:
        bound = set()
        for k in cls.__mro__:
            bound.update(_BINDER_FIELDS.get(k, ()))
        # the declared sort of each field: only value operands are mapped
        # (``Var.type`` is a Type, ``Const.value`` a number, ``Gen.extent`` an Aff)
        sorts = {f.name: f.type for f in fields(cls)}
        got = tuple(k for k, f in enumerate(cls._field_names)
                    if f not in bound and sorts.get(f) in ("Expr", "tuple", Expr, tuple))
        _OPERANDS[cls] = got
    return got


def map_operands(e: Expr, fn: Callable) -> Expr:
    """``e`` with ``fn`` applied to each value operand (tuples of operands
    elementwise); indices, predicates, types, names and binders unchanged.
    ``e`` itself when every operand maps to itself (``rebuild``'s identity)."""
    pos = _OPERANDS.get(type(e))
    if pos is None:
        pos = _operand_positions(type(e))
    if not pos:
        return e
    cs = e._children(e)
    new = None
    for k in pos:
        c = cs[k]
        if type(c) is tuple:
            d = tuple(fn(x) if isinstance(x, Expr) else x for x in c)
            if all(a is b for a, b in zip(c, d)):
                continue
        else:
            d = fn(c)
            if d is c:
                continue
        if new is None:
            new = list(cs)
        new[k] = d
    return e if new is None else type(e)(*new)


def kind_lookup(table: dict, cls):
    """``table[k]`` for the first class ``k`` of ``cls``'s MRO in ``table`` (None if none)."""
    for k in cls.__mro__:
        got = table.get(k)
        if got is not None:
            return got
    return None


# --------------------------------------------------------------------------
# The traversal


def bottom_up(post: Callable, *, what: str, accept: tuple = VALUE_KINDS, special: dict | None = None,
              fixed_points: bool = True) -> Callable:
    """A children-first, memoized map for one run of a pass.

    ``go(e)``: a kind in ``special`` is handled by ``special[kind](go, e)``
    (a let-block handled iteratively, a form the pass refuses); any other
    kind in ``accept`` becomes ``post(map_operands(e, go))``; anything else
    is refused with an UnsupportedError naming the pass (``what``) and the
    sub-expression.  With ``fixed_points`` the result is also recorded as
    its own image (the pass is idempotent on its outputs)."""
    memo: dict = {}
    special = special or {}
    handlers: dict = {}  # class -> handler (or None: generic), resolved once per class

    def handler(cls):
        try:
            return handlers[cls]
        except KeyError:
            h = kind_lookup(special, cls)
            if h is None and not issubclass(cls, accept):
                h = _refuse
            handlers[cls] = h
            return h

    def _refuse(go, e):
        raise UnsupportedError(f"{what}: not a value expression: {describe(e)}")

    def go(e):
        got = memo.get(e)
        if got is not None:
            return got
        h = handler(type(e))
        out = post(map_operands(e, go)) if h is None else h(go, e)
        memo[e] = out
        if fixed_points:
            memo[out] = out
        return out

    go.memo = memo
    return go


# --------------------------------------------------------------------------
# Rule tables


@dataclass(frozen=True)
class Entry:
    """One ``(pattern, fn)`` entry: ``fn`` is tried on nodes of ``kind``
    (a class or a tuple of classes) for which ``where`` (if given) holds."""

    kind: type | tuple
    fn: Callable
    where: Callable | None = None
    repeat: bool = False  # apply until it no longer matches (6.27 walks a projection chain)
    again: bool = False  # the pass normalizes the result again (it exposes new redexes)

    @property
    def number(self) -> str | None:
        return getattr(self.fn, "rule_number", None)


class RuleTable:
    """``(pattern, fn)`` entries grouped by figure, indexed by node kind.

    Every entry's ``fn`` must be a registered rule of one of the table's
    figures (its registration carries the paper number and equation), so a
    table cannot apply an unnumbered rewrite.  Entries of one kind are
    tried in the order given; the first that returns a node wins.
    ``extra``: arguments after the node (the derivative's ``σ`` and
    recursion)."""

    def __init__(self, name: str, groups: dict, *, registered: bool = True):
        self.name = name
        self.entries: tuple = tuple(e for es in groups.values() for e in es)
        self.figures = tuple(groups)
        by_kind: dict = {}
        for figure, es in groups.items():
            for e in es:
                if registered:
                    n = e.number
                    r = RULES.get(n) if n else None
                    if r is None or r.fn is not e.fn:
                        raise ValueError(f"{name}: entry {getattr(e.fn, '__name__', e.fn)} is not a registered rule")
                    if r.figure != figure:
                        raise ValueError(f"{name}: rule {n} is of figure {r.figure}, listed under {figure}")
                for k in e.kind if isinstance(e.kind, tuple) else (e.kind,):
                    by_kind.setdefault(k, []).append(e)
        self.by_kind = {k: tuple(v) for k, v in by_kind.items()}
        self._resolved: dict = {}  # class -> ((entry, raw fn), ...)
        self._kinds: dict = {}  # class -> entries

    def for_kind(self, cls) -> tuple:
        """The entries that apply to nodes of class ``cls`` (its MRO's, base classes' first)."""
        got = self._kinds.get(cls)
        if got is None:
            got = ()
            for k in reversed(cls.__mro__):
                got = got + self.by_kind.get(k, ())
            self._kinds[cls] = got
        return got

    def _candidates(self, cls) -> tuple:
        got = tuple((e, getattr(e.fn, "__wrapped__", e.fn)) for e in self.for_kind(cls))
        self._resolved[cls] = got
        return got

    def kinds(self) -> set:
        return set(self.by_kind)

    def numbers(self) -> list:
        return [e.number for e in self.entries]

    def rewrite(self, node, *extra):
        """The first entry's result on ``node`` (None: no rule matches)."""
        hit = self.rewrite_entry(node, *extra)
        return None if hit is None else hit[1]

    def rewrite_entry(self, node, *extra):
        """``(entry, result)`` of the first entry that rewrites ``node``, or None.

        Calls each rule's own function (``__wrapped__``) and records a hit in
        an active ``rules.trace()`` as the registered wrapper would: one
        Python call less per attempt on the passes' hot path."""
        cands = self._resolved.get(type(node))
        if cands is None:
            cands = self._candidates(type(node))
        for e, raw in cands:
            if e.where is not None and not e.where(node, *extra):
                continue
            out = raw(node, *extra)
            if out is not None:
                if _rules._TRACE is not None:
                    _rules._TRACE.append((e.number, node, out))
                return e, out
        return None

    def entry(self, key, *extra) -> Entry:
        """The first entry whose pattern matches ``key`` (a node, or a view
        such as a tensor-SSA statement kind); a kind with no entry, or none
        whose predicate holds, is an UnsupportedError naming it."""
        es = self.for_kind(type(key))
        if not es:
            raise UnsupportedError(f"{self.name}: no rule for the kind {type(key).__name__}: {_brief(key)}")
        for e in es:
            if e.where is None or e.where(key, *extra):
                return e
        raise UnsupportedError(f"{self.name}: no rule of {type(key).__name__} matches {_brief(key)}")

    def missing(self, kinds) -> list:
        """The kinds among ``kinds`` that have no entry (an exhaustive table has none)."""
        return [k for k in kinds if not self.for_kind(k)]

    def dispatch(self, node, *extra):
        """Like :meth:`rewrite`, for a table that must cover every kind it is
        given (the derivative tables): a kind without a matching entry is a
        TensorLangError naming it, never a silent pass-through."""
        es = self.for_kind(type(node))
        if not es:
            raise UnsupportedError(f"{self.name}: no rule for the kind {type(node).__name__}: {_brief(node)}")
        out = self.rewrite(node, *extra)
        if out is None:
            raise TensorLangError(f"{self.name}: no rule of {type(node).__name__} matches {_brief(node)}")
        return out


def _brief(x) -> str:
    return describe(x) if isinstance(x, Expr) else repr(x)[:200]


def fixpoint(table: RuleTable, again: Callable) -> Callable:
    """The ``post`` step of a normalizing pass: apply the table at the root;
    a result is normalized again by ``again`` (the traversal, so its
    untouched children are memo hits); no match leaves the node."""

    def post(node):
        res = table.rewrite(node)
        return node if res is None else again(res)

    return post


# --------------------------------------------------------------------------
# A pass's result per input program


class ResultCache:
    """``input -> output`` of one pass for as long as the input lives.

    Weak keys: the entry goes with the input.  An output that is its input
    is stored as a marker (a strong self-reference would keep the key
    alive forever); the output is recorded as its own image."""

    _SAME = object()

    def __init__(self):
        self._d = weakref.WeakKeyDictionary()

    def get(self, e):
        got = self._d.get(e)
        if got is self._SAME:
            return e
        return got

    def put(self, e, out) -> None:
        self._d[e] = self._SAME if out is e else out
        if out is not e:
            self._d[out] = self._SAME


__all__ = [
    "VALUE_KINDS",
    "Entry",
    "ResultCache",
    "RuleTable",
    "bottom_up",
    "fixpoint",
    "kind_lookup",
    "map_operands",
]
