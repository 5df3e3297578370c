"""Black-box scalar functions ``f(e0, ...)`` (Fig. 3) and their registry.

Each entry carries a NumPy implementation (for float evaluation), a sympy
implementation (for exact evaluation of rewrites), and its partial
derivatives as IR expressions, so the derivative rules 6.6 and 6.47 need no
per-function cases: ``Df(e; de) = sum_k (d_k f)(e) * de_k`` and
``DTf(e, dy)_k = (d_k f)(e) * dy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy

from .errors import TensorLangError
from .ir import Add, Call, Const, Expr, Mul


@dataclass(frozen=True)
class FunctionDef:
    name: str
    arity: int
    numpy: Callable  # float(s) -> float, elementwise on arrays too
    sympy: Callable  # sympy expr(s) -> sympy expr
    partials: Callable  # tuple[Expr] -> tuple[Expr]: d f / d arg_k at args
    # Where the function is defined; the evaluator reports domain errors.
    domain: str = "all reals"


_REGISTRY: dict[str, FunctionDef] = {}


def register(fd: FunctionDef, *, replace: bool = False) -> FunctionDef:
    old = _REGISTRY.get(fd.name)
    if old is not None and not replace and old != fd:
        raise TensorLangError(f"a function named {fd.name!r} is already registered")
    _REGISTRY[fd.name] = fd
    return fd


def lookup(name: str) -> FunctionDef:
    fd = _REGISTRY.get(name)
    if fd is None:
        if name.startswith("pow[") and name.endswith("]"):
            return power_def(float(name[4:-1]))
        raise TensorLangError(f"unknown scalar function {name!r}; register it with tl.register_function")
    return fd


def registered() -> dict[str, FunctionDef]:
    return dict(_REGISTRY)


def neg(e: Expr) -> Expr:
    return Mul(Const(-1), e)


def call(name: str, *args: Expr) -> Expr:
    return Call(name, tuple(args))


# -- built-ins ---------------------------------------------------------------

register(FunctionDef("exp", 1, np.exp, sympy.exp, lambda x: (call("exp", x),)))
register(FunctionDef("log", 1, np.log, sympy.log, lambda x: (call("div", Const(1), x),), domain="x > 0"))
register(FunctionDef("sin", 1, np.sin, sympy.sin, lambda x: (call("cos", x),)))
register(FunctionDef("cos", 1, np.cos, sympy.cos, lambda x: (neg(call("sin", x)),)))
register(
    FunctionDef(
        "tanh",
        1,
        np.tanh,
        sympy.tanh,
        lambda x: (Add(Const(1), neg(Mul(call("tanh", x), call("tanh", x)))),),
    )
)
register(
    FunctionDef(
        "sqrt", 1, np.sqrt, sympy.sqrt, lambda x: (call("div", Const(0.5), call("sqrt", x)),), domain="x >= 0"
    )
)
register(
    FunctionDef(
        "div",
        2,
        lambda a, b: np.divide(a, b),
        lambda a, b: a / b,
        lambda a, b: (call("div", Const(1), b), neg(call("div", a, Mul(b, b)))),
        domain="b != 0",
    )
)
register(
    FunctionDef(
        "sigmoid",
        1,
        lambda x: 1.0 / (1.0 + np.exp(-x)),
        lambda x: 1 / (1 + sympy.exp(-x)),
        lambda x: (Mul(call("sigmoid", x), Add(Const(1), neg(call("sigmoid", x)))),),
    )
)


def power_name(k) -> str:
    k = float(k)
    return f"pow[{int(k) if k.is_integer() else k!r}]"


def power_def(k: float) -> FunctionDef:
    """``x ** k`` for a constant ``k``; derivative ``k * x ** (k - 1)``."""
    name = power_name(k)
    fd = _REGISTRY.get(name)
    if fd is not None:
        return fd
    kk = int(k) if float(k).is_integer() else k
    ks = sympy.Integer(kk) if isinstance(kk, int) else sympy.nsimplify(kk)

    def partials(x, kk=kk):
        if kk == 1:
            return (Const(1),)
        lower = x if kk - 1 == 1 else (Const(1) if kk - 1 == 0 else call(power_name(kk - 1), x))
        return (Mul(Const(kk), lower),)

    def np_pow(x, kk=kk):
        return np.power(x, float(kk))

    dom = "all reals" if isinstance(kk, int) and kk >= 0 else ("x != 0" if isinstance(kk, int) else "x > 0")
    return register(FunctionDef(name, 1, np_pow, lambda x, ks=ks: x**ks, partials, domain=dom))

