"""Value conditionals: ``tl.where``, ``tl.maximum``, ``tl.minimum``, ``tl.abs``,
``tl.relu`` and ``tl.softplus`` (issue #17 item 4).

The paper's language has no value-dependent control flow: predicates compare
affine indices (Fig. 3, rule 4.18), and data-dependent sparsity is a
relation.  A value conditional is instead a *black-box scalar function*
``f(e0, …)`` of Fig. 3, registered in :mod:`tensorlang.functions` with a
NumPy, a sympy and a Numba implementation and its partial derivatives as IR
expressions.  Every stage then handles it with no per-function case:

* evaluation is rule 4.5 (float, and exact over sympy: ``Max``, ``Min``,
  ``Abs``, ``Piecewise``);
* the cost model counts one application (rule 4.26);
* the total derivative is rule 6.6, ``D⟦f(e…)⟧σ = D[f](e…; de…)``, one
  black-box application whose expansion ``Σ_k (∂_k f)(e…)·de_k`` comes from
  the partials below; the adjoint is rule 6.47, ``D[f]`` with a one-hot
  tangent;
* the backend compiles ``FunctionDef.numba`` (branch-free selects: ``x if c
  else y`` becomes an LLVM ``select``).

``tl.where(a > b, e1, e2)`` is ``select_gt(a, b, e1, e2)``, and ``a >= b``
is ``select_ge``; ``a < b`` and ``a <= b`` swap the operands.  The condition
is a :class:`Comparison` of two real scalars, built by the operators
``> >= < <=`` on scalar expressions or by ``tl.gt/ge/lt/le``.

Derivatives at ties (subgradient convention), chosen to match JAX (checked
against jax 0.10: ``jax.grad`` of ``jnp.maximum``, ``jnp.abs``,
``jax.nn.relu``, ``jax.nn.softplus``, ``jnp.where``):

* ``maximum(a, b)`` and ``minimum(a, b)`` at ``a == b``: ``0.5`` to each
  argument (so ``d maximum(x, x)/dx = 1``);
* ``abs'(0) = 1`` (JAX differentiates ``abs`` as ``x >= 0 ? g : -g``);
* ``relu'(0) = 0``;
* ``softplus`` is smooth: ``softplus'(x) = sigmoid(x)``, ``0.5`` at 0;
* ``where(a > b, e1, e2)`` at ``a == b`` takes ``e2`` and its derivative;
  ``where(a >= b, …)`` takes ``e1``; the derivative with respect to the
  compared values ``a``, ``b`` is zero (the condition is piecewise constant).

NaN follows NumPy: ``maximum``/``minimum``/``relu``/``abs``/``softplus``
propagate it; a comparison with NaN is false, so ``where`` takes ``e2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .ir import as_expr as _lift
from .errors import TensorLangError, TypeCheckError, describe
from .functions import FunctionDef, register, sympy_module as _sp
from .ir import REAL, Call, Const, Expr, Pred
from .typecheck import type_of


def _c(name: str, *args: Expr) -> Expr:
    return Call(name, tuple(args))


def _one():  # built on use: interned nodes are held weakly, and this module keeps none alive
    return Const(1)


def _zero():
    return Const(0)


# -- the selects: where(a > b, e1, e2) and where(a >= b, e1, e2) ------------------


def _select_gt_nb(a, b, e1, e2):
    return e1 if a > b else e2


def _select_ge_nb(a, b, e1, e2):
    return e1 if a >= b else e2


def _select_partials(name):
    # ∂/∂a = ∂/∂b = 0 (the condition is piecewise constant); ∂/∂e1 is the
    # indicator of the condition, ∂/∂e2 its complement (a select, not
    # 1 - indicator, so NaN conditions send the derivative where the value went)
    return lambda a, b, e1, e2: (_zero(), _zero(), _c(name, a, b, _one(), _zero()), _c(name, a, b, _zero(), _one()))


register(FunctionDef(
    "select_gt", 4,
    lambda a, b, e1, e2: np.where(np.greater(a, b), e1, e2),
    lambda a, b, e1, e2: _sp().Piecewise((e1, _sp().Gt(a, b)), (e2, True)),
    _select_partials("select_gt"),
    numba=_select_gt_nb,
))
register(FunctionDef(
    "select_ge", 4,
    lambda a, b, e1, e2: np.where(np.greater_equal(a, b), e1, e2),
    lambda a, b, e1, e2: _sp().Piecewise((e1, _sp().Ge(a, b)), (e2, True)),
    _select_partials("select_ge"),
    numba=_select_ge_nb,
))


def _tie_half(a, b):
    """∂ max(a, b)/∂a: 1 where a > b, 0.5 where a == b (JAX), else 0."""
    return _c("select_gt", a, b, _one(), _c("select_ge", a, b, Const(0.5), _zero()))


# -- maximum, minimum, abs, relu, softplus --------------------------------------------


def _maximum_nb(a, b):
    return a if (a > b or a != a) else b  # NaN in either argument propagates, as np.maximum


def _minimum_nb(a, b):
    return a if (a < b or a != a) else b


def _abs_nb(a):
    return math.fabs(a)


def _relu_nb(a):
    return a if (a > 0.0 or a != a) else 0.0


def _softplus_nb(a):
    # log(1 + e^a) = log1p(e^-|a|) + max(a, 0): no overflow for large |a|
    return math.log1p(math.exp(-math.fabs(a))) + (a if a > 0.0 else 0.0)


def _softplus_np(a):
    return np.log1p(np.exp(-np.abs(a))) + np.maximum(a, 0.0)


register(FunctionDef(
    "maximum", 2, np.maximum, lambda a, b: _sp().Max(a, b),
    lambda a, b: (_tie_half(a, b), _tie_half(b, a)),
    numba=_maximum_nb,
))
register(FunctionDef(
    "minimum", 2, np.minimum, lambda a, b: _sp().Min(a, b),
    lambda a, b: (_tie_half(b, a), _tie_half(a, b)),
    numba=_minimum_nb,
))
register(FunctionDef(
    "abs", 1, np.abs, lambda a: _sp().Abs(a),
    lambda a: (_c("select_ge", a, _zero(), _one(), Const(-1)),),  # abs'(0) = 1, as JAX
    numba=_abs_nb,
))
register(FunctionDef(
    "relu", 1, lambda a: np.maximum(a, 0.0), lambda a: _sp().Max(a, 0),
    lambda a: (_c("select_gt", a, _zero(), _one(), _zero()),),  # relu'(0) = 0, as JAX
    numba=_relu_nb,
))
register(FunctionDef(
    "softplus", 1, _softplus_np, lambda a: _sp().log(1 + _sp().exp(a)),
    lambda a: (_c("sigmoid", a),),
    numba=_softplus_nb,
))


# -- the API --------------------------------------------------------------------------


def _scalar(x, what: str) -> Expr:
    e = _lift(x)
    t = type_of(e)
    if t is not REAL:
        raise TypeCheckError(
            f"{what} must be a real scalar, but {describe(e)} has type {t}; "
            "apply it elementwise inside tl.gen, e.g. tl.gen(n, lambda i: tl.relu(x[i]))"
        )
    return e


def _call(name: str, *args: Expr) -> Expr:
    out = Call(name, tuple(args))
    type_of(out)
    return out


@dataclass(frozen=True, eq=False)
class Comparison:
    """``lhs > rhs`` (``strict``) or ``lhs >= rhs`` of two real scalars: the
    condition of :func:`where`.  Not a predicate (predicates compare indices)
    and not a value: it has no truth value in Python."""

    strict: bool
    lhs: Expr
    rhs: Expr

    def __repr__(self):
        return f"{self.lhs} {'>' if self.strict else '>='} {self.rhs}"

    def __bool__(self):
        raise TensorLangError(
            f"the value comparison {self!r} is symbolic and has no Python truth value; "
            "use it as the condition of tl.where(cond, e1, e2)"
        )

    def _no_logic(self, other=None):
        raise TensorLangError(
            f"value comparisons do not combine with & | ~ (in {self!r}); nest tl.where instead, "
            "e.g. tl.where(a > b, tl.where(c > d, e1, e2), e2) for (a > b) & (c > d), "
            "or swap the branches for a negation"
        )

    __and__ = __rand__ = __or__ = __ror__ = __invert__ = _no_logic


def compare(op: str, a, b) -> Comparison:
    """``a op b`` for op in ``> >= < <=`` of two real scalars (the operators of
    scalar expressions call this)."""
    if op not in (">", ">=", "<", "<="):
        raise TensorLangError(f"unknown value comparison {op!r}; use one of > >= < <=")
    lhs = _scalar(a, f"the left side of the value comparison {op}")
    rhs = _scalar(b, f"the right side of the value comparison {op}")
    if op in ("<", "<="):
        lhs, rhs = rhs, lhs
    return Comparison(op in (">", "<"), lhs, rhs)


def gt(a, b) -> Comparison:
    """``a > b`` (also written with the operator on a scalar expression)."""
    return compare(">", a, b)


def ge(a, b) -> Comparison:
    return compare(">=", a, b)


def lt(a, b) -> Comparison:
    return compare("<", a, b)


def le(a, b) -> Comparison:
    return compare("<=", a, b)


def where(cond, e1, e2) -> Expr:
    """``e1`` where the value comparison ``cond`` holds, else ``e2`` (scalars).

    ``tl.where(a > b, e1, e2)`` is the black box ``select_gt(a, b, e1, e2)``;
    its derivative flows into the branch taken (none into ``a``, ``b``)."""
    if isinstance(cond, Pred):
        raise TensorLangError(
            f"tl.where takes a comparison of real values, but {cond} is an index predicate; "
            "write tl.iverson(p, e1) + tl.iverson(q, e2) with q the complement of p"
        )
    if not isinstance(cond, Comparison):
        raise TensorLangError(
            f"the condition of tl.where must be a value comparison such as x[i] > 0 or tl.gt(a, b), "
            f"got {type(cond).__name__} {cond!r}"
        )
    t = _scalar(e1, "the first branch of tl.where")
    f = _scalar(e2, "the second branch of tl.where")
    return _call("select_gt" if cond.strict else "select_ge", cond.lhs, cond.rhs, t, f)


def maximum(a, b) -> Expr:
    """``max(a, b)``; the derivative splits 0.5/0.5 at ties (JAX's convention)."""
    return _call("maximum", _scalar(a, "the first argument of tl.maximum"), _scalar(b, "the second argument of tl.maximum"))


def minimum(a, b) -> Expr:
    """``min(a, b)``; the derivative splits 0.5/0.5 at ties (JAX's convention)."""
    return _call("minimum", _scalar(a, "the first argument of tl.minimum"), _scalar(b, "the second argument of tl.minimum"))


def abs(a) -> Expr:  # noqa: A001 - tl.abs, as np.abs
    """``|a|``; ``abs'(0) = 1`` (JAX's convention)."""
    return _call("abs", _scalar(a, "the argument of tl.abs"))


def relu(a) -> Expr:
    """``max(a, 0)``; ``relu'(0) = 0`` (JAX's convention)."""
    return _call("relu", _scalar(a, "the argument of tl.relu"))


def softplus(a) -> Expr:
    """``log(1 + exp(a))``, evaluated stably as ``log1p(exp(-|a|)) + max(a, 0)``;
    its derivative is ``sigmoid(a)``."""
    return _call("softplus", _scalar(a, "the argument of tl.softplus"))
