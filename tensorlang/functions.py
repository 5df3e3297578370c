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

from .errors import TensorLangError
from .ir.expressions import Add, Call, Const, Expr, Mul
from .ir.scope import walk


def sympy_module():
    """sympy, imported when an exact evaluation first needs it: it is most of
    ``import tensorlang``'s time (~0.4 s), and float programs never use it."""
    import sympy

    return sympy


@dataclass(frozen=True)
class FunctionDef:
    name: str
    arity: int
    numpy: Callable  # float(s) -> float, elementwise on arrays too
    sympy: Callable  # sympy expr(s) -> sympy expr
    partials: Callable  # tuple[Expr] -> tuple[Expr]: d f / d arg_k at args
    # Where the function is defined; the evaluator reports domain errors.
    domain: str = "all reals"
    # A plain Python scalar function of floats that ``numba.njit`` compiles
    # (the backend calls it from kernels); None: the backend njits ``numpy``
    # when Numba can, else refuses the program at compile time.
    numba: Callable | None = None


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
        if name.startswith("D[") and name.endswith("]"):
            return derivative_def(name[2:-1])
        raise TensorLangError(f"unknown scalar function {name!r}; register it with tl.register_function")
    return fd


def registered() -> dict[str, FunctionDef]:
    return dict(_REGISTRY)


def user_functions(expr: Expr) -> list:
    """The registered functions ``expr`` calls, with ``D[f]`` read as ``f``
    (sorted names): what a cache key must fingerprint besides the program."""
    names = set()
    for n in walk(expr):
        if isinstance(n, Call):
            f = n.fn
            while f.startswith("D[") and f.endswith("]"):
                f = f[2:-1]
            names.add(f)
    return sorted(f for f in names if f in _REGISTRY)


def neg(e: Expr) -> Expr:
    return Mul(Const(-1), e)


def call(name: str, *args: Expr) -> Expr:
    return Call(name, tuple(args))


# -- built-ins ---------------------------------------------------------------

