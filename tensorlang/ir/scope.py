"""Scope (paper Section 4, environments): free variables and indices, size
variables, capture-avoiding substitution, canonical naming (alpha-
equivalence) and the traversals passes share.

Facts of a node alone (free variables, free indices, size variables) are
kept in the node's typed slots (``nodes.Node.__slots__``); the relations a
program uses are memoized in this module's own weak table.
"""

from __future__ import annotations

import weakref

from .expressions import _VALUE_SORTS, Const, Expr, Gen, Let, Loop, Sum, Var
from .indices import Aff, And, BoolLit, Cmp, Exists, IndexVar, Or, Pred, Rel, Relation, SizeVar, as_aff, sym_aff
from .nodes import Node, children, fresh_uid, rebuild
from .types_base import Type

# --------------------------------------------------------------------------
# Free variables and substitution


def free_vars(n: Node) -> frozenset:
    """Free value variables (``Var``) of an expression or predicate."""
    fv = getattr(n, "_fv", None)  # (cheaper than catching the unset slot's AttributeError)
    if fv is not None:
        return fv
    if True:
        match n:
            case Var():
                fv = frozenset((n,))
            case Let(var=v, value=e0, body=e1):
                fv = free_vars(e0) | (free_vars(e1) - {v})
            case Loop(init=e0, svar=v, body=e1):
                fv = free_vars(e0) | (free_vars(e1) - {v})
            case _:
                # Call keeps its arguments in a tuple field: descend into tuples too
                parts = []
                if isinstance(n, (Expr, Pred)):
                    for c in children(n):
                        if isinstance(c, (Expr, Pred)):
                            parts.append(free_vars(c))
                        elif isinstance(c, tuple):
                            parts.extend(free_vars(x) for x in c if isinstance(x, (Expr, Pred)))
                fv = _union(parts)
        object.__setattr__(n, "_fv", fv)
    return fv


def free_indices(n: Node) -> frozenset:
    """Free index variables of an expression, predicate, affine index or type."""
    fi = getattr(n, "_fi", None)  # (cheaper than catching the unset slot's AttributeError)
    if fi is not None:
        return fi
    if True:
        match n:
            case IndexVar():
                fi = frozenset((n,))
            case SizeVar() | BoolLit() | Var() | Const() | Relation():
                fi = frozenset()
            case Aff():
                fi = n.index_vars()
            case Gen(var=i, extent=a, body=b) | Sum(var=i, extent=a, body=b) | Exists(var=i, extent=a, body=b):
                fi = (free_indices(b) - {i}) | free_indices(a)
            case Loop(extent=a, init=e0, ivar=i, body=b):
                fi = (free_indices(b) - {i}) | free_indices(a) | free_indices(e0)
            case Type():
                fi = frozenset()
            case _:
                parts = []
                for c in children(n):
                    if isinstance(c, Node):
                        parts.append(free_indices(c))
                    elif isinstance(c, tuple):
                        parts.extend(free_indices(x) for x in c if isinstance(x, Node))
                fi = _union(parts)
        object.__setattr__(n, "_fi", fi)
    return fi


def size_vars(n: Node) -> frozenset:
    """Size variables occurring anywhere in a node (including variable types)."""
    sv = getattr(n, "_sv", None)  # (cheaper than catching the unset slot's AttributeError)
    if sv is not None:
        return sv
    if True:
        match n:
            case SizeVar():
                sv = frozenset((n,))
            case Aff():
                sv = n.size_vars()
            case Var(type=t):
                sv = size_vars(t)
            case _:
                parts = []
                for c in children(n):
                    if isinstance(c, Node):
                        parts.append(size_vars(c))
                    elif isinstance(c, tuple):
                        for x in c:
                            if isinstance(x, Node):
                                parts.append(size_vars(x))
                            elif isinstance(x, tuple):
                                parts.extend(size_vars(y) for y in x if isinstance(y, Node))
                sv = _union(parts)
        object.__setattr__(n, "_sv", sv)
    return sv


