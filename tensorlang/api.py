"""The Python API for writing programs (DESIGN.md "Public API").

Every constructor type-checks what it builds, so an ill-typed program fails
where it is written, with a message naming the sub-expression.
"""

from __future__ import annotations

import inspect
import numbers
from typing import Callable, Sequence

import numpy as np

from . import functions as F
from .errors import TensorLangError, TypeCheckError, describe
from .ir import (
    REAL,
    Access,
    Add,
    Aff,
    Call,
    Const,
    Exists,
    Expr,
    Gen,
    IndexVar,
    Iverson,
    Let,
    Mul,
    Pair,
    PairT,
    Pred,
    Proj,
    Relation,
    SizeVar,
    Sum,
    TensorT,
    Type,
    Var,
    as_aff,
    as_pred,
    fresh_uid,
    sym_aff,
    tensor_type,
)
from .typecheck import type_of

# -- sizes and inputs ---------------------------------------------------------


def size(name: str) -> Aff:
    """A symbolic size ``n`` (an affine expression of one size variable)."""
    if not name.isidentifier():
        raise TensorLangError(f"size name {name!r} is not an identifier")
    return sym_aff(SizeVar(name))


def sizes(names: str) -> tuple:
    return tuple(size(n) for n in names.replace(",", " ").split())


def _extent(n) -> Aff:
    a = as_aff(n)
    if a.index_vars():
        raise TensorLangError(f"extent {a} mentions index variables; extents depend on sizes only")
    return a


def tensor(name: str, *extents) -> Var:
    """An input of type ``[n0]...[nk]R`` (``tl.tensor("x", n + m - 1)``)."""
    if not extents:
        raise TensorLangError(f"tensor {name!r} needs at least one extent; use tl.scalar for scalars")
    return Var(name, 0, tensor_type([_extent(n) for n in extents]))


def scalar(name: str) -> Var:
    return Var(name, 0, REAL)


def var(name: str, t: Type) -> Var:
    """An input of any type, e.g. a struct-of-arrays pair ``([n]R × [n]R)``."""
    return Var(name, 0, t)


Real = REAL


def pair_type(a: Type, b: Type) -> Type:
    return PairT(a, b)


def tensor_of(extents, elem: Type = REAL) -> Type:
    return tensor_type([_extent(n) for n in extents], elem)


def const(v) -> Expr:
    return _lift(v)


# -- binders ------------------------------------------------------------------


def _names(fn: Callable, k: int, default: str) -> list:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    if len(params) < k:
        params += [f"{default}{j}" for j in range(len(params), k)]
    return params[:k]


def _binder(kind, extents, fn):
    ext = list(extents) if isinstance(extents, (list, tuple)) else [extents]
    ext = [_extent(n) for n in ext]
    names = _names(fn, len(ext), "i")
    ivs = [IndexVar(nm, fresh_uid()) for nm in names]
    body = fn(*[sym_aff(v) for v in ivs])
    body = _lift(body)
    for iv, n in reversed(list(zip(ivs, ext))):
        body = kind(iv, n, body)
        type_of(body)
    return body


def gen(extents, fn: Callable) -> Expr:
    """``gen[i:n] e``; ``tl.gen([n, m], lambda i, j: ...)`` nests."""
    return _binder(Gen, extents, fn)


def sum(extents, fn: Callable) -> Expr:  # noqa: A001 - the paper's name
    """``sum[i:n] e`` over a scalar body; a list of extents nests."""
    return _binder(Sum, extents, fn)


def exists(extents, fn: Callable) -> Pred:
    ext = list(extents) if isinstance(extents, (list, tuple)) else [extents]
    ext = [_extent(n) for n in ext]
    names = _names(fn, len(ext), "k")
    ivs = [IndexVar(nm, fresh_uid()) for nm in names]
    body = as_pred(fn(*[sym_aff(v) for v in ivs]))
    for iv, n in reversed(list(zip(ivs, ext))):
        body = Exists(iv, n, body)
    return body


def iverson(pred, e) -> Expr:
    """``[p]·e``: ``e`` where ``p`` holds, zero of its type elsewhere."""
    return Iverson(as_pred(pred), _lift(e))


def relation(name: str, *extents) -> Relation:
    """A data predicate ``R`` over ``[n0] x ... x [nk]``; ``R(i, j)`` is a predicate."""
    if not extents:
        raise TensorLangError(f"relation {name!r} needs at least one extent")
    return Relation(name, tuple(_extent(n) for n in extents))


def let(e0, fn: Callable) -> Expr:
    """``let x = e0 in fn(x)``."""
    e0 = _lift(e0)
    (name,) = _names(fn, 1, "x")
    v = Var(name, fresh_uid(), type_of(e0))
    body = _lift(fn(v))
    out = Let(v, e0, body)
    type_of(out)
    return out


def pair(a, b) -> Expr:
    return Pair(_lift(a), _lift(b))


def proj(e, k: int) -> Expr:
    if k not in (0, 1):
        raise TensorLangError(f"projection index must be 0 or 1, got {k!r}")
    out = Proj(k, _lift(e))
    type_of(out)
    return out


# -- scalar functions -----------------------------------------------------------


