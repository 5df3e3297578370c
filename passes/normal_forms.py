"""Checkers for the normal forms of paper Section 5 (RULES.md Section 4).

One predicate per pass post-condition; each is an independent reading of the
grammar printed in the paper, not a call into the pass:

* :func:`is_let_lifted`   Fig. 7 post-condition  ``Le ::= e | let x = e in Le``
* :func:`is_pair_free`    Fig. 8 post-condition  (pairs only as output tuples,
  projections only of inputs, no pair-typed intermediate)
* :func:`is_gen_pushed_out`  Fig. 9 post-condition (gens outermost, accesses
  of variables only)
* :func:`is_tensor_ssa`   Fig. 10, re-exported from :mod:`.ssa_form`

``why_not_*`` variants return a message naming the offending sub-term (or
None), for assertion messages in debug mode.
"""

from __future__ import annotations

import weakref

from tensorlang.errors import describe
from tensorlang.ir import (
    Access,
    Add,
    Call,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    PairT,
    Proj,
    Sum,
    TensorT,
    Var,
    lets,
    scalar_elem,
    walk,
)
from tensorlang.typecheck import type_of

from .ssa_form import is_tensor_ssa

__all__ = [
    "is_let_lifted",
    "is_pair_free",
    "is_gen_pushed_out",
    "is_tensor_ssa",
    "why_not_let_lifted",
    "why_not_pair_free",
    "why_not_gen_pushed_out",
]


def _exprs(e: Expr):
    return (x for x in walk(e) if isinstance(x, Expr))


# --------------------------------------------------------------------------
# Figure 7


def why_not_let_lifted(e: Expr):
    binds, res = lets(e)
    for x, v in binds + [(None, res)]:
        for sub in _exprs(v):
            if isinstance(sub, Let):
                return f"a let below the statement level: {describe(sub)}"
    return None


def is_let_lifted(e: Expr) -> bool:
    """``Le ::= e | let x = e in Le`` with ``e`` free of ``let``."""
    return why_not_let_lifted(e) is None


# --------------------------------------------------------------------------
# Figure 8


def _is_input_line(e: Expr) -> bool:
    """``Ie ::= π0 Ie | π1 Ie | x`` with x a free input."""
    while isinstance(e, Proj):
        e = e.arg
    return isinstance(e, Var) and e.uid == 0


def _has_pair_type(e: Expr) -> bool:
    return isinstance(scalar_elem(type_of(e)), PairT) or _aos(type_of(e))


def _aos(t) -> bool:
    while isinstance(t, TensorT):
        t = t.elem
        if isinstance(t, PairT):
            return True
    return False


