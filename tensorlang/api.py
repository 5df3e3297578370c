"""The Python API for writing programs (DESIGN.md "Public API").

Every constructor type-checks what it builds, so an ill-typed program fails
where it is written, with a message naming the sub-expression.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Callable, Sequence

import numpy as np

from . import functions as F
from .errors import TensorLangError, TypeCheckError, describe
from .ir import (
    as_expr,
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
    SparseVar,
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


def _name(name, what: str) -> str:
    """Names become keyword arguments of calls (``f(x=...)``): identifiers only."""
    if not isinstance(name, str):
        raise TensorLangError(f"the name of a {what} must be a string, got {type(name).__name__} {name!r}")
    if not name.isidentifier():
        raise TensorLangError(f"the name of a {what} is not an identifier: got {name!r} (names become keyword arguments, so they must be Python identifiers)")
    return name


def size(name: str) -> Aff:
    """A symbolic size ``n`` (an affine expression of one size variable)."""
    return sym_aff(SizeVar(_name(name, "size")))


def sizes(names: str) -> tuple:
    if not isinstance(names, str):
        raise TensorLangError(f"tl.sizes takes a string of names like \"n m\", got {type(names).__name__} {names!r}")
    return tuple(size(n) for n in names.replace(",", " ").split())


def _extent(n, where: str = "extent", declared: bool = False) -> Aff:
    """An extent: affine in the sizes.  ``declared`` (an input's or relation's
    type): a constant extent must also be >= 0, since no array has that shape."""
    if isinstance(n, float) and not math.isfinite(n):
        raise TensorLangError(f"{where}: an extent must be an int or a size expression, got {n!r}")
    try:
        a = as_aff(n)
    except TensorLangError as exc:
        raise type(exc)(f"{where}: {exc}") from None
    if a.index_vars():
        raise TensorLangError(f"{where}: extent {a} mentions index variables; extents depend on sizes only")
    if declared and a.is_const and a.const < 0:
        raise TensorLangError(f"{where}: extent {a.const} is negative; an extent is a size >= 0")
    return a


def _declared_extents(kind: str, name: str, extents) -> list:
    return [_extent(n, f"{kind} {name!r}, extent {k}", declared=True) for k, n in enumerate(extents)]


def tensor(name: str, *extents) -> Var:
    """An input of type ``[n0]...[nk]R`` (``tl.tensor("x", n + m - 1)``)."""
    _name(name, "tensor")
    if not extents:
        raise TensorLangError(f"tensor {name!r} needs at least one extent; use tl.scalar for scalars")
    return Var(name, 0, tensor_type(_declared_extents("tensor", name, extents)))


def scalar(name: str) -> Var:
    return Var(_name(name, "scalar"), 0, REAL)


def var(name: str, t: Type) -> Var:
    """An input of any type, e.g. a struct-of-arrays pair ``([n]R × [n]R)``."""
    _name(name, "variable")
    if not isinstance(t, Type):
        raise TensorLangError(f"variable {name!r}: expected a type (tl.Real, tl.tensor_of, tl.pair_type), got {t!r}")
    return Var(name, 0, t)


Real = REAL


def pair_type(a: Type, b: Type) -> Type:
    for t in (a, b):
        if not isinstance(t, Type):
            raise TensorLangError(f"tl.pair_type takes two types, got {t!r}")
    return PairT(a, b)


def tensor_of(extents, elem: Type = REAL) -> Type:
    if not isinstance(elem, Type):
        raise TensorLangError(f"tl.tensor_of: the element type must be a type, got {elem!r}")
    ext = extents if isinstance(extents, (list, tuple)) else [extents]
    return tensor_type(_declared_extents("tensor type", "tensor_of", ext), elem)


def const(v) -> Expr:
    return _lift(v)


# -- binders ------------------------------------------------------------------


def _names(fn: Callable, k: int, default: str, where: str = "binder") -> list:
    """Parameter names of ``fn`` (for printing); ``fn`` must accept ``k`` positional arguments."""
    if not callable(fn):
        raise TensorLangError(f"{where} needs a function of {k} argument(s) (e.g. lambda i: ...), got {fn!r}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: cannot check, call it
        sig = None
    if sig is not None:
        try:
            sig.bind(*range(k))
        except TypeError:
            raise TensorLangError(
                f"{where} over {k} extent(s) needs a function of {k} argument(s), got {getattr(fn, '__name__', fn)}{sig}"
            ) from None
        params = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        params = [p.name for p in params]
    else:
        params = []
    if len(params) < k:
        params += [f"{default}{j}" for j in range(len(params), k)]
    return params[:k]


def _binder(kind, extents, fn):
    ext = list(extents) if isinstance(extents, (list, tuple)) else [extents]
    where = f"tl.{kind.__name__.lower()}"
    if not ext:
        raise TensorLangError(f"{where} needs at least one extent")
    ext = [_extent(n, f"{where} extent") for n in ext]
    names = _names(fn, len(ext), "i", where)
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
    if not ext:
        raise TensorLangError("tl.exists needs at least one extent")
    ext = [_extent(n, "tl.exists extent") for n in ext]
    names = _names(fn, len(ext), "k", "tl.exists")
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
    _name(name, "relation")
    if not extents:
        raise TensorLangError(f"relation {name!r} needs at least one extent")
    return Relation(name, tuple(_declared_extents("relation", name, extents)))


def let(e0, fn: Callable) -> Expr:
    """``let x = e0 in fn(x)``."""
    e0 = _lift(e0)
    (name,) = _names(fn, 1, "x", "tl.let")
    v = Var(name, fresh_uid(), type_of(e0))
    body = _lift(fn(v))
    out = Let(v, e0, body)
    type_of(out)
    return out


def pair(a, b) -> Expr:
    return Pair(_lift(a), _lift(b))


def proj(e, k: int) -> Expr:
    if not isinstance(k, numbers.Real) or k not in (0, 1):  # (an array's ``in`` raised ValueError)
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
    _name(name, "function")

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


_lift = as_expr  # (in ir, so that conditionals need not import this module)


def _mul(a: Expr, b: Expr) -> Expr:
    """``a * b``; a sparse read's bracket covers the product (issue 16):
    ``([S(i, j)]·A[i, j])·b`` is built as ``[S(i, j)]·(A[i, j]·b)``."""
    from .sparse import is_guard, mark_guard

    if is_guard(a):
        return mark_guard(Iverson(a.pred, Mul(a.body, b)))
    if is_guard(b):
        return mark_guard(Iverson(b.pred, Mul(a, b.body)))
    return Mul(a, b)


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
        raise TensorLangError(f"exponent of {describe(x)} must be a number, got {k!r}")
    try:
        k = float(k)
    except OverflowError:
        raise TensorLangError(f"exponent of {describe(x)} does not fit a float64") from None
    # Non-finite exponents are legal and follow NumPy (x ** inf, x ** nan), as
    # huge and negative ones do; only a non-float exponent is refused above.
    if k == 1:
        return _checked(x)
    if k == 2:
        return _checked(Mul(x, x))
    return _call(F.power_def(k).name, x)


def _rpow(e: Expr, b) -> Expr:
    """``b ** e`` for a constant base: ``exp(log(b) · e)`` for ``b > 0`` (the
    same real function, built from exp so every stage, derivative and
    kernel already handles it); other bases have no real meaning for all e."""
    if not isinstance(b, numbers.Real) or isinstance(b, (bool, np.bool_)):
        raise TensorLangError(f"cannot raise {type(b).__name__} {b!r} to the power {describe(e)}")
    try:
        fb = float(b)
    except OverflowError:
        raise TensorLangError(f"the base of {describe(e)} as an exponent does not fit a float64") from None
    if not (math.isfinite(fb) and fb > 0):
        raise TensorLangError(
            f"{b!r} ** {describe(e)}: a constant base must be positive and finite "
            "(b ** e is exp(log(b) * e), which is real only for b > 0)"
        )
    return _call("exp", _checked(Mul(Const(math.log(fb)), e)))


def _getitem(e: Expr, key) -> Expr:
    keys = key if isinstance(key, tuple) else (key,)
    if isinstance(e, SparseVar) and 0 < len(keys) <= len(e.rel.extents) and not any(isinstance(k, slice) for k in keys):
        from .sparse import guarded_read

        return guarded_read(e, keys)  # [S(i, j)]·A[i][j]: 0 off the relation (issue 16)
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


_UFUNC_OPS = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "true_divide": lambda a, b: a / b, "power": lambda a, b: a ** b,
}


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """NumPy must not broadcast over an expression (``arr + x[0]`` would build
    an object array of terms, ``np.sin(x[0])`` fail inside NumPy).  A NumPy
    scalar operand is a constant (``np.float64(2) * x[0]``); anything else is
    refused, naming the tensorlang function to use."""
    op = _UFUNC_OPS.get(ufunc.__name__)
    scalars_ok = all(isinstance(v, Expr) or (np.ndim(v) == 0 and not isinstance(v, np.ndarray)) for v in inputs)
    if op is not None and method == "__call__" and not kwargs and len(inputs) == 2 and scalars_ok:
        a, b = inputs
        return op(a if isinstance(a, Expr) else _lift(a), b)
    arrays = [type(v).__name__ for v in inputs if isinstance(v, np.ndarray)]
    hint = f"tl.{ufunc.__name__}" if hasattr(F, "lookup") and ufunc.__name__ in _TL_FUNCTIONS else "a tensorlang expression"
    raise TensorLangError(
        f"NumPy's {ufunc.__name__} cannot take the tensorlang expression {describe(self)}"
        + (f" together with an {arrays[0]}" if arrays else "")
        + f": build the program with {hint} (write arrays as inputs, tl.tensor)"
    )


_TL_FUNCTIONS = ("exp", "log", "sin", "cos", "tanh", "sqrt")


def _install():
    Expr.__add__ = lambda a, b: _checked(Add(a, _lift(b)))
    Expr.__radd__ = lambda a, b: _checked(Add(_lift(b), a))
    Expr.__sub__ = lambda a, b: _checked(Add(a, _neg(_lift(b))))
    Expr.__rsub__ = lambda a, b: _checked(Add(_lift(b), _neg(a)))
    Expr.__mul__ = lambda a, b: _checked(_mul(a, _lift(b)))
    Expr.__rmul__ = lambda a, b: _checked(_mul(_lift(b), a))
    Expr.__truediv__ = lambda a, b: _call("div", a, b)
    Expr.__rtruediv__ = lambda a, b: _call("div", b, a)
    Expr.__neg__ = lambda a: _checked(_neg(a))
    Expr.__pos__ = lambda a: a
    Expr.__pow__ = _pow
    Expr.__rpow__ = _rpow
    Expr.__array_ufunc__ = _array_ufunc
    Expr.__getitem__ = _getitem
    Expr.__iter__ = None  # a tensor expression is not a Python iterable

    def _nobool(self):
        raise TensorLangError(f"{describe(self)} is symbolic and has no truth value")

    Expr.__bool__ = _nobool

    def _value_cmp(op):
        # a comparison of real scalars, the condition of tl.where (tensorlang.conditionals);
        # index comparisons are Aff operators and never come here
        def cmp(self, other):
            from .conditionals import compare

            return compare(op, self, other)

        return cmp

    for op, dunder in (("<", "__lt__"), ("<=", "__le__"), (">", "__gt__"), (">=", "__ge__")):
        setattr(Expr, dunder, _value_cmp(op))


_install()

_ = (Iverson, Let, Gen, Sum)  # re-exported names used by docs
