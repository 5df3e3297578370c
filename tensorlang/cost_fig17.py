"""Figure 17 of the paper (Section 6.3, rules 6.50-6.54): the cost-model
extension for the adjoint calculus's inner-product terms, and Theorem
6.55's input-output-sensitive cost ``$_IO(e) = $⟦e⟧[] + $(T_I) + $(T_O)``.

* ``$(T)`` (6.53): ``$(ℝ) = 1``, ``$(T0 × T1) = $(T0) + $(T1)``,
  ``$([n]T) = n · $(T)``: :func:`type_cost`;
* ``<e0 | e1>`` (6.53) and ``<e0 | e1>_[p]`` (6.54): :func:`inner_product_cost`
  (the size of the non-zero interface plus the costs of both sides);
* ``dlet`` (6.50), ``⊕`` (6.51), ``ZERO`` (6.52) over the meta-terms of
  ``tensorlang.passes.adjoint_rules``: :func:`extended_cost`.

Symbolic versions are in ``tensorlang.cost_symbolic``.
"""

from __future__ import annotations

import numpy as np

from .cost_fig6 import _parse_kwargs, cost, count_at
from .errors import InputError, TensorLangError, UnsupportedError, describe
from .ir import Const, Expr, Iverson, Pair, PairT, Pred, RealT, TensorT, Type, input_vars, relations_of
from .typecheck import type_of


def _extent_value(a, sizes: dict) -> int:
    try:
        return a.evaluate(sizes)
    except TensorLangError:
        missing = sorted(s.name for s in a.size_vars() if s.name not in sizes)
        raise InputError(f"no value for the size(s) {missing}; pass them as keywords") from None


def type_cost_at(T: Type, sizes: dict) -> int:
    """Signature: type_cost_at : Type × (name -> int) -> int (rule 6.53's ``$(T)``)."""
    match T:
        case RealT():
            return 1
        case PairT(fst=a, snd=b):
            return type_cost_at(a, sizes) + type_cost_at(b, sizes)
        case TensorT(extent=n, elem=el):
            return _extent_value(n, sizes) * type_cost_at(el, sizes)
        case _:
            raise TensorLangError(f"not a type: {T!r}")


def shape_binders(T: Type, indices) -> tuple:
    """``((i0, n0), ..., (ik, nk))`` for ``T = [n0]...[nk]ℝ`` and the given indices."""
    binders = []
    t = T
    for i in indices:
        if not isinstance(t, TensorT):
            raise TensorLangError(f"inner product predicate: {len(indices)} indices for type {T}")
        binders.append((i, t.extent))
        t = t.elem
    if not isinstance(t, RealT):
        raise UnsupportedError(
            f"a predicated inner product needs one index per dimension of a tensor of reals, got {T} "
            f"with {len(binders)} indices"
        )
    return tuple(binders)


def ip_type(e0: Expr, e1: Expr) -> Type:
    t0, t1 = type_of(e0), type_of(e1)
    if t0 is not t1:
        raise TensorLangError(f"inner product of different types: {describe(e0)} : {t0} and {describe(e1)} : {t1}")
    return t0


def inner_product_cost(e0: Expr, e1: Expr, pred: Pred | None = None, indices=(), **sizes_and_relations) -> int:
    """Rules 6.53 / 6.54 at the given sizes.

    ``<e0 | e1>`` costs ``$(T) + $⟦e0⟧ + $⟦e1⟧`` (``e0, e1 : T``).
    ``<e0 | e1>_[p]`` (``pred`` given, over ``indices``: one IndexVar per
    dimension of ``T = [n0]...[nk]ℝ``, outermost first) costs
    ``#{~i : p} + $⟦e0⟧ + $⟦e1⟧``.  Relation data are keywords like sizes."""
    T = ip_type(e0, e1)
    carrier = Pair(e0, e1) if pred is None else Pair(e0, Pair(e1, Iverson(pred, Const(0))))
    sz, rels = _parse_kwargs(carrier, sizes_and_relations)
    if pred is None:
        iface = type_cost_at(T, sz)
    else:
        iface = count_at(shape_binders(T, tuple(indices)), pred, sz, rels)
    return iface + cost(e0, **_only_for(e0, sizes_and_relations)) + cost(e1, **_only_for(e1, sizes_and_relations))


