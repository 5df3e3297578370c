"""Flattening user programs into the backend's input grammar.

A small subset of the normal-form passes (paper Section 5: let-lifting,
Fig. 7; gen pushout, Fig. 9), enough that everyday programs compile even
without ``tl.normalize``:

* a closed tensor-valued ``let`` (no free index variable, no free local
  variable) is lifted to the top-level let-block (5.1-5.10); a scalar
  ``let`` stays (it becomes a scalar local in the kernel); a tensor ``let``
  under a loop stays too (a local array computed per iteration), unless its
  one use is not under a further loop (then it is substituted);
* pairs and tensors of pairs are split into struct of arrays (Fig. 8), and
  a ``let`` around a pair is pushed into both components;
* ``(gen[i:n] e)[a]`` becomes ``e[i := a]`` (rule 4.7 then 4.11: the access
  selects one element; this never adds work, and the evaluator would compute
  the whole generator);
* ``[p]·gen[i:n] e`` becomes ``gen[i:n] [p]·e`` (5.21-5.24);
* ``π_k (e0, e1)`` becomes ``e_k``; a tensor-valued right-hand side that is
  not a generator is eta-expanded (``A[0]`` -> ``gen[j:n] A[0][j]``).

Called only by ``prepare.prepare``; anything it cannot bring into the
grammar is an UnsupportedError naming the sub-expression.
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
    PairT,
    Proj,
    RealT,
    Sum,
    TensorT,
    Var,
    accesses,
    fresh_index,
    fresh_var,
    free_indices,
    free_vars,
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
        if _pairlike(e.var.type):  # pair elimination (Fig. 8): one let per component
            rep = _bind_pair(_value(e.value, binds, {}), e.var, binds)
            e = subst(e.body, vals={e.var: _wrap(rep, e.var.type)})
            continue
        binds.append((e.var, _rhs(e.value, binds)))
        e = e.body
    if _pairlike(type_of(e)):
        v = _value(e, binds, {})
        if isinstance(v, Pair):
            return Pair(_top(v.fst, binds), _top(v.snd, binds))
        if _alias(v):
            return Pair(_top(Proj(0, v), binds), _top(Proj(1, v), binds))
        return v
    return _rhs(e, binds)


def _bind_pair(v: Expr, var: Var, binds: list) -> Expr:
    """Bind each component of a pair value; returns the pair of variables."""
    if _alias(v):
        return v
    if not isinstance(v, Pair):
        raise UnsupportedError(f"the backend cannot lower the pair-valued binding {describe(v)}")
    parts = []
    for k, (c, ct) in enumerate(zip((v.fst, v.snd), _split_type(var.type))):
        w = fresh_var(f"{var.name}{k}", ct)
        if _pairlike(ct):
            parts.append(_bind_pair(_value(c, binds, {}), w, binds))
        else:
            binds.append((w, _rhs(c, binds)))
            parts.append(w)
    return Pair(parts[0], parts[1])


def _wrap(rep: Expr, t) -> Expr:
    """A well-typed value of type ``t`` from its struct-of-arrays components
    (``[n](A x B)`` from ``(a, b)`` is ``gen[i:n] (a[i], b[i])``)."""
    if not _pairlike(t) or _alias(rep) and not isinstance(rep, Pair) and not isinstance(t, TensorT):
        return rep
    if isinstance(t, PairT):
        if not isinstance(rep, Pair):
            return rep
        return Pair(_wrap(rep.fst, t.fst), _wrap(rep.snd, t.snd))
    if not isinstance(rep, Pair):
        return rep  # an input of array-of-structs type: left for the caller to refuse
    i = fresh_index("i")
    return Gen(i, t.extent, _wrap(_index_rep(rep, sym_aff(i)), t.elem))


def _index_rep(rep: Expr, a) -> Expr:
    if isinstance(rep, Pair):
        return Pair(_index_rep(rep.fst, a), _index_rep(rep.snd, a))
    return Access(rep, a)


def _pairlike(t) -> bool:
    while isinstance(t, TensorT):
        t = t.elem
    return isinstance(t, PairT)


def _split_type(t):
    """[n](A x B) -> ([n]A, [n]B) (struct of arrays)."""
    if isinstance(t, PairT):
        return t.fst, t.snd
    a, b = _split_type(t.elem)
    return TensorT(t.extent, a), TensorT(t.extent, b)


def _closed(e0: Expr, binds: list) -> bool:
    """May ``e0`` become a top-level binding?  No free index variable, and every
    free variable an input or a top-level binding (not a local let)."""
    if free_indices(e0):
        return False
    top = {v for v, _ in binds}
    return all(x.uid == 0 or x in top for x in free_vars(e0))


def _rhs(e: Expr, binds: list, top: bool = True) -> Expr:
    """A right-hand side: gens of a scalar, or an alias."""
    match e:
        case Let(var=v, value=e0, body=e1) if v not in free_vars(e1):
            return _rhs(e1, binds, top)
        case Let(var=v, value=e0, body=e1) if _closed(e0, binds) and _pairlike(v.type):
            rep = _bind_pair(_value(e0, binds, {}), v, binds)  # pair elimination (Fig. 8)
            return _rhs(subst(e1, vals={v: _wrap(rep, v.type)}), binds, top)
        case Let(var=v, value=e0, body=e1) if _closed(e0, binds):
            binds.append((v, _rhs(e0, binds)))
            return _rhs(e1, binds, top)
        case Gen(var=i, extent=n, body=b):
            return Gen(i, n, _rhs(b, binds, False))
        case Iverson(pred=p, body=Gen(var=i, extent=n, body=b)):
            if i in free_indices(p):
                j = fresh_index(i.name)
                b = subst(b, idx={i: sym_aff(j)})
                i = j
            return _rhs(Gen(i, n, Iverson(p, b)), binds, top)
        case Var() | Proj() if top and _alias(e):
            return e
        case Proj(index=k, arg=Pair(fst=a, snd=b)):
            return _rhs(a if k == 0 else b, binds, top)
        case Pair():
            return e  # a pair-valued binding: left for the caller to refuse
    t = type_of(e)
    if isinstance(t, TensorT):
        j = fresh_index("j")
        return _rhs(Gen(j, t.extent, Access(e, sym_aff(j))), binds, top)
    if not isinstance(t, RealT):
        return e
    return _scalar(e, binds, {})


def _uses_below(e: Expr, v: Var, looped: bool):
    """(number of occurrences of ``v`` in the tree ``e``, whether one is under a gen/sum)."""
    if v not in free_vars(e):
        return 0, False
    if e is v:
        return 1, looped
    count, deep = 0, False
    inner = looped or isinstance(e, (Gen, Sum))
    for c in _children(e):
        k, d = _uses_below(c, v, inner)
        count, deep = count + k, deep or d
    return count, deep


def _children(e: Expr):
    match e:
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b) | Pair(fst=a, snd=b) | Let(value=a, body=b):
            return (a, b)
        case Call(args=args):
            return args
        case Gen(body=b) | Sum(body=b) | Iverson(body=b) | Proj(arg=b) | Access(arr=b):
            return (b,)
        case Var() | Const():
            return ()
        case _:
            raise UnsupportedError(f"not a value expression: {e!r}")


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
        case Proj():
            v = _value(e, binds, memo)
            if v is e:
                if not _alias(e):
                    raise UnsupportedError(f"the backend cannot lower {describe(e)}")
                out = e
            else:
                out = _scalar(v, binds, memo)
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
            if v not in free_vars(e1):  # dead: its value is never needed
                out = _scalar(e1, binds, memo)
            elif isinstance(v.type, RealT):
                out = Let(v, _scalar(e0, binds, memo), _scalar(e1, binds, memo))
            elif isinstance(v.type, PairT) and all(isinstance(t, RealT) for t in (v.type.fst, v.type.snd)):
                pv = _value(e0, binds, memo)
                if not isinstance(pv, Pair):
                    raise UnsupportedError(f"the backend cannot lower the pair let {describe(e)}")
                w0, w1 = fresh_var(v.name + "0", v.type.fst), fresh_var(v.name + "1", v.type.snd)
                body = subst(e1, vals={v: Pair(w0, w1)})
                out = Let(w0, _scalar(pv.fst, binds, memo), Let(w1, _scalar(pv.snd, binds, memo), _scalar(body, binds, memo)))
            elif _pairlike(v.type) and _closed(e0, binds):  # pair elimination (Fig. 8)
                rep = _bind_pair(_value(e0, binds, memo), v, binds)
                out = _scalar(subst(e1, vals={v: _wrap(rep, v.type)}), binds, memo)
            elif _closed(e0, binds):
                binds.append((v, _rhs(e0, binds)))
                out = _scalar(e1, binds, memo)
            elif _uses_below(e1, v, False) == (1, False):
                # one use, not under a further loop: substituting computes at most
                # the one element the use reads (the let computed them all)
                out = _scalar(subst(e1, vals={v: e0}), binds, memo)
            elif isinstance(v.type, TensorT) and not _pairlike(v.type):
                # otherwise a local array computed per iteration of the loops around
                rhs = _rhs(e0, binds, False)
                if _alias(rhs):
                    out = _scalar(subst(e1, vals={v: rhs}), binds, memo)
                else:
                    out = Let(v, rhs, _scalar(e1, binds, memo))
            elif _pairlike(v.type):
                rep = _bind_local_pair(_value(e0, binds, memo), v, binds, memo)
                out = _scalar(subst(e1, vals={v: _wrap(rep, v.type)}), binds, memo)
            else:
                raise UnsupportedError(f"the backend cannot lower the let {describe(e)} under a loop")
        case Access():
            base, idx = accesses(e)
            out = _access(base, list(idx), binds, memo)
        case _:
            raise UnsupportedError(f"the backend cannot lower {describe(e)}")
    memo[e] = out
    return out


def _value(e: Expr, binds: list, memo: dict) -> Expr:
    """A non-scalar operand of an access or projection, simplified: pairs
    pushed out of projections, brackets, generators and accesses (Fig. 8),
    accesses of generators beta-reduced, closed lets lifted."""
    if _alias(e) and isinstance(type_of(e), PairT):
        return Pair(Proj(0, e), Proj(1, e))
    match e:
        case Pair():
            return e
        case Proj(index=k, arg=a):
            if _alias(a):
                return e
            a2 = _value(a, binds, memo)
            if isinstance(a2, Pair):
                return _value(a2.fst if k == 0 else a2.snd, binds, memo)
            return Proj(k, a2)
        case Iverson(pred=p, body=b):
            b2 = _value(b, binds, memo)
            if isinstance(b2, Pair):
                return Pair(Iverson(p, b2.fst), Iverson(p, b2.snd))
            return Iverson(p, b2)
        case Gen(var=i, extent=n, body=b) if isinstance(type_of(b), PairT):
            b2 = _value(b, binds, memo)
            if isinstance(b2, Pair):
                return Pair(Gen(i, n, b2.fst), Gen(i, n, b2.snd))
            return e
        case Access(arr=a, index=ix):
            a2 = _value(a, binds, memo)
            if isinstance(a2, Pair):
                return Pair(Access(a2.fst, ix), Access(a2.snd, ix))
            if isinstance(a2, Gen):
                return _value(subst(a2.body, idx={a2.var: ix}), binds, memo)
            if isinstance(a2, Iverson):
                return _value(Iverson(a2.pred, Access(a2.body, ix)), binds, memo)
            return Access(a2, ix)
        case Let(var=v, value=e0, body=e1) if v not in free_vars(e1):
            return _value(e1, binds, memo)
        case Let(var=v, value=e0, body=e1) if _closed(e0, binds):
            if _pairlike(v.type):  # a pair, or a tensor of pairs (struct of arrays)
                rep = _bind_pair(_value(e0, binds, memo), v, binds)
                return _value(subst(e1, vals={v: _wrap(rep, v.type)}), binds, memo)
            binds.append((v, _rhs(e0, binds)))
            return _value(e1, binds, memo)
        case Let(var=v, value=e0, body=e1):
            # a let under a loop: a pair in its body is pushed out of it
            # (each component keeps the binding; CSE shares its value)
            b2 = _value(e1, binds, memo)
            if isinstance(b2, Pair):
                return Pair(Let(v, e0, b2.fst), Let(v, e0, b2.snd))
            return e
        case Var() | Const() | Gen() | Add() | Mul() | Call() | Sum():
            return e  # nothing to push out: the caller decides
        case _:
            raise UnsupportedError(f"not a value expression: {e!r}")


def _bind_local_pair(v: Expr, var: Var, binds: list, memo: dict) -> Expr:
    """A pair value under a loop: each component substituted (it is a pair
    expression of aliases or tensors the accesses then select from)."""
    if _alias(v) or not isinstance(v, Pair):
        if _alias(v):
            return v
        raise UnsupportedError(f"the backend cannot lower the pair-valued let {describe(var)} = {describe(v)} under a loop")
    return Pair(v.fst, v.snd)


def _access(base: Expr, idx: list, binds: list, memo: dict) -> Expr:
    base = _value(base, binds, memo)
    if idx and isinstance(base, Let):  # (let v = e0 in e1)[a] = let v = e0 in e1[a]
        return _scalar(Let(base.var, base.value, _access_expr(base.body, idx)), binds, memo)
    if idx and isinstance(base, Access):  # (e[a])[b] = e[a][b]: one access chain
        b0, ix0 = accesses(base)
        return _access(b0, list(ix0) + idx, binds, memo)
    while idx and isinstance(base, (Gen, Iverson)):
        if isinstance(base, Iverson):
            return _scalar(Iverson(base.pred, _access_expr(base.body, idx)), binds, memo)
        base = subst(base.body, idx={base.var: idx.pop(0)})
        base = _value(base, binds, memo)
    if not idx:
        return _scalar(base, binds, memo)
    if _alias(base):
        return _access_expr(base, idx)
    raise UnsupportedError(f"the backend cannot index {describe(base)}")


def _access_expr(base, idx):
    for a in idx:
        base = Access(base, a)
    return base
