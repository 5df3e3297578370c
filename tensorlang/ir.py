"""The IR of the core tensor language (paper Section 4, Figure 3).

Three sorts of node, all small frozen dataclasses interned by a metaclass
(hash-consing: structurally equal terms are one object, so ``a is b`` decides
equality and passes memoize by identity):

* affine indices ``Aff`` (index variables, size variables, integer constants,
  ``+`` and integer scaling, kept as a canonical linear combination);
* predicates ``Pred`` (comparisons, relations, ``and``, ``or``, ``exists``,
  and the literals the paper uses implicitly, see the Note on Fig. 3);
* value expressions ``Expr`` (Fig. 3 ``e``) and types ``Type``.

Types are computed (``tensorlang.typecheck``), except that variables carry
their declared type, as the paper's free variables "must have asserted types".

Generic structure: :func:`children` and :func:`rebuild` satisfy
``rebuild(e, children(e)) is e`` (sympy's ``func(*args) == expr`` invariant),
so traversals need no visitor classes.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
import threading
import weakref
from _weakref import _remove_dead_weakref
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

import numpy as _np

from .errors import IndexError_, TensorLangError

# --------------------------------------------------------------------------
# Interning


class Interned(type):
    """Metaclass: ``Cls(*fields)`` returns the unique node with those fields.

    The table maps ``(cls, *fields)`` to a weak reference to the node.  Fields
    are interned nodes (hashed and compared by identity), ints, strings,
    non-integral floats (``Const`` folds integral ones to ints, so ``1`` and
    ``1.0`` never both occur in one field) and tuples of those, so Python's own
    tuple hash is the structural key: no key-building pass per construction
    (that was a quarter of building a large derivative, issue 14 item 6).
    A key holds its fields strongly; the node holds them anyway, and the key
    goes when the node does (``_drop``).

    A hit is read without the lock (a dict read is atomic); a miss re-checks
    and inserts under one lock, so threads that build the same term at once
    get one object (identity is equality: two copies of ``x`` would make a
    program mixing them refer to two inputs ``x``).
    """

    def __call__(cls, *args, **kwargs):
        if kwargs:
            names = cls._field_names
            args = args + tuple(kwargs.pop(f) for f in names[len(args):])
            if kwargs:
                raise TypeError(f"unexpected fields {sorted(kwargs)} for {cls.__name__}")
        if cls._normalizes:
            args = cls._normalize(*args)
        key = (cls, *args)
        ref = _TABLE.get(key)
        if ref is not None:
            node = ref()
            if node is not None:
                return node
        with _TABLE_LOCK:
            ref = _TABLE.get(key)
            node = ref() if ref is not None else None
            if node is None:
                node = super().__call__(*args)
                _TABLE[key] = _KeyedRef(node, _drop, key)
        return node


_TABLE: dict = {}
_KeyedRef = weakref.KeyedRef
# Not reentrant on purpose: construction under the lock builds no other node
# (``_normalize`` runs before it is taken).  ``_drop`` runs from the garbage
# collector, possibly while this thread holds the lock: it takes none
# (``_remove_dead_weakref`` deletes the entry only if its reference is dead,
# atomically, so a key re-bound to a new node meanwhile stays).
_TABLE_LOCK = threading.Lock()


def _drop(ref, _remove=_remove_dead_weakref, _table=_TABLE):
    _remove(_table, ref.key)


class Node(metaclass=Interned):
    """Base of every interned node.  Equality is identity (see module doc)."""

    # Facts of the node alone, computed once by their owners (typed slots, not
    # string keys): free value variables, free indices, size variables
    # (this module) and the type (typecheck).  Unset until first asked.
    __slots__ = ("_fv", "_fi", "_sv", "_type")
    _field_names: tuple[str, ...] = ()
    _normalizes = False  # does the class override _normalize (set by @node)

    @classmethod
    def _normalize(cls, *args):
        return args

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)

    def __reduce__(self):
        # Unpickling calls the constructor, so a node arriving in another
        # process (tensorlang.dask ships programs to workers) is re-interned
        # there: ``a is b`` keeps deciding equality and caches keyed by the
        # program hit.  Nodes carrying a uid (IndexVar, Var) also move the
        # receiving process's fresh_uid() past it; otherwise a "fresh"
        # variable made there (by a derivative pass) could be the very
        # object a shipped binder binds, and substitution would capture it.
        args = tuple(getattr(self, f) for f in self._field_names)
        if "uid" in self._field_names:
            return (_revive_with_uid, (type(self), args))
        return (type(self), args)


def _revive_with_uid(cls, args):
    n = cls(*args)
    if n.uid > 0:  # inputs (0) and canonical variables (< 0) are not fresh
        first = next(_fresh)
        if first <= n.uid:  # skip the counter past the uid (C speed; only ever moves up)
            next(itertools.islice(_fresh, n.uid - first, n.uid - first), None)
    return n


def node(cls):
    """Decorator: a frozen, slotted, interned dataclass with identity equality.

    Each node has a private ``_meta`` dict for cached facts (type, free
    variables) that are functions of the node alone.
    """
    ns = dict(cls.__dict__)
    ann = dict(ns.get("__annotations__", {}))
    ann["_meta"] = "dict"
    cls.__annotations__ = ann
    cls._meta = field(default=None, init=False, repr=False, compare=False)
    dc = dataclass(frozen=True, eq=False, slots=True, weakref_slot=True, repr=False)(cls)
    dc._field_names = names = tuple(f.name for f in fields(dc) if f.name != "_meta")
    dc._normalizes = dc._normalize.__func__ is not Node._normalize.__func__
    # children(n) in C: attrgetter gives a tuple for two or more names
    if len(names) >= 2:
        dc._children = staticmethod(operator.attrgetter(*names))
    elif names:
        get = operator.attrgetter(names[0])
        dc._children = staticmethod(lambda n: (get(n),))
    else:
        dc._children = staticmethod(lambda n: ())
    return dc


def meta(n: Node) -> dict:
    m = n._meta
    if m is None:
        with _TABLE_LOCK:  # two threads must not each install their own dict
            m = n._meta
            if m is None:
                m = {}
                object.__setattr__(n, "_meta", m)
    return m


def children(n: Node) -> tuple:
    """The node's fields in order (sub-nodes and plain data alike)."""
    return n._children(n)