_EMPTY: frozenset = frozenset()
_NONE: dict = {}  # an empty substitution (never written: _subst copies before it changes one)


def _union(parts: list) -> frozenset:
    """The union of the children's sets; a lone child's set itself (no copy:
    most nodes have one or two children, and every new node asks)."""
    if not parts:
        return _EMPTY
    if len(parts) == 1:
        return parts[0]
    a, *rest = parts
    return a.union(*rest)


def subst(n: Node, vals: dict | None = None, idx: dict | None = None) -> Node:
    """Capture-avoiding substitution ``[x -> v]e`` (Section 4, environments).

    ``vals`` maps ``Var`` to ``Expr``; ``idx`` maps ``IndexVar`` to ``Aff``
    (or int).  Binders whose variable would capture a free variable of a
    substituted term are renamed first.
    """
    vals = {k: v for k, v in vals.items() if k is not v} if vals else _NONE
    if idx:
        idx = {k: as_aff(v) for k, v in idx.items()}
        idx = {k: v for k, v in idx.items() if v is not sym_aff(k)}
    else:
        idx = _NONE
    if not vals and not idx:
        return n
    if not vals and type(n) in _FLAT:
        got = subst_flat(n, idx)
        if got is not None:
            return got
    captured_i = frozenset().union(*(free_indices(v) for v in vals.values()), *(a.index_vars() for a in idx.values()))
    captured_v = frozenset().union(*(free_vars(v) for v in vals.values())) if vals else _EMPTY
    memo: dict = {}
    return _subst(n, vals, idx, captured_i, captured_v, memo)


def subst_flat(p, idx):
    """``subst(p, idx=idx)`` of a binder-free predicate (comparisons under
    ``∧``/``∨``; nothing to capture), without the set-up of the general walk:
    the derivative rules and the simplifier rename filters per term (issue
    #14 item 6).  None when ``p`` has a binder or a relation."""
    t = type(p)
    if t is Cmp:
        a, b = p.lhs.subst(idx), p.rhs.subst(idx)
        return p if a is p.lhs and b is p.rhs else Cmp(p.op, a, b)
    if t is And or t is Or:
        a = subst_flat(p.lhs, idx)
        if a is None:
            return None
        b = subst_flat(p.rhs, idx)
        if b is None:
            return None
        return p if a is p.lhs and b is p.rhs else t(a, b)
    if t is BoolLit:
        return p
    if t is Aff:
        return p.subst(idx)
    return None


