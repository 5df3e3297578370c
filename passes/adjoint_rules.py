"""The adjoint calculus: meta-terms (paper Section 6.3, Figure 14) and rules (Figures 15-16).

These are not object-language IR: they are the red constructs of the paper
(RULES.md Section 0) that exist only while the adjoint is being derived.

    e^L ::= dlet dx = D⟦e⟧σ in e^L  |  let x = e in e^L  |  e^S
    e^S ::= e^I ⊕ e^S  |  e^I
    e^I ::= <e | e>  |  <e | e>_[p]  |  ZERO

``Deriv(e, σ)`` is the unprocessed differential ``D⟦e⟧σ``.  An inner
product ``Inner(left, right, pred, ivars)`` has an object expression on the
left and either a ``Deriv`` or a differential variable on the right; its
filter ``pred`` is a predicate over ``ivars``, one index variable per tensor
dimension of the right side (``pred=None`` is the unsubscripted product,
read as ``[true]`` per the Note on Fig. 14).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorlang.ir import TRUE, Expr, Pred, Var, disjuncts, is_zero, sym_aff, subst


@dataclass(frozen=True, eq=False)
class Deriv:
    """``D⟦expr⟧σ``, not yet processed."""

    expr: Expr
    sigma: dict  # Var -> differential Var


@dataclass(frozen=True, eq=False)
class Inner:
    """``<left | right>_[pred]`` with ``pred`` over ``ivars``."""

    left: Expr
    right: object  # Deriv | Var
    pred: Pred | None = None
    ivars: tuple = ()

    def pred_at(self, idx) -> Pred:
        """The filter with ``ivars`` replaced by ``idx`` (affine indices)."""
        if self.pred is None:
            return TRUE
        return subst(self.pred, idx={i: a for i, a in zip(self.ivars, idx)})


@dataclass(frozen=True, eq=False)
class Zero:
    """The zero inner-product term ``ZERO``."""


ZERO_TERM = Zero()


@dataclass(frozen=True, eq=False)
class OPlus:
    """``e^I ⊕ e^I ⊕ …`` (a meta sum of inner products, order irrelevant)."""

    terms: tuple


@dataclass(frozen=True, eq=False)
class DLet:
    """``dlet dvar = D⟦e⟧σ in body`` (red, unprocessed differential binding)."""

    dvar: Var
    value: Deriv
    body: object


@dataclass(frozen=True, eq=False)
class BLet:
    """``let var = value in body`` (blue, an ordinary binding inside e^L)."""

    var: Var
    value: Expr
    body: object


@dataclass(frozen=True, eq=False)
class Hole:
    """The rest of a term that a rule does not look at (``e^L`` / ``e^S``)."""


HOLE = Hole()


def desugar(t) -> Expr:
    """Signature: desugar : e^L -> Expr (the Fig. 14 de-sugaring; for oracles).

    Only defined on terms whose ``Deriv`` parts are expanded by the caller's
    ``D``; here ``Deriv`` becomes the total derivative of Fig. 13.
    """
    from tensorlang.ir import Add, Const, Let, Pair, Proj, make_sums, fresh_index, access, shape_of
    from tensorlang.typecheck import iverson, type_of

    from .total_derivative import total_derivative

    def ex(r):
        if isinstance(r, Deriv):
            return total_derivative(r.expr, r.sigma)
        return r

    def ip(left: Expr, right: Expr, pred, ivars) -> Expr:
        t = type_of(right)
        from tensorlang.ir import PairT, TensorT, Mul

        if isinstance(t, PairT):
            return Add(ip(Proj(0, left), Proj(0, right), None, ()), ip(Proj(1, left), Proj(1, right), None, ()))
        if isinstance(t, TensorT):
            dims = shape_of(t)
            iv = [fresh_index("q") for _ in dims]
            p = TRUE if pred is None else subst(pred, idx={a: sym_aff(b) for a, b in zip(ivars, iv)})
            return make_sums(list(zip(iv, dims)), iverson(p, Mul(access(left, [sym_aff(i) for i in iv]), access(right, [sym_aff(i) for i in iv]))))
        p = TRUE if pred is None else pred
        return iverson(p, Mul(left, right))

    match t:
        case DLet(dvar=v, value=d, body=b):
            return Let(v, ex(d), desugar(b))
        case BLet(var=v, value=e, body=b):
            return Let(v, e, desugar(b))
        case OPlus(terms=ts):
            out: Expr = Const(0)
            for x in ts:
                out = Add(out, desugar(x)) if out is not Const(0) else desugar(x)
            return out
        case Inner(left=l, right=r, pred=p, ivars=iv):
            return ip(l, ex(r), p, iv)
        case Zero():
            return Const(0)
        case _:
            raise TypeError(f"not an adjoint meta-term: {t!r}")


# ==========================================================================
# Helpers shared by the rules

from tensorlang.errors import UnsupportedError, describe  # noqa: E402
from tensorlang.functions import derivative_def  # noqa: E402
from tensorlang.ir import (  # noqa: E402
    Add,
    Call,
    Const,
    Exists,
    Gen,
    IndexVar,
    Let,
    Mul,
    Pair,
    PairT,
    Proj,
    TensorT,
    access,
    conj,
    disj,
    fresh_index,
    fresh_var,
    make_gens,
    make_sums,
    shape_of,
)
from tensorlang.typecheck import iverson, type_of, zero_of  # noqa: E402

from .env import extend  # noqa: E402
from .rules import rule  # noqa: E402
from .contraction import _split_sums, paper_form, reduction  # noqa: E402
from .ssa_form import AddRHS, ConstRHS, ContractRHS, InputRHS, MapRHS, classify  # noqa: E402


def affs(ivs) -> list:
    return [sym_aff(i) for i in ivs]


def exists(binds, p: Pred) -> Pred:
    """``exists[~b] p`` (innermost binder last); no binder: ``p``."""
    for i, n in reversed(list(binds)):
        p = Exists(i, n, p)
    return p


def masked(left: Expr, pred: Pred | None, ivars: tuple) -> Expr:
    """``gen[~i] [p]·left[~i]`` (``[p]·left`` at scalar type): the left side
    made zero where the filter is false, so the filter can be dropped
    (RULES.md 5.5, Note on dropping predicates at the output)."""
    if pred is None or pred is TRUE:
        return left
    dims = shape_of(type_of(left))
    if not dims:
        return iverson(pred, left)
    iv = [fresh_index("k") for _ in dims]
    p = subst(pred, idx={a: sym_aff(b) for a, b in zip(ivars, iv)})
    return make_gens(list(zip(iv, dims)), iverson(p, access(left, affs(iv))))


def dims_vars(t) -> tuple:
    """Fresh index variables, one per tensor dimension of ``t``, with extents."""
    return tuple((fresh_index("i"), n) for n in shape_of(t))


def _fresh_view(view):
    """The view with every index variable renamed to a fresh one (SSA right
    sides share canonical names; the rules mix several of them)."""
    ren = {}

    def r(i):
        if i not in ren:
            ren[i] = fresh_index(i.name)
        return ren[i]

    def rp(p):
        return subst(p, idx={k: sym_aff(v) for k, v in ren.items()})

    match view:
        case ConstRHS() | InputRHS():
            return view
        case AddRHS(gens=g, p0=p0, x0=x0, p1=p1, x1=x1):
            g2 = tuple((r(i), n) for i, n in g)
            return AddRHS(g2, rp(p0), x0, rp(p1), x1)
        case MapRHS(gens=g, p=p, fn=f, args=args):
            g2 = tuple((r(i), n) for i, n in g)
            return MapRHS(g2, rp(p), f, args)
        case ContractRHS(gens=g, sums=s, p=p, factors=fs):
            g2 = tuple((r(i), n) for i, n in g)
            s2 = tuple((r(i), n) for i, n in s)
            fs2 = tuple((x, tuple(r(i) for i in idx)) for x, idx in fs)
            return ContractRHS(g2, s2, rp(p), fs2)
        case _:
            raise UnsupportedError(f"not an SSA view: {view!r}")


# ==========================================================================
# Figure 15


@rule("6.20", figure=15)
def extract_let(t):
    """<dY | D⟦let X = e0 in e1⟧σ>  ==>  let X = e0 in dlet dX = D⟦e0⟧σ in <dY | D⟦e1⟧(σ[X ↦ dX])>"""
    if not (isinstance(t, Inner) and isinstance(t.right, Deriv) and isinstance(t.right.expr, Let)):
        return None
    let, sigma = t.right.expr, t.right.sigma
    x = let.var
    dx = fresh_var("d" + x.name, x.type)
    sigma2 = extend(sigma, x, dx)  # persistent: O(1) along the let-block (issue #14)
    return BLet(x, let.value, DLet(dx, Deriv(let.value, sigma), Inner(t.left, Deriv(let.body, sigma2), t.pred, t.ivars)))


@rule("6.25", figure=15)
def swap_dlet_let(t):
    """dlet dX = D⟦e0⟧σ in let X = e1 in e^L  ==>  let X = e1 in dlet dX = D⟦e0⟧σ in e^L"""
    if isinstance(t, DLet) and isinstance(t.body, BLet):
        b = t.body
        return BLet(b.var, b.value, DLet(t.dvar, t.value, b.body))
    return None


@rule("6.26", figure=15)
def split_pair_output(t):
    """<dY | D⟦(e0, e1)⟧σ>  ==>  <π0 dY | D⟦e0⟧σ> ⊕ <π1 dY | D⟦e1⟧σ>"""
    if isinstance(t, Inner) and isinstance(t.right, Deriv) and isinstance(t.right.expr, Pair):
        e, s = t.right.expr, t.right.sigma
        return OPlus((Inner(_proj(0, t.left), Deriv(e.fst, s)), Inner(_proj(1, t.left), Deriv(e.snd, s))))
    return None


def _proj(k: int, e: Expr) -> Expr:
    if isinstance(e, Pair):
        return e.fst if k == 0 else e.snd
    return Proj(k, e)


@rule("6.27", figure=15)
def push_projection(t):
    """<dY | D⟦π0 e⟧σ>  ==>  <(dY, 0) | D⟦e⟧σ>      (π1: <(0, dY) | D⟦e⟧σ>)

    A filtered product is masked first (subscripted inner products exist
    only at tensor type; RULES.md Note on 6.27/6.28)."""
    if not (isinstance(t, Inner) and isinstance(t.right, Deriv) and isinstance(t.right.expr, Proj)):
        return None
    e = t.right.expr
    left = masked(t.left, t.pred, t.ivars)
    other = zero_of(type_of(Proj(1 - e.index, e.arg)))
    pair = Pair(left, other) if e.index == 0 else Pair(other, left)
    return Inner(pair, Deriv(e.arg, t.right.sigma))


def _plus(a: Expr, b: Expr) -> Expr:
    """Leaf-wise sum of two left sides of one type (zeros dropped)."""
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    t = type_of(a)
    if isinstance(t, PairT):
        return Pair(_plus(_proj(0, a), _proj(0, b)), _plus(_proj(1, a), _proj(1, b)))
    dims = shape_of(t)
    iv = [fresh_index("k") for _ in dims]
    return make_gens(list(zip(iv, dims)), Add(access(a, affs(iv)), access(b, affs(iv))))


@rule("6.28", figure=15)
def join_pair_contributions(t):
    """<(dY0, 0) | e> ⊕ <(0, dY1) | e>  ==>  <(dY0, dY1) | e>

    Generalized leaf-wise (nested pairs; a leaf with two contributions is
    their sum) so that the rule applies to any two products with one right side."""
    if not (isinstance(t, OPlus) and len(t.terms) == 2):
        return None
    a, b = t.terms
    if not (isinstance(a, Inner) and isinstance(b, Inner) and a.right is b.right):
        return None
    if not isinstance(type_of(a.left), PairT) or a.pred not in (None, TRUE) or b.pred not in (None, TRUE):
        return None
    return Inner(_plus(a.left, b.left), a.right)


@rule("6.31", figure=15)
def reverse_binding(t):
    """dlet dX = D⟦e0⟧σ in (<e1 | dX>_[p] ⊕ e^S)  ==>  let dX = e1 in (<dX | D⟦e0⟧σ>_[p] ⊕ e^S)
    provided dX ∉ FV(e^S)"""
    if not (isinstance(t, DLet) and isinstance(t.body, OPlus) and t.body.terms):
        return None
    first, rest = t.body.terms[0], t.body.terms[1:]
    if not (isinstance(first, Inner) and first.right is t.dvar):
        return None
    if any(isinstance(r, Inner) and r.right is t.dvar for r in rest):
        return None
    dx = fresh_var(t.dvar.name, type_of(first.left))
    return BLet(dx, first.left, OPlus((Inner(dx, t.value, first.pred, first.ivars),) + rest))


@rule("6.32", figure=15)
def drop_unused_dlet(t):
    """dlet dX = D⟦e0⟧σ in e^S  ==>  e^S      provided dX ∉ FV(e^S)"""
    if not (isinstance(t, DLet) and isinstance(t.body, (OPlus, Inner, Zero))):
        return None
    terms = t.body.terms if isinstance(t.body, OPlus) else (t.body,)
    if any(isinstance(r, Inner) and r.right is t.dvar for r in terms):
        return None
    return t.body


@rule("6.33", figure=15)
def differential_of_variable(t):
    """<e | D⟦X⟧(σ[X ↦ dX])>_[p]  ==>  <e | dX>_[p]"""
    if isinstance(t, Inner) and isinstance(t.right, Deriv) and isinstance(t.right.expr, Var):
        dx = t.right.sigma.get(t.right.expr)
        if dx is not None:
            return Inner(t.left, dx, t.pred, t.ivars)
    return None


@rule("6.34", figure=15)
def constant_variable(t):
    """<e | D⟦X⟧σ>_[p]  ==>  ZERO      provided X ∉ σ"""
    if isinstance(t, Inner) and isinstance(t.right, Deriv) and isinstance(t.right.expr, Var):
        if t.right.expr not in t.right.sigma:
            return ZERO_TERM
    return None


@rule("6.35", figure=15)
def constant_tensor(t):
    """<e | D⟦C⟧σ>_[p]  ==>  ZERO"""
    if isinstance(t, Inner) and isinstance(t.right, Deriv) and isinstance(classify(t.right.expr), ConstRHS):
        return ZERO_TERM
    return None


@rule("6.36", figure=15)
def drop_zero_term(t):
    """e^I ⊕ ZERO  ==>  e^I"""
    if isinstance(t, OPlus) and any(isinstance(x, Zero) for x in t.terms):
        rest = tuple(x for x in t.terms if not isinstance(x, Zero))
        return OPlus(rest) if rest else ZERO_TERM
    return None


@rule("6.39", figure=15)
def merge_contributions(t):
    """<e0 | dX>_[p0] ⊕ <e1 | dX>_[p1]  ==>  let dY = [p0]·e0 + [p1]·e1 in <dY | dX>_[p0 ∨ p1]

    (SSA short-hand: dY = gen[~i]([p0]·e0[~i] + [p1]·e1[~i]).)  The let sits
    inside the ⊕-sum as printed; the driver lifts it to the e^L level."""
    if not (isinstance(t, OPlus) and len(t.terms) == 2):
        return None
    a, b = t.terms
    if not (isinstance(a, Inner) and isinstance(b, Inner) and a.right is b.right and isinstance(a.right, Var)):
        return None
    tt = type_of(a.left)
    if isinstance(tt, PairT):
        return None  # pair-typed contributions are joined by 6.28
    dims = shape_of(tt)
    iv = [fresh_index("i") for _ in dims]
    idx = affs(iv)
    p0, p1 = a.pred_at(idx), b.pred_at(idx)
    body = Add(iverson(p0, access(a.left, idx)), iverson(p1, access(b.left, idx)))
    dy = fresh_var("dY", tt)
    return BLet(dy, make_gens(list(zip(iv, dims)), body), Inner(dy, a.right, _union(p0, p1), tuple(iv)))


def _union(p0: Pred, p1: Pred) -> Pred:
    """``p0 ∨ p1`` without repeating a disjunct ``p0`` already has: a chain of
    contributions to one variable with the same support (``x[0]`` used N
    times) would otherwise grow a filter of N copies, quadratic in total."""
    have = set(disjuncts(p0))
    new = [q for q in disjuncts(p1) if q not in have]
    return disj(p0, *dict.fromkeys(new))


@rule("6.44", figure=15)
def transpose_addition(t):
    """<dY | D⟦[p0]·X0 + [p1]·X1⟧σ>_[p2]  ==>  <dY | D⟦X0⟧σ>_[p0 ∧ p2] ⊕ <dY | D⟦X1⟧σ>_[p1 ∧ p2]"""
    if not (isinstance(t, Inner) and isinstance(t.right, Deriv)):
        return None
    view = classify(t.right.expr)
    if not isinstance(view, AddRHS):
        return None
    v = _fresh_view(view)
    iv = tuple(i for i, _ in v.gens)
    p2 = t.pred_at(affs(iv))
    s = t.right.sigma
    return OPlus((
        Inner(t.left, Deriv(v.x0, s), conj(v.p0, p2), iv),
        Inner(t.left, Deriv(v.x1, s), conj(v.p1, p2), iv),
    ))


@rule("6.47", figure=15)
def transpose_map(t):
    """<dY | D⟦[p0]·f(X)⟧σ>_[p1]  ==>  let dX' = [p0 ∧ p1]·DTf(X, dY) in <dX' | D⟦X⟧σ>_[p0 ∧ p1]

    For f(X0, …): one dXk' = gen[~i] [p0 ∧ p1]·DT_k f(X0[~i], …; dY[~i]) and one
    product per argument (RULES.md Note on 6.47).  DT_k f is the black-box
    derivative D[f] with the one-hot tangent (0, …, dY, …, 0): one
    application, costed 1 (rule 4.26).  Returns the lets wrapped around the
    ⊕-sum of the products."""
    if not (isinstance(t, Inner) and isinstance(t.right, Deriv)):
        return None
    view = classify(t.right.expr)
    if not isinstance(view, MapRHS):
        return None
    v = _fresh_view(view)
    iv = tuple(i for i, _ in v.gens)
    idx = affs(iv)
    p = conj(v.p, t.pred_at(idx))
    args = tuple(access(x, idx) for x in v.args)
    dfn = derivative_def(v.fn).name
    dy = access(t.left, idx)
    lets_, terms = [], []
    for k, x in enumerate(v.args):
        onehot = tuple(dy if j == k else Const(0) for j in range(len(args)))
        d = fresh_var("d" + x.name + "'", x.type)
        lets_.append((d, make_gens(v.gens, iverson(p, Call(dfn, args + onehot)))))
        terms.append(Inner(d, Deriv(x, t.right.sigma), p, iv))
    out = OPlus(tuple(terms))
    for d, e in reversed(lets_):
        out = BLet(d, e, out)
    return out


# ==========================================================================
# Figure 16


@rule("6.48", figure=16)
def transpose_binary_contraction(t):
    """<dY | D⟦gen[~g] sum[~i0 ~i1 ~s] [p]·X0[~i0]·X1[~i1]⟧σ>_[p']
         ==>  let dX0' = gen[~i0] sum[~g ~i1 ~s] [p ∧ p']·dY[~g]·X1[~i1] in
              let dX1' = gen[~i1] sum[~i0 ~g ~s] [p ∧ p']·X0[~i0]·dY[~g] in
              <dX0' | D⟦X0⟧σ>_[exists[~g ~i1 ~s] (p ∧ p')] ⊕ <dX1' | D⟦X1⟧σ>_[exists[~i0 ~g ~s] (p ∧ p')]"""
    if not (isinstance(t, Inner) and isinstance(t.right, Deriv)):
        return None
    view = classify(t.right.expr)
    if not (isinstance(view, ContractRHS) and len(view.factors) == 2):
        return None
    v = paper_form(_fresh_view(view))
    (i0, i1), s = _split_sums(v)
    g = list(v.gens)
    pp = conj(v.p, t.pred_at(affs(i for i, _ in g)))
    dyg = access(t.left, affs(i for i, _ in g))
    (x0, a0), (x1, a1) = v.factors
    sig = t.right.sigma
    d0 = fresh_var("d" + x0.name + "'", x0.type)
    d1 = fresh_var("d" + x1.name + "'", x1.type)
    lets0, e0 = reduction(i0, g + i1 + s, iverson(pp, Mul(dyg, access(x1, affs(a1)))))
    lets1, e1 = reduction(i1, i0 + g + s, iverson(pp, Mul(access(x0, affs(a0)), dyg)))
    q0 = exists(g + i1 + s, pp)
    q1 = exists(i0 + g + s, pp)
    out = BLet(d0, e0, BLet(d1, e1, OPlus((
        Inner(d0, Deriv(x0, sig), q0, tuple(a0)),
        Inner(d1, Deriv(x1, sig), q1, tuple(a1)),
    ))))
    for r, e in reversed(lets0 + lets1):
        out = BLet(r, e, out)
    return out


@rule("6.49", figure=16)
def transpose_unary_contraction(t):
    """<dY | D⟦gen[~g] sum[~i ~s] [p]·X[~i]⟧σ>_[p']
         ==>  let dX' = gen[~i] sum[~g ~s] [p ∧ p']·dY[~g] in <dX' | D⟦X⟧σ>_[exists[~g ~s] (p ∧ p')]"""
    if not (isinstance(t, Inner) and isinstance(t.right, Deriv)):
        return None
    view = classify(t.right.expr)
    if not (isinstance(view, ContractRHS) and len(view.factors) == 1):
        return None
    v = paper_form(_fresh_view(view))
    (i0,), s = _split_sums(v)
    g = list(v.gens)
    pp = conj(v.p, t.pred_at(affs(i for i, _ in g)))
    dyg = access(t.left, affs(i for i, _ in g))
    ((x, a),) = v.factors
    d = fresh_var("d" + x.name + "'", x.type)
    inner = Inner(d, Deriv(x, t.right.sigma), exists(g + s, pp), tuple(a))
    lets_, value = reduction(i0, g + s, iverson(pp, dyg))
    out = BLet(d, value, inner)
    for r, e in reversed(lets_):
        out = BLet(r, e, out)
    return out


_ = (Gen, IndexVar, TensorT, describe)
