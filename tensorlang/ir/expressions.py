"""Value expressions (paper Section 4, Figure 3 ``e``), including the loop
(issue #17) and sparse inputs (issue 16), and the small builders passes share.

(The bracket builder ``iverson`` folds ``[false]·e`` to the zero of ``e``'s
type, so it lives with the types, in ``tensorlang.typecheck``; the package
re-exports it as ``tensorlang.ir.iverson``.)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as _np

from ..errors import TensorLangError
from .indices import Aff, Exists, IndexVar, Pred, Relation, SizeVar, as_aff
from .nodes import Node, fresh_uid, node
from .types_base import Type

# --------------------------------------------------------------------------
# Value expressions (Fig. 3 ``e``)


class Expr(Node):
    """Value expressions.  Operators build IR through ``tensorlang.api``."""

    __slots__ = ()


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


# --------------------------------------------------------------------------
# Small helpers shared by passes


def is_zero(e: Expr) -> bool:
    """Is ``e`` syntactically a zero value: 0, a gen, sum or bracket of zero, a
    pair of zeros, or an access or projection of one (the folding test of
    Figure 13's D and of simplify; never a semantic test)."""
    match e:
        case Const(value=v):
            return v == 0
        case Gen(body=b) | Iverson(body=b) | Sum(body=b):
            return is_zero(b)
        case Pair(fst=a, snd=b):
            return is_zero(a) and is_zero(b)
        case Access(arr=a) | Proj(arg=a):
            return is_zero(a)
        case _:
            return False


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


def fresh_index(name: str = "i") -> IndexVar:
    return IndexVar(name, fresh_uid())


def fresh_var(name: str, t: Type) -> Var:
    return Var(name, fresh_uid(), t)
