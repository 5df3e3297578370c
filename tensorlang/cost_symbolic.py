"""The Figure 6 cost (paper Section 4.3) and its Figure 17 extension as
sympy expressions in the size variables.

The count terms of :func:`tensorlang.costmodel.cost_terms` are iteration domains;
each affine domain is counted by barvinok (``isl.Set.card``), the signed
piecewise quasi-polynomials are added *inside isl* (one parameter space: all
sizes of the program), simplified under the size conditions and converted to
sympy once, so the result is a polynomial, or a ``Piecewise`` where the count
genuinely is piecewise.

Size conditions: the result equals :func:`tensorlang.costmodel.cost` for every
assignment of integers >= 1 to the program's sizes
(:func:`symbolic_cost_conditions`).  At a size 0 the expression may differ
(it is simplified under ``size >= 1``).

Relations (data predicates) are counted by named symbols (``cost_relations``):
``nnz_R`` and its projections and slices; disjunctions involving a relation
are split by inclusion-exclusion.
"""

from __future__ import annotations

from .deep import deep

from functools import lru_cache

from .isl_bridge import isl
import sympy

from . import isl_bridge as ib
from .cost_fig6 import ADD, MUL, cost_terms, has_relation
from .ir import conjuncts
from .cost_relations import (  # noqa: F401  (re-exported: the symbols' public API)
    _REL_META,
    _REL_SYMS,
    _exists_over_or,
    _relation_factor,
    relation_count_symbol,
    relation_count_values,
    relation_truth_symbol,
)
from .cost_fig17 import ip_type, meta_cost, shape_binders
from .errors import TensorLangError, UnsupportedError, describe
from .ir import (
    TRUE,
    Aff,
    Expr,
    IndexVar,
    Iverson,
    Const,
    Or,
    Pair,
    PairT,
    Pred,
    RealT,
    TensorT,
    Type,
    conj,
    make_gens,
    input_vars,
    size_vars,
)
from .sharing import explicit_sharing
from .typecheck import type_of

# --------------------------------------------------------------------------
# Counting in isl


def _params(expr: Expr) -> list:
    return sorted(size_vars(expr), key=lambda s: s.name)


@lru_cache(maxsize=16384)
def _card_text(text: str) -> isl.PwQPolynomial:
    return ib._parse_set(text).card()


def _card(B, P: Pred, carrier) -> isl.PwQPolynomial:
    text, _ = ib.domain_text(B, P, sizes_positive=True, extra=(carrier,))
    return _card_text(text)


def _context(params) -> isl.Set:
    names = [ib.param_name(p) for p in params]
    cons = " and ".join(f"{n} >= 1" for n in names)
    return isl.Set(f"[{', '.join(names)}] -> {{ : {cons or '0 = 0'} }}")


def _to_sympy(pw, params):
    if pw is None:
        return sympy.Integer(0)
    return ib.pwqp_to_sympy(_simplify_pw(pw, _context(params)), ib.Names([], params))


def _simplify_pw(pw, ctx):
    """Simplify under the size conditions ``ctx``; when one piece's
    quasi-polynomial equals the count everywhere in ``ctx`` (a boundary piece
    such as ``0 if n = 1`` that the polynomial also gives), return just it."""
    pw = pw.coalesce().gist_params(ctx).coalesce()
    if pw.n_piece() == 0:
        return pw
    for _, q in pw.get_pieces():
        cand = isl.PwQPolynomial.alloc(ctx, q)
        if _zero_on_ctx(pw.sub(cand).gist_params(ctx)):
            return cand.gist_params(ctx)
    return pw


def _zero_on_ctx(diff, limit: int = 256) -> bool:
    """Is the piecewise quasi-polynomial 0 at every point?  Pieces with a
    non-zero polynomial must have a small finite domain, checked point by point."""
    for dom, q in diff.get_pieces():
        if q.plain_is_equal(isl.QPolynomial.zero_on_domain(q.get_domain_space())):
            continue
        k = dom.dim(isl.dim_type.param)
        pts = dom.move_dims(isl.dim_type.set, 0, isl.dim_type.param, 0, k)
        if not pts.is_bounded():
            return False
        found: list = []
        try:
            pts.foreach_point(lambda p: found.append(p) if len(found) <= limit else None)
        except Exception:  # pragma: no cover - isl refuses to enumerate
            return False
        if len(found) > limit:
            return False
        for p in found:
            at = isl.Point.zero(q.get_domain_space())
            for d in range(k):
                at = at.set_coordinate_val(isl.dim_type.param, d, p.get_coordinate_val(isl.dim_type.set, d))
            if not q.eval(at).is_zero():
                return False
    return True