def rebuild(n: Node, args: Iterable) -> Node:
    """``rebuild(n, children(n)) is n``; otherwise the same constructor on ``args``."""
    args = tuple(args)
    for a, b in zip(args, n._children(n)):
        if a is not b:
            return type(n)(*args)
    return n


_fresh = itertools.count(1)


def fresh_uid() -> int:
    return next(_fresh)


# --------------------------------------------------------------------------
# Affine indices (Fig. 3 ``a``) and size variables


class Sym(Node):
    """Symbols that may occur in affine expressions."""

    __slots__ = ()


@node
class SizeVar(Sym):
    """A size variable ``n``: global by name."""

    name: str

    def __repr__(self):
        return self.name


@node
class IndexVar(Sym):
    """An index variable bound by gen, sum or exists.  ``uid`` makes it unique;
    canonical variables (de Bruijn levels, see :func:`canonicalize`) have
    negative uids."""

    name: str
    uid: int

    def __repr__(self):
        return self.name if self.uid < 0 else f"{self.name}_{self.uid}"


def _sym_key(s: Sym):
    if isinstance(s, SizeVar):
        return (0, s.name, 0)
    return (1, s.name, s.uid)


@node
class Aff(Node):
    """A canonical affine combination ``sum(c * s) + const`` (rules 4.13-4.17).

    ``terms`` is sorted by symbol and has no zero coefficients.  Python
    operators build affine expressions; comparisons build predicates.
    """

    terms: tuple  # tuple[tuple[Sym, int], ...]
    const: int

    @classmethod
    def _normalize(cls, terms, const):
        # fast paths (most affine indices are a constant or one symbol):
        # exact ints, in range, checked inline; anything else takes the
        # general path below, which also reports what is wrong
        if type(const) is int and -INDEX_LIMIT <= const <= INDEX_LIMIT:
            if not terms:
                return ((), const)
            if len(terms) == 1:
                ((s, c),) = terms
                if type(c) is int and -INDEX_LIMIT <= c <= INDEX_LIMIT and isinstance(s, Sym):
                    return (((s, c),) if c else (), const)
        acc: dict = {}
        order = []
        for s, c in terms:
            if not isinstance(c, int) or isinstance(c, bool):
                raise IndexError_(f"affine coefficient must be an integer, got {c!r}")
            _check_index_int(c, "coefficient")
            if s not in acc:
                acc[s] = 0
                order.append(s)
            acc[s] += c
        items = tuple(sorted(((s, acc[s]) for s in order if acc[s] != 0), key=lambda t: _sym_key(t[0])))
        if not isinstance(const, int) or isinstance(const, bool):
            raise IndexError_(f"affine constant must be an integer, got {const!r}")
        _check_index_int(const, "constant")
        for _, c in items:
            _check_index_int(c, "coefficient")
        return (items, const)

    # -- construction ------------------------------------------------------
    def __add__(self, other):
        o = as_aff(other)
        return Aff(self.terms + o.terms, self.const + o.const)

    __radd__ = __add__

    def __neg__(self):
        return Aff(tuple((s, -c) for s, c in self.terms), -self.const)

    def __sub__(self, other):
        return self + (-as_aff(other))

    def __rsub__(self, other):
        return as_aff(other) + (-self)

    def __mul__(self, other):
        if isinstance(other, Aff):
            if other.is_const:
                other = other.const
            elif self.is_const:
                return other * self.const
            else:
                raise IndexError_(
                    f"non-affine index: ({self}) * ({other}); an index may only be scaled by an integer"
                )
        if not isinstance(other, int) or isinstance(other, bool):
            raise IndexError_(f"non-affine index: ({self}) * {other!r}; an index may only be scaled by an integer")
        return Aff(tuple((s, c * other) for s, c in self.terms), self.const * other)

    __rmul__ = __mul__

    # Division, remainder and powers are not affine (rules 4.13-4.17 allow only
    # + and integer scaling): refuse them here with the reason, rather than let
    # Python report a missing operator.
    def _not_affine(self, other, op, reflected=False):
        lhs, rhs = (other, self) if reflected else (self, other)
        raise IndexError_(
            f"non-affine index: ({lhs}) {op} ({rhs}); indices are affine (+, -, and scaling by an integer), "
            f"so {op} is not allowed in an index. For a strided read write the stride into the "
            "extent instead, e.g. tl.gen(n, lambda i: x[2 * i]) over x of extent 2 * n"
        )

    def __floordiv__(self, other):
        self._not_affine(other, "//")

    def __rfloordiv__(self, other):
        self._not_affine(other, "//", True)

    def __truediv__(self, other):
        self._not_affine(other, "/")

    def __rtruediv__(self, other):
        self._not_affine(other, "/", True)

    def __mod__(self, other):
        self._not_affine(other, "%")

    def __rmod__(self, other):
        self._not_affine(other, "%", True)

    def __pow__(self, other):
        self._not_affine(other, "**")

    def __rpow__(self, other):
        self._not_affine(other, "**", True)

    def __divmod__(self, other):
        self._not_affine(other, "divmod")

    # -- predicates (rule 4.18); sugar > >= != --------------------------------
    def __lt__(self, other):
        return Cmp("<", self, as_aff(other))

    def __le__(self, other):
        return Cmp("<=", self, as_aff(other))

    def __gt__(self, other):
        return Cmp("<", as_aff(other), self)

    def __ge__(self, other):
        return Cmp("<=", as_aff(other), self)

    def __eq__(self, other):  # type: ignore[override]
        try:
            o = as_aff(other)
        except TensorLangError:
            return NotImplemented
        return Cmp("==", self, o)

    def __ne__(self, other):  # type: ignore[override]
        o = as_aff(other)
        return Or(Cmp("<", self, o), Cmp("<", o, self))

    __hash__ = Node.__hash__

    # -- queries -----------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def coeff(self, s: Sym) -> int:
        for t, c in self.terms:
            if t is s:
                return c
        return 0

    def syms(self) -> frozenset:
        return frozenset(s for s, _ in self.terms)

    def index_vars(self) -> frozenset:
        return frozenset(s for s, _ in self.terms if isinstance(s, IndexVar))

    def size_vars(self) -> frozenset:
        return frozenset(s for s, _ in self.terms if isinstance(s, SizeVar))

    def evaluate(self, env) -> int:
        """Rules 4.13-4.17: ``env`` maps IndexVar and SizeVar (or size names) to ints."""
        v = self.const
        for s, c in self.terms:
            if s in env:
                x = env[s]
            elif isinstance(s, SizeVar) and s.name in env:
                x = env[s.name]
            else:
                raise TensorLangError(f"unbound symbol {s!r} in index {self}")
            v += c * x
        return v

    def subst(self, mapping) -> "Aff":
        """Replace symbols by affine expressions (``mapping``: Sym -> Aff|int)."""
        if not any(s in mapping for s, _ in self.terms):
            return self
        out = Aff((), self.const)
        for s, c in self.terms:
            out = out + (as_aff(mapping[s]) * c if s in mapping else Aff(((s, c),), 0))
        return out

    def __repr__(self):
        from .printer import pretty_aff

        return pretty_aff(self)

    __str__ = __repr__


