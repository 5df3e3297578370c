"""Predicates for the simplifier (paper §2.1, §6; RULES.md Note in §2.1):
single-point elimination of summed or existential binders, syntactic
predicate simplification, and isl decisions under the enclosing binders and
brackets (``tensorlang.isl_bridge``).  Split from passes/simplify.py, which
applies them to expressions.
"""

from __future__ import annotations

import weakref

from tensorlang.errors import TensorLangError, UnsupportedError
from tensorlang.ir import (
    FALSE, TRUE, Aff, And, BoolLit, Cmp, Exists, IndexVar, Or, Pred, Rel, as_aff, conj, conjuncts, disj, disjuncts, free_indices, subst, subst_flat,
    sym_aff, walk,
)


# --------------------------------------------------------------------------
# Conjunctions


def _range(a: Aff, n: Aff) -> list:
    """``0 <= a < n`` as two conjuncts (folded when constant)."""
    out = []
    for c in (Cmp("<=", as_aff(0), a), Cmp("<", a, n)):
        d = c.rhs - c.lhs
        if d.is_const:
            if (c.op == "<=" and d.const >= 0) or (c.op == "<" and d.const > 0):
                continue
            return [FALSE]
        out.append(c)
    return out


def _solve(cs: list, binds: list):
    """Find ``(k, v, a)``: conjunct ``k`` is an equality fixing binder ``v`` to
    the affine ``a`` (coefficient ±1); the outermost binder first."""
    for v, _n in binds:
        for k, c in enumerate(cs):
            if isinstance(c, Cmp) and c.op == "==":
                # the coefficient first: the difference is built only for a hit
                if c.lhs.coeff(v) - c.rhs.coeff(v) not in (1, -1):
                    continue
                d = c.lhs - c.rhs
                co = d.coeff(v)
                if co in (1, -1):
                    rest = d - Aff(((v, co),), 0)
                    return k, v, rest * (-co)
    return None


def eliminate(binds: list, pred: Pred, body=None):
    """Single-point elimination over a block of binders.

    Signature: eliminate : [(IndexVar, Aff)] × Pred × (Expr | Pred | None)
    -> ([(IndexVar, Aff)], Pred, Expr | Pred | None).  Each binder fixed by
    an equality is substituted away and its range conjoined in its place.
    """
    binds = list(binds)
    cs = conjuncts(pred)
    while True:
        hit = _solve(cs, binds)
        if hit is None:
            break
        k, v, a = hit
        n = dict(binds)[v]
        binds = [(i, m) for i, m in binds if i is not v]
        rng = _range(a, n)
        cs = [subst(c, idx={v: a}) for c in cs[:k]] + rng + [subst(c, idx={v: a}) for c in cs[k + 1:]]
        if body is not None:
            body = subst(body, idx={v: a})
        if any(c is FALSE for c in cs):
            return binds, FALSE, body
    return binds, conj(*cs), body


# --------------------------------------------------------------------------
# Predicates: existential elimination and isl decisions


_POSITIVE: list = []  # isl_bridge.positive_sizes, imported on first use (islpy loads with it)


def _positive_sizes() -> bool:
    """``isl_bridge.positive_sizes()`` (a function-level import per call cost
    ten times the call: every decision and predicate asks, issue #14 item 6)."""
    if not _POSITIVE:
        from tensorlang.isl_bridge import positive_sizes

        _POSITIVE.append(positive_sizes)
    return _POSITIVE[0]()


def _dedupe(groups) -> list:
    out, seen = [], set()
    for g in groups:
        for c in g:
            if id(c) not in seen:
                seen.add(id(c))
                out.append(c)
    return out


# p -> simplify_pred(p) (this pass's memo), one table per size assumption
# (isl_bridge.positive_sizes: dropping an unused exists binder needs its range non-empty)
_SIMPLIFIED = {True: weakref.WeakKeyDictionary(), False: weakref.WeakKeyDictionary()}


def simplify_pred(p: Pred) -> Pred:
    """Signature: simplify_pred : Pred -> Pred (syntactic: literals, single-point exists).

    Memoized per predicate: a derivative's guards share sub-predicates as a
    DAG (the adjoint of a stencil applied K times), and the tree walk was
    exponential in K."""
    memo = _SIMPLIFIED[_positive_sizes()]
    got = memo.get(p)
    if got is None:
        got = memo[p] = _simplify_pred(p)
    return got


