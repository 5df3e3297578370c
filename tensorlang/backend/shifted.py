"""Fusion of a 1-D producer read at constant shifts (issue #13 item 2, #17).

``X = gen[i:n] s`` with every use an access ``X[j + c]``, ``j`` the one
binder around the use (a 1-D consumer: under an outer binder too, ``s``
would be computed again for each of the outer points; a use under a
shadowing binder of the same index is under two binders, so not this case)
and ``c`` a small constant, is substituted into its
consumers (``fusion.fuse``) when ``s`` is cheap (``MAX_OPS`` arithmetic
nodes at most, ``MAX_SITES`` uses at most, ``MAX_SHIFT`` at most away from
``j``).  The decision is taken on the typed IR nodes (affine index terms),
never on text.

Alone, this recomputes ``s`` once per shift: the stencil ``X[j - 1]``,
``X[j]`` evaluates ``s`` twice per point.  The loop-IR pass ``roll.py``
takes that back in the interior loop the lowering makes (its body
straight-line): ``s`` at ``j + 1`` is computed once per iteration and the
values at ``j`` and ``j - 1`` are the previous iterations' (rolling
scalars), the same expression on the same inputs, so the results are
bit-identical.  What rolling cannot take back (the peeled border points, a
guarded interior) is bounded by the limits here: a few cheap operations per
point instead of a store and a load of an n-array per point.
"""

from __future__ import annotations

from ..ir import Access, Add, Call, Expr, Gen, Iverson, Let, Mul, Sum, accesses, children

MAX_OPS = 12  # arithmetic nodes (+, *, calls) of the producer's body
MAX_SITES = 6  # uses of the producer
MAX_SHIFT = 2  # |c| in X[j + c]
MAX_OFFSETS = 3  # distinct shifts per consumer binding


def ops(e: Expr) -> int:
    """Arithmetic nodes of a scalar body (a tree count: a shared node twice)."""
    match e:
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
            return 1 + ops(a) + ops(b)
        case Call(args=args):
            return 1 + sum(ops(a) for a in args)
        case Let(value=v, body=b):
            return ops(v) + ops(b)
        case Iverson(body=b):
            return ops(b)
        case Sum() | Gen():
            return MAX_OPS + 1  # a reduction is not cheap
    return 0


def _shift(site):
    """``c`` when the site's index is ``j + c`` with ``j`` its innermost binder, else None."""
    idx, binders, _ = site
    if len(idx) != 1 or len(binders) != 1:
        return None  # under an outer binder too, the producer would be recomputed for each of its points
    a = idx[0]
    terms = getattr(a, "terms", None)
    if terms is None or len(terms) != 1:
        return None
    (s, k), = terms
    if k != 1 or s is not binders[-1][0]:
        return None
    c = a.const
    return c if abs(c) <= MAX_SHIFT else None


def _in_sums(e: Expr, x, inner, out: list) -> list:
    """For each access of ``x`` in ``e``: whether its innermost binder is a sum's."""
    match e:
        case Access():
            base, _ = accesses(e)
            if base is x:
                out.append(inner)
            return out
        case Gen(body=b):
            return _in_sums(b, x, False, out)
        case Sum(body=b):
            return _in_sums(b, x, True, out)
    for c in children(e):
        for y in (c if isinstance(c, tuple) else (c,)):
            if isinstance(y, Expr):
                _in_sums(y, x, inner, out)
    return out


def shifted_uses(g, body, acc, x=None, consumers=()) -> bool:
    """Whether ``X = gen[g] body`` with the uses ``acc`` (``fusion._Uses``)
    is a cheap 1-D producer read only at small constant shifts (module doc),
    each use's innermost binder a gen's (``consumers``: the right-hand sides
    after ``X``).  Not into a sum: a reduction loop runs in scalar order
    (its additions are not reassociated), a gen loop's body vectorizes, so
    the producer's work costs more inside the sum than in its own loop
    (measured on the Burgers reverse step: 1.1 ms against 0.6 ms per 10⁶
    points for the flux and its reduction)."""
    if len(g) != 1 or acc.other or not acc.sites or len(acc.sites) > MAX_SITES or ops(body) > MAX_OPS:
        return False
    if x is not None and any(any(_in_sums(r, x, False, [])) for r in consumers):
        return False
    offsets: dict = {}
    for site in acc.sites:
        c = _shift(site)
        if c is None:
            return False
        offsets.setdefault(id(site[1][-1][0]), set()).add(c)
    return all(len(cs) <= MAX_OFFSETS for cs in offsets.values())


__all__ = ["shifted_uses", "ops", "MAX_OPS", "MAX_SITES", "MAX_SHIFT"]