INDEX_LIMIT = 2**62  # kernels index in int64: larger coefficients could overflow


def _check_index_int(c: int, what: str) -> None:
    if abs(c) > INDEX_LIMIT:
        raise IndexError_(f"affine {what} {c} is too large: indices are 64-bit integers (|c| <= 2**62)")


def as_aff(x) -> Aff:
    """Coerce an int, symbol or affine expression to :class:`Aff`."""
    if isinstance(x, Aff):
        return x
    if isinstance(x, bool):
        raise IndexError_(f"a boolean is not an index: {x!r}")
    if isinstance(x, int):
        return Aff((), x)
    if isinstance(x, Sym):
        return Aff(((x, 1),), 0)
    if isinstance(x, _np.integer):
        return Aff((), int(x))
    if isinstance(x, Expr):
        from .errors import describe

        raise IndexError_(
            f"non-affine index: {describe(x)} is a value expression; indices must be affine "
            "in index and size variables (no indexing by data)"
        )
    raise IndexError_(f"not an affine index: {x!r} (expected an int, index or size variable)")


def sym_aff(s: Sym) -> Aff:
    return Aff(((s, 1),), 0)


# --------------------------------------------------------------------------
# Predicates (Fig. 3 ``p``, Fig. 5)


class Pred(Node):
    __slots__ = ()

    def __and__(self, other):
        return And(self, as_pred(other))

    def __rand__(self, other):
        return And(as_pred(other), self)

    def __or__(self, other):
        return Or(self, as_pred(other))

    def __ror__(self, other):
        return Or(as_pred(other), self)

    def __bool__(self):
        raise TensorLangError(
            f"the predicate {self} has no Python truth value; use it in tl.iverson(pred, e)"
        )

    def __repr__(self):
        from .printer import pretty_pred

        return pretty_pred(self)

    __str__ = __repr__