def _subst(n, vals, idx, cap_i, cap_v, memo):
    if not isinstance(n, Node):
        if isinstance(n, tuple):
            return tuple(_subst(x, vals, idx, cap_i, cap_v, memo) for x in n)
        return n
    # Nothing to do below a node none of whose free symbols are substituted
    # (each test only when something of its kind is substituted).
    if isinstance(n, _VALUE_SORTS):
        if (not vals or free_vars(n).isdisjoint(vals)) and (not idx or free_indices(n).isdisjoint(idx)):
            return n
    elif isinstance(n, Aff):
        if not idx or n.index_vars().isdisjoint(idx):
            return n
    got = memo.get(n)
    if got is not None:
        return got
    if _BINDS.get(type(n)) is False:
        # most nodes bind nothing: their children substituted, without the
        # class tests of the match below (issue #14 item 6)
        # (a child the substitution leaves alone is kept without a call:
        # the same tests as at the top of this function, issue #14 item 6)
        cs = []
        for c in n._children(n):
            if isinstance(c, _VALUE_SORTS):
                if (not vals or free_vars(c).isdisjoint(vals)) and (not idx or free_indices(c).isdisjoint(idx)):
                    cs.append(c)
                    continue
            elif isinstance(c, Aff):
                if not idx or c.index_vars().isdisjoint(idx):
                    cs.append(c)
                    continue
            elif not isinstance(c, (Node, tuple)):
                cs.append(c)
                continue
            cs.append(_subst(c, vals, idx, cap_i, cap_v, memo))
        out = rebuild(n, cs)
        memo[n] = out
        return out
    match n:
        case Var():
            out = vals.get(n, n)
        case Aff():
            out = n.subst(idx)
        case Gen(var=i, extent=a, body=b) | Sum(var=i, extent=a, body=b) | Exists(var=i, extent=a, body=b):
            a2 = _subst(a, vals, idx, cap_i, cap_v, memo)
            inner_idx, inner_memo = idx, memo
            if i in idx:  # shadowed
                inner_idx, inner_memo = {k: v for k, v in idx.items() if k is not i}, {}
            if i in cap_i:  # would capture: rename the binder
                j = IndexVar(i.name, fresh_uid())
                inner_idx, inner_memo = {**inner_idx, i: sym_aff(j)}, {}
                i = j
            out = type(n)(i, a2, _subst(b, vals, inner_idx, cap_i, cap_v, inner_memo))
        case Let(var=v, value=e0, body=e1):
            e0b = _subst(e0, vals, idx, cap_i, cap_v, memo)
            inner_vals = {k: x for k, x in vals.items() if k is not v}
            if v in cap_v:
                w = Var(v.name, fresh_uid(), v.type)
                inner_vals[v] = w
                v = w
            e1b = _subst(e1, inner_vals, idx, cap_i, cap_v, {})
            out = Let(v, e0b, e1b)
        case Loop(extent=a, init=e0, ivar=i, svar=v, body=b, checkpoint=ck):
            a2, e0b = _subst(a, vals, idx, cap_i, cap_v, memo), _subst(e0, vals, idx, cap_i, cap_v, memo)
            inner_vals = {k: x for k, x in vals.items() if k is not v}
            inner_idx = {k: x for k, x in idx.items() if k is not i}
            if v in cap_v:  # rename the state variable, as Let does
                w = Var(v.name, fresh_uid(), v.type)
                inner_vals[v] = w
                v = w
            if i in cap_i:  # rename the step index, as Gen does
                j = IndexVar(i.name, fresh_uid())
                inner_idx[i] = sym_aff(j)
                i = j
            out = Loop(a2, e0b, i, v, _subst(b, inner_vals, inner_idx, cap_i, cap_v, {}), ck)
        case _:
            _BINDS[type(n)] = False  # none of the cases above: a plain node, every time
            out = rebuild(n, (_subst(c, vals, idx, cap_i, cap_v, memo) for c in children(n)))
    memo[n] = out
    return out


_FLAT = frozenset((Cmp, And, Or, BoolLit, Aff))  # the kinds subst_flat starts on
_BINDS: dict = {}  # node class -> False when _subst treats it as a plain node


# --------------------------------------------------------------------------
# Canonical naming and alpha-equivalence


def canon_index(level: int, name: str | None = None) -> IndexVar:
    """The canonical index variable for binder depth ``level`` (uid < 0)."""
    if name is None:
        name = _IDX_NAMES[level % len(_IDX_NAMES)] + ("" if level < len(_IDX_NAMES) else str(level))
    return IndexVar(name, -(level + 1))


def canonicalize(n: Node) -> Node:
    """Rename every bound index variable to :func:`canon_index` of its binder
    depth and every let-bound variable to a depth-numbered name, so
    alpha-equivalent terms become one interned object (de Bruijn levels)."""
    return _Canon().go(n, {}, {}, 0, 0)