def _pair_free_term(e: Expr):
    """``e`` without let, pair construction, projections outside ``Ie``, and
    with no pair-typed sub-term except input lines."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if _is_input_line(x):
            continue
        if isinstance(x, (Let, Pair)):
            return f"{type(x).__name__.lower()} inside a right-hand side: {describe(x)}"
        if isinstance(x, Proj):
            return f"a projection of a non-input: {describe(x)}"
        if _has_pair_type(x):
            return f"a pair-typed intermediate term: {describe(x)} : {type_of(x)}"
        for c in _expr_children(x):
            stack.append(c)
    return None


def _expr_children(x):
    match x:
        case Var() | Const():
            return ()
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b) | Pair(fst=a, snd=b):
            return (a, b)
        case Call(args=args):
            return args
        case Proj(arg=a) | Access(arr=a):
            return (a,)
        case Gen(body=b) | Sum(body=b) | Iverson(body=b):
            return (b,)
        case Let(value=a, body=b):
            return (a, b)
        case _:
            raise TypeError(f"not an expression: {x!r}")


def why_not_pair_free(e: Expr):
    binds, res = lets(e)
    for x, v in binds:
        if _has_pair_type(x):
            return f"the statement {x.name} has the pair type {x.type}"
        msg = _pair_free_term(v)
        if msg:
            return msg
    leaves = [res]
    while leaves:
        o = leaves.pop()
        if isinstance(o, Pair):
            leaves += [o.fst, o.snd]
            continue
        if _has_pair_type(o):
            return f"an output component of pair type: {describe(o)}"
        msg = _pair_free_term(o)
        if msg:
            return msg
    return None


def is_pair_free(e: Expr) -> bool:
    """Fig. 8 post-condition: ``Le ::= let x = e in Le | Oe``,
    ``Oe ::= (Oe, Oe) | e``; ``e`` has no let, no pair and projections only
    in input lines ``Ie``; every output component is pair-free too (pair
    inputs returned whole are expanded by the pass)."""
    return why_not_pair_free(e) is None


# --------------------------------------------------------------------------
# Figure 9


# _core's verdicts per node (a DAG-shared term is checked once, not once per
# path: the check runs on every program tl.compile is given); this module's
# own memo, keyed by the interned node (issue #14 item 4)
_CORE = (weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary())
_OK = ""


def _core(e: Expr, top: bool):
    """The class ``e`` of the gen-pushout grammar: scalar operations,
    sums, brackets and accesses of variables (``Ae``/``Ie``).  At the top of
    a right-hand side, ``[p]·X`` of a tensor variable is also accepted."""
    memo = _CORE[top]
    got = memo.get(e)
    if got is None:
        got = memo[e] = _core_of(e, top) or _OK
    return got or None


def _core_of(e: Expr, top: bool):
    match e:
        case Const():
            return None
        case Var():
            return None
        case Proj():
            return None if _is_input_line(e) else f"a projection of a non-input: {describe(e)}"
        case Access():
            base = e
            while isinstance(base, Access):
                base = base.arr
            if isinstance(base, Var) or _is_input_line(base):
                return None
            return f"an access of a non-variable: {describe(e)}"
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
            return _core(a, False) or _core(b, False)
        case Call(args=args):
            for a in args:
                msg = _core(a, False)
                if msg:
                    return msg
            return None
        case Sum(body=b):
            return _core(b, False)
        case Iverson(body=b):
            if isinstance(b, (Iverson, Gen)):
                return f"a bracket on a bracket or gen (5.23/5.24 apply): {describe(e)}"
            return _core(b, top)
        case Gen():
            return f"a gen below the top of a right-hand side: {describe(e)}"
        case Let() | Pair():
            return f"{type(e).__name__.lower()} inside a right-hand side: {describe(e)}"
        case _:
            raise TypeError(f"not an expression: {e!r}")


def _ge(e: Expr):
    """``Ge ::= gen[i:n] Ge | e``."""
    while isinstance(e, Gen):
        e = e.body
    msg = _core(e, True)
    if msg:
        return msg
    # below the gens, only a bracketed variable may still be tensor-valued
    if isinstance(type_of(e), TensorT):
        inner = e
        while isinstance(inner, Iverson):
            inner = inner.body
        base = inner
        while isinstance(base, Access):
            base = base.arr
        if not (isinstance(base, Var) or _is_input_line(base)):
            return f"a tensor-valued term below the gens: {describe(e)}"
    return None


def why_not_gen_pushed_out(e: Expr):
    binds, res = lets(e)
    for x, v in binds:
        msg = _ge(v)
        if msg:
            return msg
    outs = [res]
    while outs:
        o = outs.pop()
        if isinstance(o, Pair):
            outs += [o.fst, o.snd]
            continue
        msg = _ge(o)
        if msg:
            return msg
    return None


def is_gen_pushed_out(e: Expr) -> bool:
    """Fig. 9 post-condition (RULES.md's reading of the grammar):
    ``Le ::= let x = Ge in Le | Oe``, ``Ge ::= gen[i:n] Ge | e``,
    ``Oe ::= (Oe, Oe) | Ge``; ``e`` consists of constants, ``+``, ``·``,
    ``f(…)``, ``sum``, ``[p]·`` and accesses of variables only."""
    return why_not_gen_pushed_out(e) is None
