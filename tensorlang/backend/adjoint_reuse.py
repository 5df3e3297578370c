"""Adjoint reuse of a transposed linear operator (paper Sections 4.3, 5.4;
issue #17, the heat step's adjoint).

The adjoint of ``s' = s + κ·L s`` (``L`` a linear stencil with guards) has two
results over one domain:

* the parameter's cotangent ``dκ = Σ_i λ[i]·(Σ_m c_m·[g_m(i)]·u[i + a_m])``
  (``<λ, L u>``: one stencil of ``u`` per point), and
* the state's cotangent ``dY[j] = … κ·(Σ_m c_m·[h_m(j)]·λ[j - a_m]) …``
  (``Lᵀλ``, transposed by the adjoint rules: one stencil of ``λ`` per point).

The identity ``<λ, L u> = <Lᵀλ, u>`` computes the first from the second:
re-index each summand of ``dκ`` by ``j = i + a_m`` (a translation of the
summation variable: invertible and affine), which turns the term into
``Σ_j c_m·[j - a_m ∈ D ∧ g_m(j - a_m)]·λ[j - a_m]·u[j]``.  When, for every
``m``, that set of ``j`` equals the set ``{j ∈ E : h_m(j)}`` of ``dY``'s
matching term (``E`` its gen domain; proved by isl, parametric in the sizes,
never read off text) and the coefficients agree, the bracketed sum is the
common sub-expression ``w = Lᵀλ`` of ``dY``, so::

    let w  = gen[j] Σ_m c_m·[h_m(j)]·λ[j - a_m]
    let dκ = sum[j] u[j]·w[j]
    let dY = gen[j] … κ·w[j] …

One stencil per point instead of two: the cost model's count drops (the
stencil's ``+`` and ``·`` once, one ``·`` and ``+`` per point for ``dκ``).
It applies to any "scalar parameter times linear stencil" body (heat's κ,
the wave equation's c²), in any rank, with any guards isl can decide.

``reuse_transpose`` rewrites a backend let-block (``fusion.py``'s grammar)
and returns the names of the ``w`` it introduced: ``fusion.fuse`` substitutes
each ``w`` into its two consumers (read at their own point only), and
``hfuse.py`` shares the then-identical expression between the fused nests,
so the serial kernel computes ``Lᵀλ`` once per point and keeps nothing in
memory.  ``reuse_program`` is the same rewrite on a let-block program (the
form the tests and the cost model see).
"""

from __future__ import annotations

from ..isl_bridge import isl

from ..errors import UnsupportedError
from ..ir import (
    Access,
    Add,
    Const,
    Iverson,
    Mul,
    Proj,
    RealT,
    TensorT,
    Var,
    access,
    accesses,
    fresh_index,
    fresh_var,
    gens,
    lets,
    make_gens,
    make_lets,
    make_sums,
    sums,
)
from ..typecheck import type_of
from .domains import Scope, box_cons, has_rel
from .shift_group import translation


def _array(e) -> bool:
    """An input or bound array: a variable or a projection chain of one."""
    while isinstance(e, Proj):
        e = e.arg
    return isinstance(e, Var)


class _Term:
    """``coef·[preds]·arr[binder_k + off_k]`` (a term of a linear stencil)."""

    __slots__ = ("coef", "preds", "arr", "off", "acc")

    def __init__(self, coef, preds, arr, off, acc):
        self.coef, self.preds, self.arr, self.off, self.acc = coef, preds, arr, off, acc

    def expr(self):
        e = self.acc if self.coef == 1 else Mul(Const(self.coef), self.acc)
        for p in reversed(self.preds):
            e = Iverson(p, e)
        return e


