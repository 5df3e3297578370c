"""Reuse of stored elements across bindings (paper Section 4.3, tensor SSA with CSE).

Hash-consing shares equal sub-terms *within* an expression; across the
bindings of a let-block the same element expression can still be computed
twice.  The adjoint is where this happens: the forward pass stores
``H = gen[i, j] tanh(t[i, j])`` and the derivative of ``tanh`` at the same
point, ``D[tanh](t[i, j], dH[i, j]) = (1 - tanh(t[i, j])²)·dH[i, j]``,
evaluates ``tanh(t[i, j])`` again (a libm call per element, the MLP
gradient's largest cost after its matrix products).

The lowering records the body of every top-level gen binding it stores as a
whole dense array, with the gen's indices replaced by fixed placeholders
(:func:`canonical`), keyed by the gen's extents.  In a later top-level gen
binding over the same extents, a compound scalar sub-term (a function call,
sum or product, reached through ``+``, ``·``, calls and brackets, the
derivative calls expanded) whose canonical form was stored is replaced by a
read of the stored array at the current indices (:func:`reuse`): the stored
element is exactly that value, computed at the same point from the same
inputs (bindings are immutable).  Sub-terms binding indices of their own
(sums) are left alone.
"""

from __future__ import annotations

from ..functions import expand_derivative
from ..ir import Add, Call, IndexVar, Iverson, Mul, access, free_indices
from ..ir.scope import subst

_PLACE = tuple(IndexVar("_e", -1_000_000 - k) for k in range(8))


def extents_key(gb) -> tuple:
    return tuple((n.terms, n.const) for _, n in gb)


def canonical(gb, e):
    """``e`` with the gen indices of ``gb`` replaced by placeholders (by position)."""
    if len(gb) > len(_PLACE):
        return None
    return subst(e, idx={v: _PLACE[k] for k, (v, _) in enumerate(gb)})


def reuse(gb, body, stored: dict):
    """``body`` with every compound sub-term stored by an earlier binding over
    the same extents (``stored``: (extents key, canonical term) -> array Var)
    replaced by a read of that array at the gen's indices."""
    if not stored or len(gb) > len(_PLACE):
        return body
    key = extents_key(gb)
    mine = {v for v, _ in gb}
    at = [v for v, _ in gb]
    memo: dict = {}

    def go(e):
        got = memo.get(e)
        if got is not None:
            return got
        out = e
        if isinstance(e, (Call, Add, Mul)) and free_indices(e) <= mine:
            x = stored.get((key, canonical(gb, e)))
            if x is not None:
                memo[e] = out = access(x, at)
                return out
        match e:
            case Call(fn=f, args=args) if f.startswith("D[") and f.endswith("]"):
                k = len(args) // 2
                out = go(expand_derivative(f[2:-1], args[:k], args[k:]))
            case Call(fn=f, args=args):
                new = tuple(go(a) for a in args)
                out = e if all(a is b for a, b in zip(new, args)) else Call(f, new)
            case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
                a2, b2 = go(a), go(b)
                out = e if (a2 is a and b2 is b) else type(e)(a2, b2)
            case Iverson(pred=p, body=b):
                b2 = go(b)
                out = e if b2 is b else Iverson(p, b2)
        memo[e] = out
        return out

    return go(body)


__all__ = ["canonical", "reuse", "extents_key"]
