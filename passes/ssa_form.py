"""Tensor SSA normal form: the grammar of Figure 10 (paper Section 5.4).

A tensor-SSA program is a let-block whose right-hand sides are each one of

    π_{k0}⋯π_{kl} x                                   InputRHS      input variable
    gen[~i] c                                         ConstRHS      constant
    gen[~i] ([p0]·X0[~i] + [p1]·X1[~i])               AddRHS        binary addition
    gen[~i] [p]·f(X0[~i], …)                          MapRHS        mapped scalar function
    gen[~g] sum[~s] [p]·X0[~a0]·X1[~a1]               ContractRHS   binary contraction
    gen[~g] sum[~s] [p]·X0[~a0]                       ContractRHS   unary contraction

and whose result is a variable or a (nested) pair of variables.  In a
contraction every access index is a plain index variable bound by the
right-hand side (the paper's ``~i0``, ``~i1``); the factors are linked only
through ``p``.  This module gives each form a small view dataclass, a
``classify`` from expressions to views and a ``to_expr`` back, so that the
SSA conversion (producer) and the derivative rules and backend (consumers)
agree on one grammar.  ``to_expr(classify(rhs)) is rhs`` for every SSA
right-hand side.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorlang.ir import (
    TRUE,
    Access,
    Add,
    Call,
    Const,
    Expr,
    IndexVar,
    Iverson,
    Mul,
    Pair,
    Pred,
    Proj,
    Var,
    access,
    canonicalize,
    gens,
    lets,
    make_gens,
    make_sums,
    sums,
    sym_aff,
)
from tensorlang.typecheck import iverson as bracket


@dataclass(frozen=True)
class InputRHS:
    var: Var
    path: tuple  # projections, outermost last: π_{path[0]} (π_{path[1]} ... x)


@dataclass(frozen=True)
class ConstRHS:
    gens: tuple  # ((IndexVar, Aff), ...)
    value: object


@dataclass(frozen=True)
class AddRHS:
    gens: tuple
    p0: Pred
    x0: Var
    p1: Pred
    x1: Var


@dataclass(frozen=True)
class MapRHS:
    gens: tuple
    p: Pred
    fn: str
    args: tuple  # (Var, ...)


@dataclass(frozen=True)
class ContractRHS:
    gens: tuple
    sums: tuple  # ((IndexVar, Aff), ...)
    p: Pred
    factors: tuple  # ((Var, (IndexVar, ...)), ...) of length 1 or 2


SSAView = InputRHS | ConstRHS | AddRHS | MapRHS | ContractRHS
# The statement kinds of Figure 10 (the transpose table must cover every one).
STATEMENT_KINDS = (InputRHS, ConstRHS, AddRHS, MapRHS, ContractRHS)


def gen_vars(view) -> tuple:
    return tuple(i for i, _ in view.gens)


def _split_bracket(e: Expr):
    if isinstance(e, Iverson):
        return e.pred, e.body
    return TRUE, e


def _plain_access(e: Expr, allowed: set):
    """``X[i0]...[ik]`` with each ``ij`` a plain bound index variable -> (X, (i0..ik))."""
    idxs = []
    while isinstance(e, Access):
        a = e.index
        if a.const != 0 or len(a.terms) != 1 or a.terms[0][1] != 1 or not isinstance(a.terms[0][0], IndexVar):
            return None
        if a.terms[0][0] not in allowed:
            return None
        idxs.append(a.terms[0][0])
        e = e.arr
    if not isinstance(e, Var):
        return None
    return e, tuple(reversed(idxs))


def classify(rhs: Expr):
    """Signature: classify : Expr -> SSAView | None (None: not a Fig. 10 RHS)."""
    # input line: a projection chain of a variable
    path, e = [], rhs
    while isinstance(e, Proj):
        path.append(e.index)
        e = e.arg
    if isinstance(e, Var):
        return InputRHS(e, tuple(path))
    if path:
        return None
    gbinds, body = gens(rhs)
    gvars = tuple(i for i, _ in gbinds)
    gset = set(gvars)
    if isinstance(body, Const):
        return ConstRHS(tuple(gbinds), body.value)
    sbinds, inner = sums(body)
    if sbinds:
        svars = {i for i, _ in sbinds}
        p, prod = _split_bracket(inner)
        allowed = gset | svars
        if isinstance(prod, Mul):
            a = _plain_access(prod.lhs, allowed)
            b = _plain_access(prod.rhs, allowed)
            if a and b:
                return ContractRHS(tuple(gbinds), tuple(sbinds), p, (a, b))
            return None
        a = _plain_access(prod, allowed)
        if a:
            return ContractRHS(tuple(gbinds), tuple(sbinds), p, (a,))
        return None
    # no sum: addition, map, or a degenerate contraction (sum over nothing)
    p, inner = _split_bracket(body)
    if isinstance(inner, Add) and p is TRUE:
        p0, t0 = _split_bracket(inner.lhs)
        p1, t1 = _split_bracket(inner.rhs)
        a = _plain_access(t0, gset)
        b = _plain_access(t1, gset)
        if a and b and a[1] == gvars and b[1] == gvars:
            return AddRHS(tuple(gbinds), p0, a[0], p1, b[0])
        return None
    if isinstance(inner, Call):
        args = [_plain_access(x, gset) for x in inner.args]
        if all(a is not None and a[1] == gvars for a in args):
            return MapRHS(tuple(gbinds), p, inner.fn, tuple(a[0] for a in args))
        return None
    if isinstance(inner, Mul):
        a = _plain_access(inner.lhs, gset)
        b = _plain_access(inner.rhs, gset)
        if a and b:
            return ContractRHS(tuple(gbinds), (), p, (a, b))
        return None
    a = _plain_access(inner, gset)
    if a:  # X[~a] or a broadcast gen[~g] [p]·X (a bare X is an InputRHS, above)
        return ContractRHS(tuple(gbinds), (), p, (a,))
    return None


def to_expr(view) -> Expr:
    """Signature: to_expr : SSAView -> Expr (inverse of classify)."""
    match view:
        case InputRHS(var=x, path=path):
            e: Expr = x
            for k in reversed(path):
                e = Proj(k, e)
            return e
        case ConstRHS(gens=g, value=c):
            return make_gens(g, Const(c))
        case AddRHS(gens=g, p0=p0, x0=x0, p1=p1, x1=x1):
            iv = [sym_aff(i) for i, _ in g]
            return make_gens(g, Add(bracket(p0, access(x0, iv)), bracket(p1, access(x1, iv))))
        case MapRHS(gens=g, p=p, fn=f, args=args):
            iv = [sym_aff(i) for i, _ in g]
            return make_gens(g, bracket(p, Call(f, tuple(access(a, iv) for a in args))))
        case ContractRHS(gens=g, sums=s, p=p, factors=fs):
            terms = [access(x, [sym_aff(i) for i in idx]) for x, idx in fs]
            body = terms[0] if len(terms) == 1 else Mul(terms[0], terms[1])
            return make_gens(g, make_sums(s, bracket(p, body)))
        case _:
            raise TypeError(f"not an SSA view: {view!r}")


def is_output(e: Expr) -> bool:
    """``X`` or ``(X0, …)`` (nested pairs of variables)."""
    if isinstance(e, Var):
        return True
    if isinstance(e, Pair):
        return is_output(e.fst) and is_output(e.snd)
    return False


def is_tensor_ssa(e: Expr, *, canonical: bool = True) -> bool:
    """The Figure 10 grammar: every RHS classifies, only input lines mention
    inputs, every other variable is bound before use, the result is a
    variable tuple, and (if ``canonical``) index variables are canonically
    named (``canonicalize(rhs) is rhs``)."""
    binds, out = lets(e)
    bound = set()
    for v, rhs in binds:
        view = classify(rhs)
        if view is None:
            return False
        if isinstance(view, InputRHS):
            if view.var.uid != 0:
                return False
        else:
            used = _vars_of(view)
            if not used <= bound:
                return False
        if canonical and canonicalize(rhs) is not rhs:
            return False
        bound.add(v)
    if not is_output(out):
        return False
    return _out_vars(out) <= bound


def _vars_of(view) -> set:
    match view:
        case InputRHS(var=x):
            return {x}
        case ConstRHS():
            return set()
        case AddRHS(x0=a, x1=b):
            return {a, b}
        case MapRHS(args=args):
            return set(args)
        case ContractRHS(factors=fs):
            return {x for x, _ in fs}
        case _:
            raise TypeError(f"not an SSA view: {view!r}")


def _out_vars(e: Expr) -> set:
    if isinstance(e, Var):
        return {e}
    return _out_vars(e.fst) | _out_vars(e.snd)