def as_pred(p) -> Pred:
    if isinstance(p, Pred):
        return p
    if isinstance(p, bool):
        return TRUE if p else FALSE
    raise TensorLangError(f"expected a predicate, got {p!r}")


def as_expr(x) -> Expr:
    """Coerce a Python/NumPy real to :class:`Const` (an Expr as is); refuse
    booleans, non-finite values, indices and predicates used as values."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, _np.bool_)):
        raise TensorLangError(f"a boolean {x!r} is not a value; use tl.iverson(pred, 1)")
    if isinstance(x, numbers.Real):
        if isinstance(x, numbers.Integral):
            return Const(int(x))  # Const refuses an integer no float64 can hold
        v = float(x)
        if not math.isfinite(v):
            raise TensorLangError(f"constant {v!r} is not finite")
        return Const(v)
    if isinstance(x, (Aff, IndexVar, SizeVar)):
        raise TensorLangError(
            f"index {x} used as a value: indices are not numbers in this language "
            "(use an Iverson bracket, e.g. tl.iverson(i == j, 1))"
        )
    if isinstance(x, Pred):
        raise TensorLangError(f"predicate {x} used as a value: write tl.iverson({x}, 1)")
    raise TensorLangError(f"cannot use {type(x).__name__} {x!r} as a tensorlang expression")


@node
class BoolLit(Pred):
    """``true`` / ``false`` (implicit in the paper, see the Note on Fig. 3)."""

    value: bool


TRUE = BoolLit(True)
FALSE = BoolLit(False)


@node
class Cmp(Pred):
    """``a0 op a1`` with op in ``<``, ``<=``, ``==`` (rule 4.18)."""

    op: str
    lhs: Aff
    rhs: Aff

    @classmethod
    def _normalize(cls, op, lhs, rhs):
        if op not in ("<", "<=", "=="):
            raise TensorLangError(f"unknown comparison {op!r}")
        return (op, as_aff(lhs), as_aff(rhs))


@node
class Relation(Node):
    """A declared relation (data predicate) ``R`` with its extents."""

    name: str
    extents: tuple  # tuple[Aff, ...]

    def __call__(self, *args):
        return Rel(self, tuple(as_aff(a) for a in args))

    def __repr__(self):
        return self.name


@node
class Rel(Pred):
    """``R(a0, ...)`` (rule 4.20)."""

    rel: Relation
    args: tuple  # tuple[Aff, ...]

    @classmethod
    def _normalize(cls, rel, args):
        args = tuple(as_aff(a) for a in args)
        if len(args) != len(rel.extents):
            raise TensorLangError(
                f"relation {rel.name} has arity {len(rel.extents)}, applied to {len(args)} indices"
            )
        return (rel, args)


@node
class And(Pred):
    lhs: Pred
    rhs: Pred


@node
class Or(Pred):
    lhs: Pred
    rhs: Pred


@node
class Exists(Pred):
    """``exists[i:n] p`` (rule 4.21)."""

    var: IndexVar
    extent: Aff
    body: Pred


def conj(*ps: Pred) -> Pred:
    """Conjunction with the literals folded away."""
    out: Pred = TRUE
    for p in ps:
        if p is FALSE or out is FALSE:
            return FALSE
        if p is TRUE:
            continue
        out = p if out is TRUE else And(out, p)
    return out


def disj(*ps: Pred) -> Pred:
    out: Pred = FALSE
    for p in ps:
        if p is TRUE or out is TRUE:
            return TRUE
        if p is FALSE:
            continue
        out = p if out is FALSE else Or(out, p)
    return out


# --------------------------------------------------------------------------
# Types (Fig. 3 ``T``)


class Type(Node):
    __slots__ = ()

    def __repr__(self):
        from .printer import pretty_type

        return pretty_type(self)

    __str__ = __repr__


@node
class RealT(Type):
    pass


REAL = RealT()


@node
class PairT(Type):
    fst: Type
    snd: Type


@node
class TensorT(Type):
    """``[n]T``; ``extent`` is affine in size variables."""

    extent: Aff
    elem: Type

    @classmethod
    def _normalize(cls, extent, elem):
        extent = as_aff(extent)
        if extent.index_vars():
            raise TensorLangError(f"a tensor extent must depend on sizes only, got {extent}")
        return (extent, elem)


def tensor_type(extents, elem: Type = REAL) -> Type:
    t = elem
    for n in reversed(tuple(extents)):
        t = TensorT(as_aff(n), t)
    return t


def shape_of(t: Type) -> tuple:
    """Extents of a (nested) tensor type down to its non-tensor element."""
    out = []
    while isinstance(t, TensorT):
        out.append(t.extent)
        t = t.elem
    return tuple(out)


def scalar_elem(t: Type) -> Type:
    while isinstance(t, TensorT):
        t = t.elem
    return t


# --------------------------------------------------------------------------
# Value expressions (Fig. 3 ``e``)


class Expr(Node):
    """Value expressions.  Operators build IR through ``tensorlang.api``."""

    __slots__ = ()

    def __repr__(self):
        from .printer import pretty

        return pretty(self)

    __str__ = __repr__

    # Operators are defined in api.py (they type-check); installed there.


@node
class Var(Expr):
    """A variable: a free input (``uid == 0``) or a let-bound name."""

    name: str
    uid: int
    type: Type


@node
class SparseVar(Var):
    """An input tensor stored on a relation (``tl.sparse_tensor``, issue 16):
    type ``[n][m]R`` whose values exist only where ``rel`` holds.  Every read
    the API builds is guarded by ``[rel(i, j)]`` (``tensorlang.sparse``), so
    every stage sees an ordinary variable under a relation bracket; the
    field tells the runtime and the backend that the data is compressed."""

    rel: Relation


@node
class Const(Expr):
    value: Any

    @classmethod
    def _normalize(cls, value):
        if isinstance(value, bool):
            raise TensorLangError("booleans are not numbers; use a predicate")
        if not isinstance(value, numbers.Real):
            raise TensorLangError(f"a constant must be a real number, got {type(value).__name__} {value!r}")
        if isinstance(value, numbers.Integral):
            value = int(value)
            if abs(value) >= 2**53:
                # values are float64 (Section 4.3): a larger integer is rounded
                # to the nearest double, or refused if no double is that large
                try:
                    value = float(value)
                except OverflowError:
                    raise TensorLangError(
                        f"the constant {_short_int(value)} does not fit a float64 (|c| < 1.8e308)"
                    ) from None
        elif not isinstance(value, float):
            value = float(value)
        if isinstance(value, float) and value == 0.0:
            value = 0.0  # fold -0.0
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        return (value,)


def _short_int(v: int) -> str:
    """``v`` for a message, without printing (or converting) thousands of digits."""
    if abs(v) < 10**30:
        return str(v)
    return f"{'-' if v < 0 else ''}10**{round((abs(v).bit_length() - 1) * math.log10(2))} (about)"


@node
class Add(Expr):
    lhs: Expr
    rhs: Expr


@node
class Mul(Expr):
    lhs: Expr
    rhs: Expr


@node
class Call(Expr):
    """Black-box scalar function ``f(e0, ...)``; ``fn`` names a registry entry."""

    fn: str
    args: tuple  # tuple[Expr, ...]


@node
class Pair(Expr):
    fst: Expr
    snd: Expr


@node
class Proj(Expr):
    index: int
    arg: Expr


@node
class Gen(Expr):
    var: IndexVar
    extent: Aff
    body: Expr


@node
class Sum(Expr):
    var: IndexVar
    extent: Aff
    body: Expr


@node
class Access(Expr):
    arr: Expr
    index: Aff


@node
class Iverson(Expr):
    pred: Pred
    body: Expr


@node
class Let(Expr):
    var: Var
    value: Expr
    body: Expr


@node
class Loop(Expr):
    """``loop[t:T] (s = init) body``: the state after ``T`` sequential steps
    (issue #17; semantics, typing and stages in ``tensorlang.loops``).

    Binds the index ``ivar`` (``t`` in ``[0, T)``) and the state variable
    ``svar`` in ``body``; ``checkpoint`` is the adjoint's storage policy
    (``"all"``, an int ``k`` or ``("binomial", s)``), part of the identity."""

    extent: Aff
    init: Expr
    ivar: IndexVar
    svar: Var
    body: Expr
    checkpoint: Any


ZERO = Const(0)
ONE = Const(1)
_VALUE_SORTS = (Expr, Pred)

BINDERS = (Gen, Sum, Exists)


# --------------------------------------------------------------------------
# Free variables and substitution


def free_vars(n: Node) -> frozenset:
    """Free value variables (``Var``) of an expression or predicate."""
    try:
        return n._fv
    except AttributeError:
        pass
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
                fv = frozenset().union(*parts)
        object.__setattr__(n, "_fv", fv)
    return fv


def free_indices(n: Node) -> frozenset:
    """Free index variables of an expression, predicate, affine index or type."""
    try:
        return n._fi
    except AttributeError:
        pass
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
                fi = frozenset().union(*parts)
        object.__setattr__(n, "_fi", fi)
    return fi


def size_vars(n: Node) -> frozenset:
    """Size variables occurring anywhere in a node (including variable types)."""
    try:
        return n._sv
    except AttributeError:
        pass
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
                sv = frozenset().union(*parts)
        object.__setattr__(n, "_sv", sv)
    return sv


def subst(n: Node, vals: dict | None = None, idx: dict | None = None) -> Node:
    """Capture-avoiding substitution ``[x -> v]e`` (Section 4, environments).

    ``vals`` maps ``Var`` to ``Expr``; ``idx`` maps ``IndexVar`` to ``Aff``
    (or int).  Binders whose variable would capture a free variable of a
    substituted term are renamed first.
    """
    vals = {k: v for k, v in (vals or {}).items() if k is not v}
    idx = {k: as_aff(v) for k, v in (idx or {}).items()}
    idx = {k: v for k, v in idx.items() if v is not sym_aff(k)}
    if not vals and not idx:
        return n
    captured_i = frozenset().union(*(free_indices(v) for v in vals.values()), *(a.index_vars() for a in idx.values()))
    captured_v = frozenset().union(*(free_vars(v) for v in vals.values()))
    memo: dict = {}
    return _subst(n, vals, idx, captured_i, captured_v, memo)


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
            out = rebuild(n, (_subst(c, vals, idx, cap_i, cap_v, memo) for c in children(n)))
    memo[n] = out
    return out


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
    return _canon(n, {}, {}, 0, 0)


def _canon(n, imap, vmap, ilevel, vlevel):
    if not isinstance(n, Node):
        if isinstance(n, tuple):
            return tuple(_canon(x, imap, vmap, ilevel, vlevel) for x in n)
        return n
    match n:
        case Var():
            return vmap.get(n, n)
        case IndexVar():
            return imap.get(n, n)
        case Aff():
            return n.subst({k: sym_aff(v) for k, v in imap.items() if k in n.index_vars()}) if imap else n
        case Gen(var=i, extent=a, body=b) | Sum(var=i, extent=a, body=b) | Exists(var=i, extent=a, body=b):
            j = canon_index(ilevel, "e" + str(ilevel) if isinstance(n, Exists) else None)
            return type(n)(j, _canon(a, imap, vmap, ilevel, vlevel), _canon(b, {**imap, i: j}, vmap, ilevel + 1, vlevel))
        case Let(var=v, value=e0, body=e1):
            w = Var(f"x{vlevel}", -(vlevel + 1), _canon(v.type, imap, vmap, ilevel, vlevel))
            return Let(w, _canon(e0, imap, vmap, ilevel, vlevel), _canon(e1, imap, {**vmap, v: w}, ilevel, vlevel + 1))
        case Loop(extent=a, init=e0, ivar=i, svar=v, body=b, checkpoint=ck):
            j = canon_index(ilevel)
            w = Var(f"x{vlevel}", -(vlevel + 1), _canon(v.type, imap, vmap, ilevel, vlevel))
            body = _canon(b, {**imap, i: j}, {**vmap, v: w}, ilevel + 1, vlevel + 1)
            return Loop(_canon(a, imap, vmap, ilevel, vlevel), _canon(e0, imap, vmap, ilevel, vlevel), j, w, body, ck)
        case SizeVar() | BoolLit() | Const() | Relation() | Type():
            return n
        case _:
            return rebuild(n, (_canon(c, imap, vmap, ilevel, vlevel) for c in children(n)))


_IDX_NAMES = "ijklmnopqrstuvwxyz"


def alpha_eq(a: Node, b: Node) -> bool:
    """Alpha-equivalence: equal up to the names of bound variables."""
    return canonicalize(a) is canonicalize(b)


# --------------------------------------------------------------------------
# Small helpers shared by passes


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
    """Relations used in ``n``, sorted by name (memoized on the node: every
    call of a compiled program asks)."""
    m = meta(n)
    got = m.get("relations")
    if got is None:
        rels = {x.rel for x in walk(n) if isinstance(x, Rel)}
        got = m["relations"] = tuple(sorted(rels, key=lambda r: r.name))
    return list(got)


def accesses(base: Expr):
    """Split ``x[a0][a1]...`` into ``(x, (a0, a1, ...))``."""
    idxs = []
    while isinstance(base, Access):
        idxs.append(base.index)
        base = base.arr
    return base, tuple(reversed(idxs))


def access(base: Expr, idxs) -> Expr:
    for a in idxs:
        base = Access(base, as_aff(a))
    return base


def gens(e: Expr):
    """Split ``gen[i0:n0] ... gen[ik:nk] body`` into ``([(i0,n0),...], body)``."""
    out = []
    while isinstance(e, Gen):
        out.append((e.var, e.extent))
        e = e.body
    return out, e


def make_gens(binds, body: Expr) -> Expr:
    for i, n in reversed(tuple(binds)):
        body = Gen(i, n, body)
    return body


def sums(e: Expr):
    out = []
    while isinstance(e, Sum):
        out.append((e.var, e.extent))
        e = e.body
    return out, e


def make_sums(binds, body: Expr) -> Expr:
    for i, n in reversed(tuple(binds)):
        body = Sum(i, n, body)
    return body


def lets(e: Expr):
    """Split a let-block into ``([(x, e0), ...], result)``."""
    out = []
    while isinstance(e, Let):
        out.append((e.var, e.value))
        e = e.body
    return out, e


def make_lets(binds, body: Expr) -> Expr:
    for v, e0 in reversed(tuple(binds)):
        body = Let(v, e0, body)
    return body


def iverson(p: Pred, e: Expr) -> Expr:
    """``[p]·e`` with the literal predicates folded (no bracket for ``true``)."""
    if p is TRUE:
        return e
    if p is FALSE:
        from .typecheck import zero_of, type_of

        return zero_of(type_of(e))
    return Iverson(p, e)


def fresh_index(name: str = "i") -> IndexVar:
    return IndexVar(name, fresh_uid())


def fresh_var(name: str, t: Type) -> Var:
    return Var(name, fresh_uid(), t)