class _Acc:
    """Signed sum of counts per kind: isl part + sympy part (relations)."""

    def __init__(self, params):
        self.params = params
        self.pw: dict = {}
        self.extra: dict = {}

    def add_pw(self, kind, coeff, pw):
        if coeff != 1:
            pw = pw.scale_val(isl.Val.int_from_si(pw.get_ctx(), coeff))
        old = self.pw.get(kind)
        self.pw[kind] = pw if old is None else old.add(pw)

    def add_sym(self, kind, val):
        self.extra[kind] = self.extra.get(kind, 0) + val

    def kinds(self):
        return sorted(set(self.pw) | set(self.extra))

    def value(self, kinds):
        pw = None
        extra = sympy.Integer(0)
        for k in kinds:
            if k in self.pw:
                pw = self.pw[k] if pw is None else pw.add(self.pw[k])
            extra += self.extra.get(k, 0)
        return _simplify(_to_sympy(pw, self.params) + extra)


# piecewise_fold multiplies out the branches of every Piecewise in a sum or
# product (and simplifies each combined condition): exponential in the number
# of Piecewise terms, minutes for some relational programs.  Fold only when the
# combined branch count is small; otherwise the sum of Piecewise terms is kept,
# which denotes the same function.
_FOLD_LIMIT = 16


def _simplify(x):
    """Expand polynomial parts; keep a Piecewise's structure."""
    if not x.has(sympy.Piecewise):
        return sympy.expand(x)
    branches = 1
    for pw in x.atoms(sympy.Piecewise):
        branches *= len(pw.args)
        if branches > _FOLD_LIMIT:
            return x
    return sympy.piecewise_fold(x)


def relational_count(B, P: Pred, carrier, params, depth: int = 0):
    """``#{B : P}`` with relation count symbols.  A disjunction involving a
    relation is split by inclusion-exclusion,
    ``#(r ∧ (x ∨ y)) = #(r ∧ x) + #(r ∧ y) - #(r ∧ x ∧ y)``, until every
    part has the factored form of :func:`_relation_factor`."""
    conjs = [_exists_over_or(c) for c in conjuncts(P)]
    for k, c in enumerate(conjs):
        if isinstance(c, Or) and has_relation(c):
            if depth > 6:
                raise UnsupportedError(f"symbolic cost: too many relational disjunctions in {describe(P)}")
            rest = conjs[:k] + conjs[k + 1:]
            x, y = c.lhs, c.rhs
            return (relational_count(B, conj(*rest, x), carrier, params, depth + 1)
                    + relational_count(B, conj(*rest, y), carrier, params, depth + 1)
                    - relational_count(B, conj(*rest, x, y), carrier, params, depth + 1))
    factor, rest_b, aff = _relation_factor(B, P)
    if not has_relation(aff) and factor == 1 and not rest_b and aff is TRUE:
        return sympy.Integer(1)
    return factor * _to_sympy(_card(rest_b, aff, carrier), params)


def _accumulate(expr: Expr, context=((), TRUE)) -> _Acc:
    from .loops import has_loop, loop_cost_carrier

    # a loop program's counts come from its loop-free parts (cost_terms); the
    # carrier (sizes, for isl) is a loop-free term with the same sizes
    shared = explicit_sharing(loop_cost_carrier(expr) if has_loop(expr) else expr)
    terms = cost_terms(expr, context=context)
    if context[0] or context[1] is not TRUE:
        shared = Iverson(context[1], make_gens(context[0], shared))  # carries every size
    params = _params(shared)
    acc = _Acc(params)
    for (B, P), kinds in terms.items():
        if has_relation(P):
            val = relational_count(B, P, shared, params)
            for kind, coeff in kinds.items():
                acc.add_sym(kind, coeff * val)
        else:
            pw = _card(B, P, shared)
            for kind, coeff in kinds.items():
                acc.add_pw(kind, coeff, pw)
    return acc


# --------------------------------------------------------------------------
# Public API


@deep
def symbolic_cost_breakdown(expr: Expr) -> dict:
    """``{"adds": sympy, "mults": sympy, "calls": {fn: sympy}}`` in the sizes."""
    acc = _accumulate(expr)
    calls = sorted(k for k in acc.kinds() if k.startswith("call:"))
    return {
        "adds": acc.value([ADD]),
        "mults": acc.value([MUL]),
        "calls": {k[5:]: acc.value([k]) for k in calls},
    }


