"""The value conditionals' scalar built-ins as intrinsics (paper Section 4.3:
a kernel's scalar functions; issue #14 item 6: compile latency; the functions
conditionals.py registers).

A registered scalar function is a separate ``numba.njit`` compilation when a
kernel module is imported (``scalars.kernel_function``: about 0.03 s each on a
cold first call, and the Burgers step calls four: ``maximum``, ``minimum``,
``select_ge``, ``select_gt``).  The ones below are a comparison and a select:
each is typed and lowered here straight into the calling kernel's LLVM
(``type_callable``/``lower_builtin``, as intrinsics.py), with Numba's own
comparison and conversion code (``context.generic_compare``,
``context.cast``), so nothing is compiled on its own.

Each stays the plain Python function conditionals.py registers (the
kernels' plain-Python runs call it as it is); ``kernel_function`` takes the
intrinsic only when the function registered under that name is that very
function, so a user's replacement (``register(..., replace=True)``) keeps
its own compilation.  The typing is that of the Python function in Numba:
the result type unifies the returned operands, the comparison is made on
the compared operands' unified type.
"""

from __future__ import annotations

import math
import operator

from numba import types
from numba.extending import lower_builtin, type_callable

from .. import conditionals as C


_NUMBER = (types.Float, types.Integer, types.Boolean)


def _numbers(*tys) -> bool:
    return all(isinstance(t, _NUMBER) for t in tys)


def _compare(context, builder, op, ta, a, tb, b):
    """``a op b`` as Numba compares two numbers of these types."""
    t = context.typing_context.unify_types(ta, tb)
    a, b = context.cast(builder, a, ta, t), context.cast(builder, b, tb, t)
    return context.generic_compare(builder, op, (t, t), (a, b))


def _chosen(context, builder, cond, tx, x, ty, y, t):
    return builder.select(cond, context.cast(builder, x, tx, t), context.cast(builder, y, ty, t))


def _extremum(op):
    """``a if (a op b or a != a) else b``: maximum (``>``) and minimum (``<``)."""
    def typer(context):
        def typ(a, b):
            return context.unify_types(a, b) if _numbers(a, b) else None
        return typ

    def lower(context, builder, sig, args):
        (ta, tb), (a, b) = sig.args, args
        cond = builder.or_(_compare(context, builder, op, ta, a, tb, b),
                           _compare(context, builder, operator.ne, ta, a, ta, a))
        return _chosen(context, builder, cond, ta, a, tb, b, sig.return_type)
    return typer, lower


def _select(op):
    """``e1 if a op b else e2``."""
    def typer(context):
        def typ(a, b, e1, e2):
            return context.unify_types(e1, e2) if _numbers(a, b, e1, e2) else None
        return typ

    def lower(context, builder, sig, args):
        (ta, tb, t1, t2), (a, b, e1, e2) = sig.args, args
        cond = _compare(context, builder, op, ta, a, tb, b)
        return _chosen(context, builder, cond, t1, e1, t2, e2, sig.return_type)
    return typer, lower


def _relu_rule():
    def typer(context):
        def typ(a):
            return context.unify_types(a, types.float64) if _numbers(a) else None
        return typ

    def lower(context, builder, sig, args):
        (ta,), (a,) = sig.args, args
        zero = context.get_constant(types.float64, 0.0)
        cond = builder.or_(_compare(context, builder, operator.gt, ta, a, types.float64, zero),
                           _compare(context, builder, operator.ne, ta, a, ta, a))
        return _chosen(context, builder, cond, ta, a, types.float64, zero, sig.return_type)
    return typer, lower


def _abs_rule():
    def typer(context):
        def typ(a):
            if not _numbers(a):
                return None
            return context.resolve_function_type(math.fabs, (a,), {}).return_type
        return typ

    def lower(context, builder, sig, args):
        fabs = context.typing_context.resolve_function_type(math.fabs, sig.args, {})
        return context.get_function(math.fabs, fabs)(builder, args)
    return typer, lower


INTRINSICS = {  # registered name -> (its built-in implementation, typed and lowered here, its rules, arity)
    "maximum": (C._maximum_nb, _extremum(operator.gt), 2),
    "minimum": (C._minimum_nb, _extremum(operator.lt), 2),
    "relu": (C._relu_nb, _relu_rule(), 1),
    "select_gt": (C._select_gt_nb, _select(operator.gt), 4),
    "select_ge": (C._select_ge_nb, _select(operator.ge), 4),
    "abs": (C._abs_nb, _abs_rule(), 1),
}

for _name, (_fn, (_typer, _lower), _arity) in INTRINSICS.items():
    type_callable(_fn)(_typer)
    lower_builtin(_fn, *([types.Any] * _arity))(_lower)


def intrinsic_for(name: str, impl):
    """The intrinsic standing for ``impl``, the function registered as ``name``, when it
    is the built-in implementation itself (module doc); else None."""
    got = INTRINSICS.get(name)
    return got[0] if got is not None and got[0] is impl else None


__all__ = ["INTRINSICS", "intrinsic_for"]