def meta_cost(term, cost_fn, ip_fn):
    """Signature: meta_cost : (e^L | e^S | e^I | Expr) × cost × inner-product cost -> number.

    Figure 17 over the meta-terms of ``tensorlang.passes.adjoint_rules``:
    6.50 ``dlet dx = D⟦e⟧σ in e^L`` costs the de-sugared forward derivative
    ``D⟦e⟧σ`` (Fig. 13) plus ``e^L``; an ordinary ``let`` inside ``e^L``
    costs its value plus its body (4.32); 6.51 ``⊕`` adds; 6.52 ``ZERO`` is
    0; 6.53/6.54 inner products via ``ip_fn``.  Free variables cost 0, so
    each part is costed on its own."""
    from .passes.adjoint_rules import BLet, DLet, Deriv, Inner, OPlus, Zero

    def deriv(d):
        from .passes.total_derivative import total_derivative

        return total_derivative(d.expr, d.sigma)

    def go(t):
        match t:
            case Expr():
                return cost_fn(t)
            case DLet(value=d, body=b):  # 6.50
                return cost_fn(deriv(d) if isinstance(d, Deriv) else d) + go(b)
            case BLet(value=v, body=b):  # 4.32
                return cost_fn(v) + go(b)
            case OPlus(terms=ts):  # 6.51
                total = 0
                for x in ts:
                    total = total + go(x)
                return total
            case Zero():  # 6.52
                return 0
            case Inner(left=l, right=r, pred=p, ivars=iv):  # 6.53, 6.54
                r = deriv(r) if isinstance(r, Deriv) else r
                return ip_fn(l, r) if p is None else ip_fn(l, r, p, tuple(iv))
            case _:
                raise TensorLangError(f"extended cost: not a term of the adjoint calculus: {t!r}")

    return go(term)


def extended_cost(term, **sizes_and_relations) -> int:
    """Figure 17's cost of an adjoint-calculus term (``dlet``, ``let``, ``⊕``,
    ``ZERO``, inner products, or a plain expression) at the given sizes."""
    kw = sizes_and_relations

    def c(e):
        return cost(e, **_only_for(e, kw))

    def ip(e0, e1, p=None, iv=()):
        carrier = Pair(e0, e1) if p is None else Pair(e0, Pair(e1, Iverson(p, Const(0))))
        return inner_product_cost(e0, e1, p, iv, **_only_for(carrier, kw))

    return meta_cost(term, c, ip)


def _only_for(e: Expr, kwargs: dict) -> dict:
    """The keywords relevant to ``e`` (sizes pass through; relations and inputs filtered)."""
    rels = {r.name for r in relations_of(e)}
    ins = {v.name for v in input_vars(e)}
    out = {}
    for k, v in kwargs.items():
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out[k] = v
        elif k in rels or k in ins:
            out[k] = v
    return out


def input_type_cost_at(expr: Expr, sizes: dict) -> int:
    """``$(T_I)``: the size-cost of the types of the program's free variables."""
    return sum(type_cost_at(v.type, sizes) for v in input_vars(expr))


def io_cost(expr: Expr, **sizes_and_relations) -> int:
    """Theorem 6.55's ``$_IO(e) = $⟦e⟧[] + $(T_I) + $(T_O)`` at the given sizes,
    ``T_I`` the types of the free variables, ``T_O`` the output type."""
    sz, _ = _parse_kwargs(expr, sizes_and_relations)
    return cost(expr, **sizes_and_relations) + input_type_cost_at(expr, sz) + type_cost_at(type_of(expr), sz)


