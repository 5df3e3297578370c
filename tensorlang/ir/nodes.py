"""Interned IR nodes (paper Section 4, Figure 3): the metaclass, the node
decorator and the generic structure every sort shares.

Every node is a small frozen dataclass interned by :class:`Interned`
(hash-consing: structurally equal terms are one object, so ``a is b``
decides equality and passes memoize by identity).  :func:`children` and
:func:`rebuild` satisfy ``rebuild(e, children(e)) is e`` (sympy's
``func(*args) == expr`` invariant), so traversals need no visitor classes.
"""

from __future__ import annotations

import itertools
import operator
import threading
import weakref
from _weakref import _remove_dead_weakref
from dataclasses import dataclass, fields
from typing import Iterable

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
                make = cls._make
                if make is not None and len(args) == cls._arity:
                    node = make(*args)
                else:  # (wrong arity: the dataclass's own error)
                    node = super().__call__(*args)
                ref = _Ref(node, _drop)
                ref.key = key
                _TABLE[key] = ref
        return node


class _Ref(weakref.ref):
    """A weak reference that knows its table key (``weakref.KeyedRef`` without
    its Python-level ``__new__``/``__init__``: one per new node)."""

    __slots__ = ("key",)


_TABLE: dict = {}
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

    # The IR's own intrinsic facts of the node alone, computed once by their
    # owners (typed slots, not string keys): free value variables, free
    # indices, size variables (this module) and the type (typecheck).  Unset
    # until first asked.  Nothing else is stored on a node (issue #14 item
    # 4): a pass keeps its facts in a memo it owns, keyed by the interned
    # node (``weakref.WeakKeyDictionary``; nodes have weakref slots).
    __slots__ = ("_fv", "_fi", "_sv", "_type")
    _field_names: tuple[str, ...] = ()
    _normalizes = False  # does the class override _normalize (set by @node)
    _make = None  # fields -> new node, without the dataclass's __init__ (set by @node)
    _arity = 0

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

    Its only cached facts are the typed slots of :class:`Node` (free
    variables, free indices, size variables, type); a pass's memo of facts
    about a node lives in the pass, keyed by the node.
    """
    # a constructor of its own (none so far) keeps the dataclass path
    own = any("__init__" in c.__dict__ or "__new__" in c.__dict__ or "__post_init__" in c.__dict__
              for c in cls.__mro__ if c is not object and "__dataclass_fields__" not in c.__dict__)
    dc = dataclass(frozen=True, eq=False, slots=True, weakref_slot=True, repr=False)(cls)
    dc._field_names = names = tuple(f.name for f in fields(dc))
    dc._normalizes = dc._normalize.__func__ is not Node._normalize.__func__
    dc._make, dc._arity = (None if own else _maker(dc, names)), len(names)
    # children(n) in C: attrgetter gives a tuple for two or more names
    if len(names) >= 2:
        dc._children = staticmethod(operator.attrgetter(*names))
    elif names:
        get = operator.attrgetter(names[0])
        dc._children = staticmethod(lambda n: (get(n),))
    else:
        dc._children = staticmethod(lambda n: ())
    return dc


_MEMBER = type(_Ref.key)  # the type of a slot's descriptor (member_descriptor)


def _maker(cls, names: tuple):
    """``make(*fields)``: a new, uninitialised-slot node of ``cls`` with its
    fields stored by their slot descriptors, what the frozen dataclass's
    ``__init__`` does through ``object.__setattr__`` per field, in about half
    the time (a derivative builds hundreds of thousands of nodes, issue #14
    item 6).  None (the dataclass's own ``__init__``) if ``cls`` has a
    ``__post_init__`` or a field outside ``__init__`` (:func:`node` also
    keeps a class with a constructor of its own on that path)."""
    if "__post_init__" in dir(cls) or any(not f.init for f in fields(cls)):
        return None
    env = {"_new": object.__new__, "_cls": cls}
    for k, name in enumerate(names):
        desc = next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__)
        if type(desc) is not _MEMBER:  # not a slot (cannot happen with slots=True)
            return None
        env[f"_s{k}"] = desc.__set__
    args = ", ".join(f"a{k}" for k in range(len(names)))
    body = "".join(f"    _s{k}(o, a{k})\n" for k in range(len(names)))
    src = f"def make({args}):\n    o = _new(_cls)\n{body}    return o\n"
    exec(src, env)
    return env["make"]


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