class _Canon:
    """One canonicalization.  A term shared in the DAG is renamed once per
    binder context: siblings under one binder share the renaming dicts, so
    the memo key is the node with the identity of those dicts and the two
    levels (without it, ``e = a + a`` repeated K times took 2^K visits: a
    Python loop reusing an intermediate builds exactly that)."""

    def __init__(self):
        self.memo: dict = {}
        self.keep: list = []  # the renaming dicts whose ids are in memo keys stay alive

    def go(self, n, imap, vmap, ilevel, vlevel):
        kind = _CANON_KIND.get(type(n))
        if kind is None:
            kind = _canon_kind(type(n))
        if kind != _INNER:
            if kind == _VAR:
                return vmap.get(n, n)
            if kind == _IDX:
                return imap.get(n, n)
            if kind == _OTHER and isinstance(n, tuple):
                return tuple(self.go(x, imap, vmap, ilevel, vlevel) for x in n)
            return n
        key = (n, id(imap), id(vmap), ilevel, vlevel)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._node(n, imap, vmap, ilevel, vlevel)
        return got

    def _node(self, n, imap, vmap, ilevel, vlevel):
        go = self.go
        match n:
            case Aff():
                return n.subst({k: sym_aff(v) for k, v in imap.items() if k in n.index_vars()}) if imap else n
            case Gen(var=i, extent=a, body=b) | Sum(var=i, extent=a, body=b) | Exists(var=i, extent=a, body=b):
                j = canon_index(ilevel, "e" + str(ilevel) if isinstance(n, Exists) else None)
                inner = {**imap, i: j}
                self.keep.append(inner)
                return type(n)(j, go(a, imap, vmap, ilevel, vlevel), go(b, inner, vmap, ilevel + 1, vlevel))
            case Let(var=v, value=e0, body=e1):
                w = Var(f"x{vlevel}", -(vlevel + 1), go(v.type, imap, vmap, ilevel, vlevel))
                inner = {**vmap, v: w}
                self.keep.append(inner)
                return Let(w, go(e0, imap, vmap, ilevel, vlevel), go(e1, imap, inner, ilevel, vlevel + 1))
            case Loop(extent=a, init=e0, ivar=i, svar=v, body=b, checkpoint=ck):
                j = canon_index(ilevel)
                w = Var(f"x{vlevel}", -(vlevel + 1), go(v.type, imap, vmap, ilevel, vlevel))
                inner_i, inner_v = {**imap, i: j}, {**vmap, v: w}
                self.keep += [inner_i, inner_v]
                body = go(b, inner_i, inner_v, ilevel + 1, vlevel + 1)
                return Loop(go(a, imap, vmap, ilevel, vlevel), go(e0, imap, vmap, ilevel, vlevel), j, w, body, ck)
            case _:
                return rebuild(n, (go(c, imap, vmap, ilevel, vlevel) for c in children(n)))


_IDX_NAMES = "ijklmnopqrstuvwxyz"

# _Canon.go's case per node class (the class tests of a match, once per class)
_OTHER, _VAR, _IDX, _LEAF, _INNER = range(5)
_CANON_KIND: dict = {}


def _canon_kind(cls) -> int:
    if not issubclass(cls, Node):
        kind = _OTHER
    elif issubclass(cls, Var):
        kind = _VAR
    elif issubclass(cls, IndexVar):
        kind = _IDX
    elif issubclass(cls, (SizeVar, BoolLit, Const, Relation, Type)):
        kind = _LEAF
    else:
        kind = _INNER
    _CANON_KIND[cls] = kind
    return kind


def alpha_eq(a: Node, b: Node) -> bool:
    """Alpha-equivalence: equal up to the names of bound variables."""
    return canonicalize(a) is canonicalize(b)


def walk(n: Node):
    """All distinct sub-nodes (Expr, Pred, Aff) of ``n``, parents before children."""
    seen = set()
    stack = [n]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        for c in reversed(children(x)):
            if isinstance(c, (Expr, Pred, Aff)):
                stack.append(c)
            elif isinstance(c, tuple):
                stack.extend(y for y in reversed(c) if isinstance(y, (Expr, Pred, Aff)))


def input_vars(e: Expr) -> list:
    """Free variables of a program, sorted by name (its inputs)."""
    return sorted(free_vars(e), key=lambda v: (v.name, v.uid))


def relations_of(n: Node) -> list:
    """Relations used in ``n``, sorted by name (memoized: every call of a
    compiled program asks)."""
    got = _RELATIONS.get(n)
    if got is None:
        rels = {x.rel for x in walk(n) if isinstance(x, Rel)}
        got = _RELATIONS[n] = tuple(sorted(rels, key=lambda r: r.name))
    return list(got)


_RELATIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