def _call(name: str, *args) -> Expr:
    out = Call(name, tuple(_lift(a) for a in args))
    type_of(out)
    return out


def exp(x):
    return _call("exp", x)


def log(x):
    return _call("log", x)


def sin(x):
    return _call("sin", x)


def cos(x):
    return _call("cos", x)


def tanh(x):
    return _call("tanh", x)


def sqrt(x):
    return _call("sqrt", x)


def sigmoid(x):
    return _call("sigmoid", x)


def div(a, b):
    return _call("div", a, b)


def power(x, k):
    return _pow(_lift(x), k)


def register_function(
    name: str,
    arity: int,
    numpy: Callable,
    sympy: Callable,
    partials: Callable[..., Sequence[Expr]],
    *,
    replace: bool = False,
    numba: Callable | None = None,
) -> Callable[..., Expr]:
    """Register a black-box scalar function with its partial derivatives.

    ``partials(*args)`` receives the argument expressions and returns one IR
    expression per argument (build them with this API).  ``numba``: a plain
    Python function of floats that ``numba.njit`` compiles, used by compiled
    kernels (default: the backend njits ``numpy``, and refuses the program at
    compile time if Numba cannot).  Returns a constructor ``f(*args) -> Expr``.
    """
    if not name.isidentifier():
        raise TensorLangError(f"function name {name!r} is not an identifier")

    def checked_partials(*args):
        ps = tuple(_lift(p) for p in partials(*args))
        if len(ps) != arity:
            raise TensorLangError(f"partials of {name} returned {len(ps)} expressions for arity {arity}")
        for p in ps:
            if type_of(p) is not REAL:
                raise TypeCheckError(f"partial of {name} must be a scalar expression, got {describe(p)}")
        return ps

    F.register(F.FunctionDef(name, arity, numpy, sympy, checked_partials, numba=numba), replace=replace)

    def make(*args):
        if len(args) != arity:
            raise TensorLangError(f"{name} takes {arity} argument(s), got {len(args)}")
        return _call(name, *args)

    make.__name__ = name
    return make


# -- operators on expressions -----------------------------------------------------


def _lift(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)):
        raise TensorLangError(f"a boolean {x!r} is not a value; use tl.iverson(pred, 1)")
    if isinstance(x, numbers.Real):
        v = float(x) if not isinstance(x, int) else x
        if isinstance(v, float) and not np.isfinite(v):
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


def _checked(e: Expr) -> Expr:
    type_of(e)
    return e


def _neg(e: Expr) -> Expr:
    if isinstance(e, Const):
        return Const(-e.value)
    return Mul(Const(-1), e)


def _pow(x: Expr, k) -> Expr:
    if isinstance(k, Expr):
        raise TensorLangError(f"only constant exponents are supported, got {describe(k)}; use tl.exp(k * tl.log(x))")
    if not isinstance(k, numbers.Real) or isinstance(k, bool):
        raise TensorLangError(f"exponent must be a number, got {k!r}")
    k = float(k)
    if k == 1:
        return _checked(x)
    if k == 2:
        return _checked(Mul(x, x))
    return _call(F.power_def(k).name, x)


def _getitem(e: Expr, key) -> Expr:
    keys = key if isinstance(key, tuple) else (key,)
    out = e
    for k in keys:
        if isinstance(k, slice):
            raise TensorLangError(
                f"slicing {describe(e)} is not supported; write the slice as a gen, "
                "e.g. tl.gen(n, lambda i: A[i, 0]) for A[:, 0]"
            )
        t = type_of(out)
        if not isinstance(t, TensorT):
            raise TypeCheckError(f"too many indices: {describe(out)} has type {t} and cannot be indexed")
        out = Access(out, as_aff(k))
    return out


def _install():
    Expr.__add__ = lambda a, b: _checked(Add(a, _lift(b)))
    Expr.__radd__ = lambda a, b: _checked(Add(_lift(b), a))
    Expr.__sub__ = lambda a, b: _checked(Add(a, _neg(_lift(b))))
    Expr.__rsub__ = lambda a, b: _checked(Add(_lift(b), _neg(a)))
    Expr.__mul__ = lambda a, b: _checked(Mul(a, _lift(b)))
    Expr.__rmul__ = lambda a, b: _checked(Mul(_lift(b), a))
    Expr.__truediv__ = lambda a, b: _call("div", a, b)
    Expr.__rtruediv__ = lambda a, b: _call("div", b, a)
    Expr.__neg__ = lambda a: _checked(_neg(a))
    Expr.__pos__ = lambda a: a
    Expr.__pow__ = _pow
    Expr.__getitem__ = _getitem
    Expr.__iter__ = None  # a tensor expression is not a Python iterable

    def _nobool(self):
        raise TensorLangError(f"{describe(self)} is symbolic and has no truth value")

    Expr.__bool__ = _nobool

    def _nocmp(self, other):
        raise TensorLangError(
            f"cannot compare the value {describe(self)}: predicates compare affine indices only; "
            "a data-dependent condition is a relation (tl.relation)"
        )

    Expr.__lt__ = Expr.__le__ = Expr.__gt__ = Expr.__ge__ = _nocmp


_install()

_ = (Iverson, Let, Gen, Sum)  # re-exported names used by docs
