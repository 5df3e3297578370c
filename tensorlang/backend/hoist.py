"""Bracket hoisting and sub-term occurrence counts for the lowering (paper Fig. 4).

``[p]·e`` is zero where ``p`` fails (rule 4.12), so in a product the
bracket may move outwards: ``[p]·a · [q]·b = [p ∧ q]·(a·b)``; nested
brackets merge; ``[p]·a + [q]·b`` gains an outer ``[p ∨ q]`` (zero where
both fail).  An outer bracket then narrows the enclosing loops.  (With
non-finite intermediate values, ``0·inf`` in the evaluator is NaN while the
hoisted form gives 0; inputs are finite, so this only concerns programs
whose black-box functions overflow.)
"""

from __future__ import annotations

from ..errors import UnsupportedError, describe
from ..ir import TRUE, Access, Add, BoolLit, Call, Const, Expr, Gen, Iverson, Let, Mul, Or, Proj, Sum, Var, conj, conjuncts


def split_bracket(e: Expr):
    if isinstance(e, Iverson):
        return e.pred, e.body
    return TRUE, e


def hoist(e: Expr, memo=None) -> Expr:
    """Signature: hoist : Expr -> Expr (scalar); brackets rise through ``*``,
    nested brackets merge, ``[p]a + [q]b`` gains an outer ``[p ∨ q]``."""
    memo = {} if memo is None else memo
    got = memo.get(e)
    if got is not None:
        return got
    match e:
        case Const() | Var() | Proj() | Access():
            out = e
        case Mul(lhs=a, rhs=b):
            pa, a2 = split_bracket(hoist(a, memo))
            pb, b2 = split_bracket(hoist(b, memo))
            out = _bracket(_and(pa, pb), Mul(a2, b2))
        case Iverson(pred=p, body=b):
            q, b2 = split_bracket(hoist(b, memo))
            out = _bracket(_and(p, q), b2)
        case Add(lhs=a, rhs=b):
            a1, b1 = hoist(a, memo), hoist(b, memo)
            pa, a2 = split_bracket(a1)
            pb, b2 = split_bracket(b1)
            if pa is not TRUE and pa is pb:
                out = _bracket(pa, Add(a2, b2))
            elif pa is not TRUE and pb is not TRUE:
                out = Iverson(Or(pa, pb), Add(a1, b1))
            else:
                out = Add(a1, b1)
        case Call(fn=f, args=args):
            out = Call(f, tuple(hoist(a, memo) for a in args))
        case Sum(var=i, extent=n, body=b):
            out = Sum(i, n, hoist(b, memo))
        case Gen(var=i, extent=n, body=b):  # the value of a tensor let under a loop
            out = Gen(i, n, hoist(b, memo))
        case Let(var=v, value=e0, body=e1):
            out = Let(v, hoist(e0, memo), hoist(e1, memo))
        case _:
            raise UnsupportedError(f"the backend cannot lower {describe(e)}")
    memo[e] = out
    return out


def _and(p, q):
    """``p ∧ q`` without repeating a conjunct (``[p]·[p]·e`` is ``[p]·e``)."""
    if p is q:
        return p
    seen = set()
    parts = []
    for c in conjuncts(p) + conjuncts(q):
        if id(c) not in seen:
            seen.add(id(c))
            parts.append(c)
    return conj(*parts)




def _bracket(p, e):
    if p is TRUE:
        return e
    if isinstance(p, BoolLit):  # FALSE
        return Const(0)
    return Iverson(p, e)


def occurrences(e: Expr) -> dict:
    """Number of tree occurrences of each sub-term (a DAG node may occur many times)."""
    counts: dict = {}

    def go(x, k):
        counts[x] = counts.get(x, 0) + k
        if counts[x] > k:  # children already counted once per earlier visit
            return
        for c in _subterms(x):
            go(c, 1)

    go(e, 1)
    return counts


def _subterms(x):
    match x:
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b) | Let(value=a, body=b):
            return (a, b)
        case Call(args=args):
            return args
        case Sum(body=b) | Iverson(body=b) | Gen(body=b):
            return (b,)
        case _:
            return ()