def _linear(e, binders):
    """The terms of ``e`` as a linear combination of translated accesses
    ``arr[binder + const]`` (constants, brackets, ``+``, ``·`` by a
    constant), or None when ``e`` is not one."""
    match e:
        case Add(lhs=a, rhs=b):
            x, y = _linear(a, binders), _linear(b, binders)
            return None if x is None or y is None else x + y
        case Mul(lhs=Const(value=c), rhs=b) | Mul(lhs=b, rhs=Const(value=c)):
            x = _linear(b, binders)
            return None if x is None else [_Term(c * t.coef, t.preds, t.arr, t.off, t.acc) for t in x]
        case Iverson(pred=p, body=b):
            x = _linear(b, binders)
            return None if x is None else [_Term(t.coef, [p] + t.preds, t.arr, t.off, t.acc) for t in x]
        case Access():
            base, idx = accesses(e)
            off = translation(idx, binders) if _array(base) else None
            return None if off is None else [_Term(1, [], base, off, e)]
    return None


def _own_access(e, binders):
    """``x`` when ``e`` is ``x[binders]`` (the element at the point), else None."""
    if not isinstance(e, Access):
        return None
    base, idx = accesses(e)
    if not _array(base) or len(idx) != len(binders):
        return None
    if all(len(a.terms) == 1 and a.terms[0] == (i, 1) and a.const == 0 for a, i in zip(idx, binders)):
        return base
    return None


def _pairing(body, binders):
    """``(λ, [terms of L u])`` of a sum body ``λ[i]·(L u)(i)``, or None."""
    if not isinstance(body, Mul):
        return None
    for a, b in ((body.lhs, body.rhs), (body.rhs, body.lhs)):
        lam = _own_access(a, binders)
        terms = _linear(b, binders) if lam is not None else None
        if terms and len({t.arr for t in terms}) == 1 and len({t.off for t in terms}) == len(terms):
            return lam, terms
    return None


def _set(base: Scope, binders, extents, preds, names):
    """isl text of ``{S[names] : box ∧ preds}`` over the binders."""
    sc = base.child({i: nm for i, nm in zip(binders, names)})
    cons = box_cons(names, extents, sc) + [sc.pred(p) for p in preds]
    return sc, f"{sc.header()} -> {{ S[{', '.join(names)}] : {' and '.join(sc.cons + cons) or '0 = 0'} }}"


def _same_terms(base: Scope, sdom, sterms, gdom, gterms) -> bool:
    """Every summand of ``dκ`` re-indexed by ``j = i + a`` is a term of ``Lᵀλ``
    with the same coefficient and the same set of points ``j`` (module doc)."""
    if len(sterms) != len(gterms):
        return False
    if any(has_rel(p) for t in sterms + gterms for p in t.preds):
        return False  # isl sees a relation as its range facts only: an over-approximation, no equality
    by_off = {t.off: t for t in gterms}
    if len(by_off) != len(gterms):
        return False
    si, sn = [i for i, _ in sdom], [n for _, n in sdom]
    gi, gn = [i for i, _ in gdom], [n for _, n in gdom]
    dims = [f"q{k}" for k in range(len(si))]
    try:
        for t in sterms:
            m = by_off.get(tuple(-a for a in t.off))
            if m is None or float(m.coef) != float(t.coef):
                return False
            sc, src = _set(base, si, sn, t.preds, dims)
            shift = isl.Map(f"{sc.header()} -> {{ S[{', '.join(dims)}] -> "
                            f"S[{', '.join(f'{d} + {a}' for d, a in zip(dims, t.off))}] }}")
            _, dst = _set(base, gi, gn, m.preds, dims)
            if not isl.Set(src).apply(shift).is_equal(isl.Set(dst)):
                return False
    except (UnsupportedError, isl.Error):
        return False
    return True


def _find(e, gbinders, lam, want):
    """``(sub-expression, its terms)``: the sub-expression of ``e`` (through
    ``+`` and ``·``, no binders) that is the linear stencil of ``λ`` ``want``
    accepts, or None."""
    terms = _linear(e, gbinders)
    if terms and all(t.arr is lam for t in terms) and want(terms):
        return e, terms
    if isinstance(e, (Add, Mul)):
        got = _find(e.lhs, gbinders, lam, want)
        return got if got is not None else _find(e.rhs, gbinders, lam, want)
    return None