def _simplify_pred(p: Pred) -> Pred:
    match p:
        case BoolLit() | Cmp() | Rel():
            if isinstance(p, Cmp):
                d = p.rhs - p.lhs
                if d.is_const:
                    ok = {"<": d.const > 0, "<=": d.const >= 0, "==": d.const == 0}[p.op]
                    return TRUE if ok else FALSE
            return p
        case And():
            return conj(*_dedupe(conjuncts(simplify_pred(c)) for c in conjuncts(p)))
        case Or():
            ds = _dedupe([simplify_pred(d)] for d in disjuncts(p))
            # absorption: drop a disjunct whose conjuncts include another's
            sets = [set(map(id, conjuncts(d))) for d in ds]
            keep = [d for k, d in enumerate(ds)
                    if not any(j != k and sets[j] < sets[k] for j in range(len(ds)))]
            return disj(*keep)
        case Exists():
            binds, q = [], p
            while isinstance(q, Exists) and not any(q.var is i for i, _ in binds):  # a shadowing binder: its own block
                binds.append((q.var, q.extent))
                q = q.body
            q = simplify_pred(q)
            binds, q, _ = eliminate(binds, q)
            q = simplify_pred(q)
            if q is FALSE:
                return FALSE
            # drop binders the body does not mention (their ranges are non-empty for sizes >= 1,
            # or for sizes >= 0 under isl_bridge.sizes_may_be_zero when their extent says so)
            keep = [(i, n) for i, n in binds if i in free_indices(q) or not _nonempty(n)]
            for i, n in reversed(keep):
                q = Exists(i, n, q)
            return q
        case _:
            raise UnsupportedError(f"simplify: not a predicate: {p!r}")


def _nonempty(n: Aff) -> bool:
    """Is the range ``[0, n)`` non-empty for every size >= 1 (>= 0 when
    sizes may be zero)?"""
    least = sum(c for _, c in n.terms) if _positive_sizes() else 0
    return all(c >= 0 for _, c in n.terms) and n.const + least >= 1


def _affine(p: Pred) -> bool:
    t = type(p)
    if t is Cmp or t is BoolLit:  # (most conjuncts: no walk; Ctx.assume asks per bracket)
        return True
    if t is Rel:
        return False
    return not any(isinstance(x, Rel) for x in _pred_nodes(p))


def _pred_nodes(p: Pred):
    """Each distinct sub-predicate once (a DAG: composed guards share)."""
    return (x for x in walk(p) if isinstance(x, Pred))


class Ctx:
    """Enclosing binders (index var -> extent) and bracket conjuncts."""

    __slots__ = ("binds", "facts")

    def __init__(self, binds=(), facts=()):
        self.binds = tuple(binds)
        self.facts = tuple(facts)

    def bind(self, i, n) -> "Ctx":
        """Enter a binder ``i < n``.  A binder may shadow an enclosing one of
        the same index: inlining a let-bound gen under a loop whose canonical
        index is the gen's own (rule 5.21) puts ``gen[i:m] …`` inside
        ``gen[i:n] …``.  The enclosing ``i`` and every fact about it are then
        out of scope: kept, a fact ``0 ≤ i - 2`` about the outer ``i`` would
        decide the inner ``[0 ≤ i - 1]`` true and drop it."""
        if any(j == i for j, _ in self.binds) or any(i in free_indices(f) for f in self.facts):
            return Ctx(tuple(b for b in self.binds if b[0] != i) + ((i, n),),
                       tuple(f for f in self.facts if i not in free_indices(f)))
        return Ctx(self.binds + ((i, n),), self.facts)

    def assume(self, p: Pred) -> "Ctx":
        new = tuple(c for c in conjuncts(p) if _affine(c))
        return Ctx(self.binds, self.facts + new)


def _domain(ctx: Ctx, preds) -> list:
    """The binders of ``ctx`` that the predicates (transitively through their
    extents and the facts) mention."""
    need = set()
    for q in preds:
        need |= free_indices(q)
    binds = []
    for i, n in ctx.binds:
        binds.append((i, n))
    return [(i, n) for i, n in binds if i in need]


_DECIDED: dict = {}  # (binds, facts, p) -> decided p: a derivative asks the same question per term
_DECIDED_MAX = 1 << 16


def _slot(k: int) -> IndexVar:
    """The k-th binder's index in a decision's key (a namespace of its own:
    uids far below canonicalize's, so no program index is ever one)."""
    while len(_SLOTS) <= k:  # kept: one per binder depth ever asked about
        j = len(_SLOTS)
        _SLOTS.append(IndexVar(f"b{j}", -(1 << 40) - j))
    return _SLOTS[k]


_SLOTS: list = []


def decide(ctx: Ctx, p: Pred) -> Pred:
    """``p`` with conjuncts implied by the context dropped; FALSE when empty.

    A pure function of the binders, the facts and ``p``, and invariant under
    renaming the binders: every term of a derivative asks the same question
    about its own fresh indices.  So the question is asked once per shape:
    the binders are renamed to positional slots, the answer is kept in a
    bounded table (cleared when full; each isl question costs a parse and a
    solve), and renamed back."""
    pos = _positive_sizes()
    key = (ctx.binds, ctx.facts, p, pos)
    got = _DECIDED.get(key)
    if got is not None:
        return got
    if len(_DECIDED) >= _DECIDED_MAX:
        _DECIDED.clear()
    ren = {i: sym_aff(_slot(k)) for k, (i, _) in enumerate(ctx.binds)}
    binds = tuple((_slot(k), _renamed(n, ren)) for k, (_, n) in enumerate(ctx.binds))
    facts = tuple(_renamed(f, ren) for f in ctx.facts)
    q = _renamed(p, ren)
    ckey = (binds, facts, q, pos)
    ans = _DECIDED.get(ckey)
    if ans is None:
        ans = _DECIDED[ckey] = _decide(Ctx(binds, facts), q)
    back = {_slot(k): sym_aff(i) for k, (i, _) in enumerate(ctx.binds)}
    got = _DECIDED[key] = _renamed(ans, back)
    return got


