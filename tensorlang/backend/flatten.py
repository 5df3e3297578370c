"""Flattening user programs into the backend's input grammar.

A small subset of the normal-form passes (paper Section 5: let-lifting,
Fig. 7; gen pushout, Fig. 9), enough that everyday programs compile even
without ``tl.normalize``:

* a closed tensor-valued ``let`` (no free index variables) is lifted to the
  top-level let-block (5.1-5.10); a scalar ``let`` stays (it becomes a
  scalar local in the kernel);
* ``(gen[i:n] e)[a]`` becomes ``e[i := a]`` (rule 4.7 then 4.11: the access
  selects one element; this never adds work, and the evaluator would compute
  the whole generator);
* ``[p]·gen[i:n] e`` becomes ``gen[i:n] [p]·e`` (5.21-5.24);
* ``π_k (e0, e1)`` becomes ``e_k``; a tensor-valued right-hand side that is
  not a generator is eta-expanded (``A[0]`` -> ``gen[j:n] A[0][j]``).

Anything else is left alone (the caller then reports UnsupportedError).
"""

from __future__ import annotations

from ..errors import UnsupportedError, describe
from ..ir import (
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
    Proj,
    RealT,
    Sum,
    TensorT,
    Var,
    accesses,
    fresh_index,
    fresh_var,
    free_indices,
    make_lets,
    subst,
    sym_aff,
)
from ..typecheck import type_of


def flatten(expr: Expr) -> Expr:
    """Signature: flatten : Expr -> Expr (a let-block; see module doc)."""
    binds: list = []
    out = _top(expr, binds)
    return make_lets(binds, out)


def _top(e: Expr, binds: list) -> Expr:
    while isinstance(e, Let):
        binds.append((e.var, _rhs(e.value, binds)))
        e = e.body
    if isinstance(e, Pair):
        return Pair(_top(e.fst, binds), _top(e.snd, binds))
    return _rhs(e, binds)


def _rhs(e: Expr, binds: list) -> Expr:
    """A right-hand side: gens of a scalar, or an alias."""
    match e:
        case Let(var=v, value=e0, body=e1):
            binds.append((v, _rhs(e0, binds)))
            return _rhs(e1, binds)
        case Gen(var=i, extent=n, body=b):
            return Gen(i, n, _rhs(b, binds))
        case Iverson(pred=p, body=Gen(var=i, extent=n, body=b)):
            if i in free_indices(p):
                j = fresh_index(i.name)
                b = subst(b, idx={i: sym_aff(j)})
                i = j
            return _rhs(Gen(i, n, Iverson(p, b)), binds)
        case Var() | Proj() if _alias(e):
            return e
        case Proj(index=k, arg=Pair(fst=a, snd=b)):
            return _rhs(a if k == 0 else b, binds)
        case Pair():
            return e  # a pair-valued binding: left for the caller to refuse
    t = type_of(e)
    if isinstance(t, TensorT):
        j = fresh_index("j")
        return _rhs(Gen(j, t.extent, Access(e, sym_aff(j))), binds)
    if not isinstance(t, RealT):
        return e
    return _scalar(e, binds, {})


def _alias(e: Expr) -> bool:
    while isinstance(e, Proj):
        e = e.arg
    return isinstance(e, Var)


def _scalar(e: Expr, binds: list, memo: dict) -> Expr:
    """Signature: _scalar : Expr -> Expr (a scalar expression in the grammar)."""
    got = memo.get(e)
    if got is not None:
        return got
    match e:
        case Const() | Var():
            out = e
        case Proj(index=k, arg=a):
            a2 = _value(a, binds, memo)
            out = (a2.fst if k == 0 else a2.snd) if isinstance(a2, Pair) else Proj(k, a2)
        case Add(lhs=a, rhs=b):
            out = Add(_scalar(a, binds, memo), _scalar(b, binds, memo))
        case Mul(lhs=a, rhs=b):
            out = Mul(_scalar(a, binds, memo), _scalar(b, binds, memo))
        case Call(fn=f, args=args):
            out = Call(f, tuple(_scalar(a, binds, memo) for a in args))
        case Sum(var=i, extent=n, body=b):
            out = Sum(i, n, _scalar(b, binds, memo))
        case Iverson(pred=p, body=b):
            out = Iverson(p, _scalar(b, binds, memo))
        case Let(var=v, value=e0, body=e1):
            if isinstance(v.type, RealT):
                out = Let(v, _scalar(e0, binds, memo), _scalar(e1, binds, memo))
            elif not free_indices(e0):
                binds.append((v, _rhs(e0, binds)))
                out = _scalar(e1, binds, memo)
            else:
                raise UnsupportedError(f"the backend cannot lower the tensor let {describe(e)} under a loop")
        case Access():
            base, idx = accesses(e)
            out = _access(base, list(idx), binds, memo)
        case _:
            raise UnsupportedError(f"the backend cannot lower {describe(e)}")
    memo[e] = out
    return out


def _value(e: Expr, binds: list, memo: dict) -> Expr:
    """A non-scalar operand of an access or projection, simplified."""
    match e:
        case Pair(fst=a, snd=b):
            return Pair(a, b)
        case Proj(index=k, arg=a):
            a2 = _value(a, binds, memo)
            if isinstance(a2, Pair):
                return _value(a2.fst if k == 0 else a2.snd, binds, memo)
            return Proj(k, a2)
        case Let(var=v, value=e0, body=e1) if not free_indices(e0):
            binds.append((v, _rhs(e0, binds)))
            return _value(e1, binds, memo)
        case _:
            return e


def _access(base: Expr, idx: list, binds: list, memo: dict) -> Expr:
    base = _value(base, binds, memo)
    while idx and isinstance(base, (Gen, Iverson)):
        if isinstance(base, Iverson):
            return _scalar(Iverson(base.pred, _access_expr(base.body, idx)), binds, memo)
        base = subst(base.body, idx={base.var: idx.pop(0)})
        base = _value(base, binds, memo)
    if not idx:
        return _scalar(base, binds, memo)
    if _alias(base):
        return _access_expr(base, idx)
    if not free_indices(base):
        v = fresh_var("t", type_of(base))
        binds.append((v, _rhs(base, binds)))
        return _access_expr(v, idx)
    raise UnsupportedError(f"the backend cannot index {describe(base)}")


def _access_expr(base, idx):
    for a in idx:
        base = Access(base, a)
    return base