register(FunctionDef("exp", 1, np.exp, lambda x: sympy_module().exp(x), lambda x: (call("exp", x),)))
register(FunctionDef("log", 1, np.log, lambda x: sympy_module().log(x), lambda x: (call("div", Const(1), x),), domain="x > 0"))
register(FunctionDef("sin", 1, np.sin, lambda x: sympy_module().sin(x), lambda x: (call("cos", x),)))
register(FunctionDef("cos", 1, np.cos, lambda x: sympy_module().cos(x), lambda x: (neg(call("sin", x)),)))
register(
    FunctionDef(
        "tanh",
        1,
        np.tanh,
        lambda x: sympy_module().tanh(x),
        lambda x: (Add(Const(1), neg(Mul(call("tanh", x), call("tanh", x)))),),
    )
)
register(
    FunctionDef(
        "sqrt", 1, np.sqrt, lambda x: sympy_module().sqrt(x), lambda x: (call("div", Const(0.5), call("sqrt", x)),), domain="x >= 0"
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
        lambda x: 1 / (1 + sympy_module().exp(-x)),
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

    def sympy_pow(x, kk=kk):
        sp = sympy_module()
        return x ** (sp.Integer(kk) if isinstance(kk, int) else sp.nsimplify(kk))

    def partials(x, kk=kk):
        if kk == 1:
            return (Const(1),)
        lower = x if kk - 1 == 1 else (Const(1) if kk - 1 == 0 else call(power_name(kk - 1), x))
        return (Mul(Const(kk), lower),)

    def np_pow(x, kk=kk):
        return np.power(x, float(kk))

    dom = "all reals" if isinstance(kk, int) and kk >= 0 else ("x != 0" if isinstance(kk, int) else "x > 0")
    # setdefault: threads deriving the same power at once share one definition (atomic in CPython)
    return _REGISTRY.setdefault(name, FunctionDef(name, 1, np_pow, sympy_pow, partials, domain=dom))



# -- the black-box total derivative Df (rule 6.6) ---------------------------------
#
# Rule 6.6 reads  D⟦f(e0, …)⟧σ ==> Df(e0, …; D⟦e0⟧σ, …)  with Df "the black-box
# function's total derivative": one application, costed 1 by rule 4.26 like
# any black box.  ``D[f]`` is that function, of arity 2k (arguments, then
# tangents), denoting  sum_k (d_k f)(x)·t_k.  The adjoint rule 6.47 uses it
# with a one-hot tangent: DT_k f(x, dy) = D[f](x; 0, …, dy, …, 0).  Its
# implementations and its own partials (for higher-order derivatives) are
# derived from f's partials, so a user function registered with partials
# gets D[f] for free.


def derivative_name(name: str) -> str:
    return f"D[{name}]"


def expand_derivative(name: str, args, tangents) -> Expr:
    """``sum_k (d_k f)(args)·t_k`` as an IR expression; zero tangents dropped."""
    fd = lookup(name)
    terms = [Mul(p, t) for p, t in zip(fd.partials(*args), tangents) if not (isinstance(t, Const) and t.value == 0)]
    if not terms:
        return Const(0)
    out = terms[0]
    for t in terms[1:]:
        out = Add(out, t)
    return out


def _placeholders(k: int):
    from .ir.expressions import Var
    from .ir.types import REAL

    return tuple(Var(f"_a{j}", -1000 - j, REAL) for j in range(k))


def _scalar_eval(e: Expr, env: dict, exact: bool):
    """Evaluate a scalar IR expression over placeholders (elementwise on arrays)."""
    from .ir.expressions import Var

    match e:
        case Var():
            return env[e]
        case Const(value=v):
            return sympy_module().nsimplify(v) if exact else v
        case Add(lhs=a, rhs=b):
            return _scalar_eval(a, env, exact) + _scalar_eval(b, env, exact)
        case Mul(lhs=a, rhs=b):
            return _scalar_eval(a, env, exact) * _scalar_eval(b, env, exact)
        case Call(fn=f, args=args):
            fd = lookup(f)
            vals = [_scalar_eval(a, env, exact) for a in args]
            return fd.sympy(*vals) if exact else fd.numpy(*vals)
        case _:
            raise TensorLangError(f"partials must be scalar expressions of the arguments, got {e!r}")


def _diff(e: Expr, v) -> Expr:
    """d e / d v for a scalar expression over placeholders (chain rule through partials)."""
    from .ir.expressions import Var

    match e:
        case Var():
            return Const(1) if e is v else Const(0)
        case Const():
            return Const(0)
        case Add(lhs=a, rhs=b):
            return _add(_diff(a, v), _diff(b, v))
        case Mul(lhs=a, rhs=b):
            return _add(_mul(_diff(a, v), b), _mul(a, _diff(b, v)))
        case Call(fn=f, args=args):
            out: Expr = Const(0)
            for p, a in zip(lookup(f).partials(*args), args):
                out = _add(out, _mul(p, _diff(a, v)))
            return out
        case _:
            raise TensorLangError(f"cannot differentiate {e!r}")


def _add(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(b, Const) and b.value == 0:
        return a
    return Add(a, b)


def _mul(a: Expr, b: Expr) -> Expr:
    if (isinstance(a, Const) and a.value == 0) or (isinstance(b, Const) and b.value == 0):
        return Const(0)
    if isinstance(a, Const) and a.value == 1:
        return b
    if isinstance(b, Const) and b.value == 1:
        return a
    return Mul(a, b)


def derivative_def(name: str) -> FunctionDef:
    """The black box ``D[f]`` of rule 6.6 (registered on first use)."""
    dname = derivative_name(name)
    fd = _REGISTRY.get(dname)
    if fd is not None:
        return fd
    base = lookup(name)
    k = base.arity
    xs = _placeholders(2 * k)
    args, tans = xs[:k], xs[k:]
    body = expand_derivative(name, args, tans)

    def run(exact):
        def impl(*vals):
            return _scalar_eval(body, dict(zip(xs, vals)), exact)

        return impl

    def partials(*actual):
        # d/dx_j D[f](x; t) = sum_k d_j(d_k f)(x)·t_k ;  d/dt_k D[f](x; t) = (d_k f)(x)
        from .ir.scope import subst

        mapping = dict(zip(xs, actual))
        wrt_x = tuple(subst(_diff(body, a), vals=mapping) for a in args)
        wrt_t = tuple(subst(p, vals=mapping) for p in base.partials(*args))
        return wrt_x + wrt_t

    return _REGISTRY.setdefault(dname, FunctionDef(dname, 2 * k, run(False), run(True), partials, domain=base.domain))