def _renamed(x, ren: dict):
    """``x`` with the indices of ``ren`` renamed (``x`` itself when it mentions none)."""
    fi = free_indices(x)
    if not any(i in ren for i in fi):
        return x
    got = subst_flat(x, ren)  # binder-free: without subst's set-up (a derivative renames per term)
    if got is not None:
        return got
    return subst(x, idx={i: a for i, a in ren.items() if i in fi})


def _decide(ctx: Ctx, p: Pred) -> Pred:
    from tensorlang import isl_bridge

    p = simplify_pred(p)
    if p is TRUE or p is FALSE:
        return p
    cs = conjuncts(p)
    facts = [f for f in ctx.facts]
    affine_cs = [c for c in cs if _affine(c)]
    try:
        dom = _domain(ctx, facts + cs)
        if free_indices(conj(*cs, *facts)) - {i for i, _ in dom}:
            return p
        if isl_bridge.is_empty(dom, conj(*facts, *cs), rel="true"):
            return FALSE
        keep = list(cs)
        for c in affine_cs:
            others = [x for x in keep if x is not c and _affine(x)]
            if isl_bridge.implies(dom, conj(*facts, *others), c):
                keep = [x for x in keep if x is not c]
        return _gisted(dom, facts, keep)
    except (UnsupportedError, TensorLangError):
        return p


def _gisted(dom: list, facts: list, keep: list) -> Pred:
    """``conj(*keep)``, its affine part replaced by its isl gist under the
    domain and the facts (``isl_bridge.gist``) when that has fewer atoms.

    Only a disjunction or an existential is tried: dropping the implied
    conjuncts above already leaves a conjunction of comparisons as small as
    its gist.  The supports of shifted reads compose in an adjoint (issues
    #14/#17) into disjunctions that are not implied by the ranges (false at
    n = 1) and grow threefold per stencil step; their gist is ``2 ≤ n``."""
    aff = [c for c in keep if _affine(c)]
    if not any(_disjunctive(c) for c in aff):
        return conj(*keep)
    from tensorlang import isl_bridge

    q = conj(*aff)
    for g in isl_bridge.gist_forms(dom, conj(*facts), q):
        if _smaller(g, q):
            return conj(g, *(c for c in keep if not _affine(c)))
    return conj(*keep)


def _disjunctive(p: Pred) -> bool:
    t = type(p)
    if t is Cmp or t is BoolLit or t is Rel:  # (a comparison: no walk)
        return False
    return any(isinstance(x, (Or, Exists)) for x in _pred_nodes(p))


def _smaller(g: Pred, p: Pred) -> bool:
    """Is ``g`` the better form of ``p``: fewer atoms, and none relating more
    index variables than ``p``'s do?  (Inside ``i < h ∧ j < w`` the gist of
    ``j + 1 < w ∨ i + 1 < h`` is ``i + j + 2 < h + w``: one atom, but a
    diagonal bound where the backend had boxes.)"""
    return atoms(g) < atoms(p) and _width(g) <= _width(p)


def _width(p: Pred) -> int:
    """The most index variables one comparison of ``p`` mentions."""
    w = 0
    for x in _pred_nodes(p):
        if isinstance(x, Cmp):
            w = max(w, sum(1 for s, _ in x.lhs.terms + x.rhs.terms if isinstance(s, IndexVar)))
    return w


def atoms(p: Pred) -> int:
    """Comparisons and relation applications in the tree of ``p`` (shared
    sub-predicates counted per use: the printed size)."""
    memo: dict = {}

    def go(x):
        got = memo.get(x)
        if got is None:
            if isinstance(x, (Cmp, Rel)):
                got = 1
            elif isinstance(x, (And, Or)):
                got = go(x.lhs) + go(x.rhs)
            elif isinstance(x, Exists):
                got = go(x.body)
            else:
                got = 0
            memo[x] = got
        return got

    return go(p)


def compact(binds, p: Pred) -> Pred:
    """``p`` (an affine filter over the index variables ``binds``, each in
    its range) as its gist when that is smaller, else ``p`` itself.

    For the adjoint's filters (issues #14/#17): the filter of a merged
    cotangent is the union of its contributions' filters, and the next
    transposition nests it under an existential with a shifted index, so
    each level of an unrolled stencil held three copies of the last."""
    q = simplify_pred(p)
    if not _disjunctive(q):
        return p
    d = decide(Ctx(binds), q)
    return d if _smaller(d, p) else p