def _ops(e) -> int:
    """``+`` and ``·`` of an expression tree (Fig. 6 per point: its brackets
    are the same in both forms compared)."""
    if isinstance(e, (Add, Mul)):
        return 1 + _ops(e.lhs) + _ops(e.rhs)
    if isinstance(e, Iverson):
        return _ops(e.body)
    return 0


def _replace(e, old, new):
    if e is old:
        return new
    if isinstance(e, Add):
        return Add(_replace(e.lhs, old, new), _replace(e.rhs, old, new))
    if isinstance(e, Mul):
        return Mul(_replace(e.lhs, old, new), _replace(e.rhs, old, new))
    return e


def _same_extents(t, exts) -> bool:
    for n in exts:
        if not isinstance(t, TensorT) or t.extent is not n:
            return False
        t = t.elem
    return isinstance(t, RealT)


def _rewrite_one(binds, base: Scope):
    """``(binds', w)`` after one application, or None."""
    for k, (dk, srhs) in enumerate(binds):
        sdom, sbody = sums(srhs)
        if not sdom or not isinstance(type_of(srhs), RealT):
            continue
        got = _pairing(sbody, [i for i, _ in sdom])
        if got is None:
            continue
        lam, sterms = got
        if len(sterms) < 2:
            continue  # one term (a translated copy): <λ, u[· + a]> is already one read per point
        u = sterms[0].arr
        for j, (dy, grhs) in enumerate(binds):
            gdom, gbody = gens(grhs)
            if j == k or len(gdom) != len(sdom) or not isinstance(type_of(gbody), RealT):
                continue
            gi = [i for i, _ in gdom]
            if not _same_extents(type_of(u), [n for _, n in gdom]):
                continue  # Σ_j u[j]·w[j] over dY's domain must stay in u's bounds
            got = _find(gbody, gi, lam, lambda ts: _same_terms(base, sdom, sterms, gdom, ts))
            if got is None:
                continue
            P, gterms = got
            # w in the terms' own form (Σ c·[h]·λ[j - a]): both consumers then
            # carry the same expression, which no earlier element replaces
            # in one of them only (lower.py's elements.reuse)
            W = gterms[0].expr()
            for t in gterms[1:]:
                W = Add(W, t.expr())
            if _ops(W) > _ops(P):
                W = P  # never more work than dY did (a coefficient factored out of the terms)
            w = fresh_var("lt", type_of(make_gens(gdom, W)))
            new_g = make_gens(gdom, _replace(gbody, P, access(w, gi)))
            q = [fresh_index("q") for _ in gdom]
            new_s = make_sums(list(zip(q, [n for _, n in gdom])), Mul(access(u, q), access(w, q)))
            out = list(binds)
            out[k], out[j] = (dk, new_s), (dy, new_g)
            out.insert(min(j, k), (w, make_gens(gdom, W)))
            return out, w
    return None


def reuse_transpose(binds, base: Scope):
    """Signature: reuse_transpose : [(Var, Expr)] -> ([(Var, Expr)], {Var}).

    The bindings with every ``<λ, L u>`` reduction rewritten as ``<Lᵀλ, u>``
    over the ``Lᵀλ`` a gen binding computes (module doc), and the ``w`` made."""
    made = set()
    binds = list(binds)
    for _ in range(len(binds)):
        got = _rewrite_one(binds, base)
        if got is None:
            break
        binds, w = got
        made.add(w)
    return binds, made


def reuse_program(prog, base: Scope):
    """The rewrite on a let-block program in the backend grammar (for the
    cost model and tests): ``let w = … in …`` with ``w`` kept bound;
    ``base``: the program's size scope (``lower.Lowerer(prog).scope0``)."""
    binds, out = lets(prog)
    binds, _ = reuse_transpose(binds, base)
    return make_lets(binds, out)


__all__ = ["reuse_transpose", "reuse_program"]
