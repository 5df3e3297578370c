"""Bounded expressions: deep or long float arithmetic split into locals.

Python refuses source nested beyond ~200 parentheses and compiles very long
operator chains recursively, so a program nested hundreds deep or a sum of
thousands of terms cannot be one Python expression (paper Section 4.3 says
nothing about it; it is a limit of the target).  :func:`bound_depth`
rewrites each statement's float expression (kernel IR, ``kir.py``) so that
no expression nests deeper than ``MAX_DEPTH`` and no sum has more than
``MAX_TERMS`` terms: deeper sub-expressions are computed first into fresh
locals, long sums accumulate chunk by chunk.  Only float arithmetic is
split: boolean and index expressions (whose later operands may rely on the
short-circuit of earlier ones) are leaves here.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import AccAdd, Assign, If, Loop, Store

MAX_DEPTH = 16
MAX_TERMS = 32


def bound_depth(stmts, fresh) -> list:
    """Signature: bound_depth : [stmt] -> [stmt]; ``fresh()`` makes a local name."""
    out = []
    for s in stmts:
        match s:
            case Loop(body=b):
                out.append(replace(s, body=tuple(bound_depth(b, fresh))))
            case If(then=t, orelse=e):
                out.append(replace(s, then=tuple(bound_depth(t, fresh)), orelse=tuple(bound_depth(e, fresh))))
            case Assign(value=v) | AccAdd(value=v) | Store(value=v):
                pre: list = []
                v2, _ = _shallow(v, pre, fresh)
                out.extend(pre)
                out.append(replace(s, value=v2))
            case _:
                out.append(s)
    return out


def _bind(e, pre, fresh):
    name = fresh()
    pre.append(Assign(name, e))
    return K.Name(name), 1


def _shallow(e, pre, fresh):
    """(e', depth of e') with the sub-expressions of ``e`` bound as needed."""
    match e:
        case K.FSum(terms=ts):
            parts = [_shallow(t, pre, fresh) for t in ts]
            if len(parts) > MAX_TERMS:
                name = fresh()
                for k in range(0, len(parts), MAX_TERMS):
                    chunk = K.FSum(tuple(p for p, _ in parts[k:k + MAX_TERMS]))
                    pre.append(Assign(name, chunk) if k == 0 else AccAdd(name, chunk))
                return K.Name(name), 1
            out, d = K.FSum(tuple(p for p, _ in parts)), 1 + max(d for _, d in parts)
        case K.FMul(lhs=a, rhs=b) | K.FDiv(lhs=a, rhs=b):
            (a2, da), (b2, db) = _shallow(a, pre, fresh), _shallow(b, pre, fresh)
            out, d = type(e)(a2, b2), 1 + max(da, db)
        case K.FNeg(arg=a):
            a2, da = _shallow(a, pre, fresh)
            out, d = K.FNeg(a2), 1 + da
        case K.FPow(base=a, exponent=k):
            a2, da = _shallow(a, pre, fresh)
            out, d = K.FPow(a2, k), 1 + da
        case K.FCall(fn=f, args=args, numpy=np_):
            parts = [_shallow(a, pre, fresh) for a in args]
            out, d = K.FCall(f, tuple(p for p, _ in parts), np_), 1 + max((d for _, d in parts), default=0)
        case _:
            return e, 1
    if d >= MAX_DEPTH:
        return _bind(out, pre, fresh)
    return out, d