@deep
def symbolic_cost(expr: Expr):
    """Figure 6's ``$⟦expr⟧[]`` as a sympy expression in the size symbols
    (``tensorlang.isl_bridge.size_symbol(name)``), ``Piecewise`` where the
    count is piecewise, with relation count symbols ``nnz_R`` / ``nnz_R[d..]``
    for relational predicates (module docstring).  Valid for all sizes >= 1
    (:func:`symbolic_cost_conditions`)."""
    acc = _accumulate(expr)
    return acc.value(acc.kinds())


@deep
def symbolic_cost_over(expr: Expr, binders, pred: Pred = TRUE):
    """``Σ_{σ ∈ {binders : pred}} $⟦expr⟧σ`` for an open term, in the size
    symbols (see ``cost.cost_over``)."""
    from .ir import as_aff

    acc = _accumulate(expr, (tuple((i, as_aff(n)) for i, n in binders), pred))
    return acc.value(acc.kinds())


def symbolic_cost_conditions(expr: Expr) -> list:
    """The conditions under which :func:`symbolic_cost` equals
    :func:`tensorlang.costmodel.cost`: every size of the program is >= 1.  (Counts
    over domains whose extents are negative are 0 in both, so no further
    condition is needed for the cost itself; ``symbolic_io_cost`` and
    ``symbolic_type_cost`` also need the type extents >= 0, listed after.)"""
    out = [ib.size_symbol(s.name) >= 1 for s in _params(expr)]
    exts = []
    for v in input_vars(expr):
        exts += _type_extents(v.type)
    exts += _type_extents(type_of(expr))
    for a in exts:
        implied = all(c > 0 for _, c in a.terms) and a.const + sum(c for _, c in a.terms) >= 0
        if a.terms and not implied:  # (not already implied by sizes >= 1)
            cond = _aff_sympy(a) >= 0
            if cond not in out and cond is not sympy.true:
                out.append(cond)
    return out


def _type_extents(T: Type) -> list:
    match T:
        case RealT():
            return []
        case PairT(fst=a, snd=b):
            return _type_extents(a) + _type_extents(b)
        case TensorT(extent=n, elem=el):
            return [n] + _type_extents(el)
        case _:
            raise TensorLangError(f"not a type: {T!r}")


def _aff_sympy(a: Aff):
    out = sympy.Integer(a.const)
    for s, c in a.terms:
        if isinstance(s, IndexVar):
            raise TensorLangError(f"extent {a} mentions an index variable")
        out += c * ib.size_symbol(s.name)
    return out


def symbolic_type_cost(T: Type):
    """``$(T)`` of rule 6.53 in the size symbols."""
    match T:
        case RealT():
            return sympy.Integer(1)
        case PairT(fst=a, snd=b):
            return sympy.expand(symbolic_type_cost(a) + symbolic_type_cost(b))
        case TensorT(extent=n, elem=el):
            return sympy.expand(_aff_sympy(n) * symbolic_type_cost(el))
        case _:
            raise TensorLangError(f"not a type: {T!r}")


def symbolic_inner_product_cost(e0: Expr, e1: Expr, pred: Pred | None = None, indices=()):
    """Rules 6.53 / 6.54 in the size symbols (see ``cost.inner_product_cost``)."""
    T = ip_type(e0, e1)
    if pred is None:
        iface = symbolic_type_cost(T)
    else:
        B = shape_binders(T, tuple(indices))
        carrier = Pair(e0, Pair(e1, Iverson(pred, Const(0))))
        params = _params(carrier)
        if has_relation(pred):
            iface = relational_count(B, pred, carrier, params)
        else:
            iface = _to_sympy(_card(B, pred, carrier), params)
    return iface + symbolic_cost(e0) + symbolic_cost(e1)


def symbolic_io_cost(expr: Expr):
    """Theorem 6.55's ``$_IO(e) = $⟦e⟧[] + $(T_I) + $(T_O)`` in the size symbols."""
    tin = sum((symbolic_type_cost(v.type) for v in input_vars(expr)), sympy.Integer(0))
    return symbolic_cost(expr) + tin + symbolic_type_cost(type_of(expr))


def symbolic_extended_cost(term):
    """Rules 6.50-6.54 over the adjoint calculus's meta-terms (see
    ``cost_fig17.extended_cost``), in the size symbols."""
    return _simplify(meta_cost(term, symbolic_cost, symbolic_inner_product_cost))
