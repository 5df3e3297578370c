"""The work cost model of paper Section 4.3, Figure 6 (rules 4.22-4.34),
with its Figure 17 extension (rules 6.50-6.54) and Theorem 6.55's
input-output-sensitive cost.

Counting is static: the program's arithmetic is never executed.  One
structural recursion (:func:`cost_terms`) turns a program into a list of
*count terms*, each "``coeff`` operations of one kind at every point of the
iteration domain ``{binders : pred}``", where the binders are the enclosing
gens and sums and ``pred`` conjoins every enclosing predicate (a term under a
false bracket costs 0, rule 4.33, so costs are counted only where all
enclosing predicates hold).  The rules become:

* 4.25 / 4.26: one multiplication / call of ``f`` at every point of the
  context;
* 4.24 (*): ``[p0]·e0 + [p1]·e1`` adds one addition at the context points
  where ``p0 ∧ p1`` holds (an operand without a bracket has ``p = true``;
  directly nested brackets ``[p]·[q]·e`` combine to ``p ∧ q``);
* 4.30 (**): a chain ``sum[i0:n0] ... sum[ik:nk] [p]·e`` is costed jointly:
  ``+1`` addition per satisfying tuple (extended context), the body ``e``
  costed in the extended context, and ``-1`` addition at the outer points
  where ``exists[i0:n0] ... exists[ik:nk] p`` holds;
* 4.29 / 4.33 / 4.34: gens and brackets extend the context; pairs,
  projections, accesses and lets (4.27, 4.28, 4.31, 4.32) add their parts.

Each term is then counted: with isl (``isl_bridge``) at fixed sizes, by
enumerating the index domain with NumPy when a relation (data) occurs, or
symbolically (barvinok ``card``) in ``cost_symbolic``.

This module is the bottom of the cost model: Figure 17 (``cost_fig17``) and
the symbolic counts (``cost_symbolic``) build on it, and ``costmodel`` (the
public face, ``tl.cost``) re-exports all three.

Sharing: every entry point first applies
:func:`tensorlang.sharing.explicit_sharing`, so a DAG-shared sub-term the user
computed once is costed once (as the ``let`` it denotes).
"""

from __future__ import annotations

import weakref

from .deep import deep

from collections import defaultdict

import numpy as np

from . import isl_bridge as ib
from .errors import InputError, TensorLangError, UnsupportedError, describe
from .ir import (
    FALSE,
    TRUE,
    Access,
    Add,
    Call,
    Const,
    Exists,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    Pred,
    Proj,
    SizeVar,
    Sum,
    Var,
    as_aff,
    conj,
    free_indices,
    fresh_index,
    input_vars,
    relations_of,
    subst,
    sym_aff,
    walk,
)
from .cost_relations import _relation_factor, relation_count_values
from .cost_preds import _aff_vec, _expand, _pred_vec, has_relation  # noqa: F401  (has_relation: public)
from .ir import conjuncts
from .sharing import explicit_sharing
from .typecheck import check_program, type_of

ADD = "add"
MUL = "mul"


def call_kind(fn: str) -> str:
    return "call:" + fn


# --------------------------------------------------------------------------
# Count terms


def strip_brackets(e: Expr):
    """``[p0]·[p1]·...·e`` -> ``(p0 ∧ p1 ∧ ..., e)``; ``(TRUE, e)`` without a bracket."""
    ps = []
    while isinstance(e, Iverson):
        ps.append(e.pred)
        e = e.body
    return conj(*ps), e


def _bind(chain, bound: frozenset):
    """Rename binders of ``chain`` that shadow an enclosing binder (or each
    other), so every domain dimension has its own variable.  Returns the new
    chain and the renaming (IndexVar -> Aff) to apply to what is under it."""
    ren = {}
    out = []
    seen = set(bound)
    for i, n in chain:
        n = n.subst(ren) if ren else n
        if i in seen:
            j = fresh_index(i.name)
            ren[i] = sym_aff(j)
            i = j
        seen.add(i)
        out.append((i, n))
    return tuple(out), ren


class _Collector:
    """Signature: go : Expr × binders × Pred -> None, appending count terms
    ``(kind, coeff, binders, pred)`` whose total is ``Σ_σ $⟦e⟧σ`` over the
    context ``{binders : pred}``."""

    def __init__(self):
        self.terms: list = []

    def emit(self, kind, coeff, binders, pred):
        if pred is not FALSE:
            self.terms.append((kind, coeff, binders, pred))

    def go(self, e: Expr, B: tuple, P: Pred) -> None:
        if P is FALSE:  # 4.33: nothing under a false bracket is evaluated
            return
        match e:
            case Var() | Const():  # 4.22, 4.23
                return
            case Add(lhs=a, rhs=b):  # 4.24 (*)
                p0, _ = strip_brackets(a)
                p1, _ = strip_brackets(b)
                self.go(a, B, P)
                self.go(b, B, P)
                self.emit(ADD, 1, B, conj(P, p0, p1))
            case Mul(lhs=a, rhs=b):  # 4.25
                self.emit(MUL, 1, B, P)
                self.go(a, B, P)
                self.go(b, B, P)
            case Call(fn=f, args=args):  # 4.26
                self.emit(call_kind(f), 1, B, P)
                for a in args:
                    self.go(a, B, P)
            case Pair(fst=a, snd=b):  # 4.27
                self.go(a, B, P)
                self.go(b, B, P)
            case Proj(arg=a):  # 4.28
                self.go(a, B, P)
            case Gen(var=i, extent=n, body=b):  # 4.29
                (chain, ren) = _bind(((i, n),), _bound(B))
                if ren:
                    b = subst(b, idx=ren)
                self.go(b, B + chain, P)
            case Sum():  # 4.30 (**), chains of sums costed jointly
                chain = []
                x = e
                while isinstance(x, Sum):
                    chain.append((x.var, x.extent))
                    x = x.body
                chain, ren = _bind(tuple(chain), _bound(B))
                p, body = strip_brackets(x)
                if ren:
                    p = subst(p, idx=ren)
                    body = subst(body, idx=ren)
                inner = conj(P, p)
                self.emit(ADD, 1, B + chain, inner)
                self.go(body, B + chain, inner)
                ex = p
                for i, n in reversed(chain):
                    ex = Exists(i, n, ex)
                self.emit(ADD, -1, B, conj(P, ex))
            case Access(arr=a):  # 4.31
                self.go(a, B, P)
            case Iverson(pred=p, body=b):  # 4.33, 4.34
                self.go(b, B, conj(P, p))
            case Let(value=e0, body=e1):  # 4.32
                self.go(e0, B, P)
                self.go(e1, B, P)
            case _:
                raise TensorLangError(f"the cost model has no rule for {describe(e)}")


# This module's memos, keyed by the interned program (issue #14 item 4: each
# pass owns its memo; an entry goes with its program): its Fig. 6 terms per
# context, and its relations and inputs by name.
_TERMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _bound(B) -> frozenset:
    return frozenset(i for i, _ in B)


def cost_terms(expr: Expr, *, share: bool = True, context=((), TRUE)) -> dict:
    """The count terms of ``expr``: ``{(binders, pred): {kind: coeff}}``.

    ``kind`` is ``"add"``, ``"mul"`` or ``"call:<fn>"``; the cost is
    ``Σ coeff · #{binders : pred}``.  ``context = (binders, pred)`` costs an
    open term at every point of ``{binders : pred}`` (its free indices must
    be bound there).  Memoized on the (shared) program.
    """
    if not isinstance(expr, Expr):
        raise TensorLangError(f"cost: expected an expression, got {expr!r}")
    from .loops import has_loop, loop_cost_parts

    if has_loop(expr):  # issue #17: cost(init) + Σ_{t<T} cost(body) + cost(post), each loop-free
        merged: dict = defaultdict(lambda: defaultdict(int))
        for part, ctx in loop_cost_parts(expr, context):
            for k, d in cost_terms(part, share=share, context=ctx).items():
                for kind, v in d.items():
                    merged[k][kind] += v
        return {k: {kk: v for kk, v in d.items() if v} for k, d in merged.items()}
    B0, P0 = tuple(context[0]), context[1]
    if B0 or P0 is not TRUE:
        type_of(expr)
        bound = _bound(B0)
        loose = (free_indices(expr) | free_indices(P0)) - bound
        for _, n in B0:
            loose |= n.index_vars() - bound
        if loose:
            names = ", ".join(sorted(repr(i) for i in loose))
            raise TensorLangError(f"cost: free index variable(s) {names} of {describe(expr)} are not in the context")
    else:
        check_program(expr)
    if share:
        expr = explicit_sharing(expr)
    memo = _TERMS.get(expr)
    if memo is None:
        memo = _TERMS[expr] = {}
    got = memo.get((B0, P0))
    if got is None:
        c = _Collector()
        c.go(expr, B0, P0)
        acc: dict = defaultdict(lambda: defaultdict(int))
        for kind, coeff, B, P in c.terms:
            acc[(B, P)][kind] += coeff
        got = {k: {kk: v for kk, v in d.items() if v} for k, d in acc.items()}
        got = {k: d for k, d in got.items() if d}
        memo[(B0, P0)] = got
    return got


# --------------------------------------------------------------------------
# Counting points at given sizes


def count_affine(binders, pred: Pred, sizes: dict) -> int:
    """``#{binders : pred}`` at concrete sizes, with isl (affine predicates)."""
    text, names = ib.domain_text(binders, pred, sizes_positive=False)
    try:
        values = tuple(sizes[p.name] for p in names.params)
    except KeyError as exc:
        raise InputError(f"cost: no value for the size {exc.args[0]}; pass it as a keyword") from None
    return ib.count_text_at(text, values)


def count_enumerate(binders, pred: Pred, sizes: dict, rels: dict) -> int:
    """``#{binders : pred}`` by enumerating the index domain (relations are data).

    Conjuncts are applied as soon as their indices are bound, so a sparse
    relation prunes the enumeration early."""
    pending = conjuncts(pred)
    env: dict = {}
    N = 1
    bound: set = set()
    for i, n in binders:
        env, _, N = _expand(env, i, _aff_vec(n, env, sizes, N), N)
        bound.add(i)
        ready = [c for c in pending if free_indices(c) <= bound]
        if ready:
            pending = [c for c in pending if not free_indices(c) <= bound]
            mask = np.ones(N, dtype=bool)
            for c in ready:
                mask &= _pred_vec(c, env, sizes, rels, N)
            env = {k: v[mask] for k, v in env.items()}
            N = int(mask.sum())
    if pending:
        mask = np.ones(N, dtype=bool)
        for c in pending:
            mask &= _pred_vec(c, env, sizes, rels, N)
        N = int(mask.sum())
    return N


def _box(binders, pred: Pred, sizes: dict):
    """An upper bound on the index points enumeration visits (None: unknown)."""
    size = 1
    extents = [n for _, n in binders] + [x.extent for x in walk(pred) if isinstance(x, Exists)]
    for n in extents:
        if n.index_vars():
            return None
        size *= max(n.evaluate(sizes), 0)
    return size


def _count_relational(binders, pred: Pred, sizes: dict, rels: dict) -> int:
    """A relational group: by the data's count symbols when the domain has
    that form and is large, else by enumerating it."""
    box = _box(binders, pred, sizes)
    if box is None or box > 1_000_000:
        try:
            factor, rest, aff = _relation_factor(binders, pred)
        except UnsupportedError:
            pass
        else:
            vals = relation_count_values(factor, **sizes, **rels)
            return int(factor.subs(vals)) * count_affine(rest, aff, sizes)
    return count_enumerate(binders, pred, sizes, rels)


def count_components(binders, pred: Pred, sizes: dict, rels: dict) -> int:
    """``#{binders : pred}`` as a product over independent groups of binders
    (no conjunct or extent links two groups): affine groups are counted by
    isl, relational ones by enumeration, so an index that a relation does not
    mention never multiplies the enumeration."""
    conjs = conjuncts(pred)
    index = {i: k for k, (i, _) in enumerate(binders)}
    parent = list(range(len(binders)))

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def link(vs):
        ks = [index[v] for v in vs if v in index]
        for k in ks[1:]:
            parent[find(k)] = find(ks[0])

    for k, (i, n) in enumerate(binders):
        link([i, *n.index_vars()])
    for c in conjs:
        link(list(free_indices(c)))
    closed = [c for c in conjs if not (free_indices(c) & index.keys())]
    if closed and not _pred_vec(conj(*closed), {}, sizes, rels, 1)[0]:
        return 0
    total = 1
    for root in sorted({find(k) for k in range(len(binders))}):
        group = tuple(b for k, b in enumerate(binders) if find(k) == root)
        vars_ = {i for i, _ in group}
        p = conj(*[c for c in conjs if free_indices(c) & vars_])
        k = _count_relational(group, p, sizes, rels) if has_relation(p) else count_affine(group, p, sizes)
        if not k:
            return 0
        total *= k
    return total


def count_at(binders, pred: Pred, sizes: dict, rels: dict | None = None) -> int:
    """``#{binders : pred}`` at concrete sizes (and relation data, by name)."""
    if has_relation(pred):
        missing = [r.name for r in relations_of(pred) if r.name not in (rels or {})]
        if missing:
            raise InputError(f"cost: relation data for {missing} is needed; pass it as a keyword (R=bool array)")
        for x in walk(pred):
            if isinstance(x, SizeVar) and x.name not in sizes:
                raise InputError(f"cost: no value for the size {x.name}; pass it as a keyword")
        for _, n in binders:
            for s in n.size_vars():
                if s.name not in sizes:
                    raise InputError(f"cost: no value for the size {s.name}; pass it as a keyword")
        return count_components(binders, pred, sizes, rels)
    return count_affine(binders, pred, sizes)


# --------------------------------------------------------------------------
# Sizes and relation data from keywords


def _parse_kwargs(expr: Expr, kwargs: dict):
    """Keywords -> (sizes: name -> int, relations: name -> bool array).

    Sizes are ints; relations are bool arrays or coordinate rows
    (``tensorlang.evaluator.relation_dense``); an input array may be given
    instead of sizes, its shape then fixes its sizes.  Unused sizes are
    ignored (a pass may have removed the last use of a size)."""
    from .evaluator import infer_sizes, relation_array, relation_dense, _type_shape_leaves

    info = _NAMES.get(expr)
    if info is None:  # the passes' oracle costs one program at many sizes
        info = _NAMES[expr] = ({r.name: r for r in relations_of(expr)}, {v.name: v for v in input_vars(expr)})
    rels, ins = info
    sizes: dict = {}
    rel_data: dict = {}
    arrays: dict = {}
    for k, v in kwargs.items():
        if k in rels:
            rel_data[k] = relation_array(v, f"relation {k}")  # a scipy matrix or prepared data too
        elif k in ins and not isinstance(v, (int, np.integer)):
            arrays[k] = v
        elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            if v < 0:
                raise InputError(f"size {k} must be a non-negative int, got {v!r}")
            sizes[k] = int(v)
        else:
            raise InputError(f"cost: keyword {k!r} is neither a size (int), a relation nor an input of the program")
    constraints = []
    for name, val in arrays.items():
        v = ins[name]
        for path, ext, _ in _type_shape_leaves(v.type):
            leaf = val
            for p in path:
                leaf = leaf[p]
            shape = np.shape(leaf)
            if len(shape) != len(ext):
                raise InputError(f"input {name} must have {len(ext)} dimension(s) for type {v.type}, got {shape}")
            constraints += [(a, int(ln), f"input {name}") for a, ln in zip(ext, shape)]
    for name, val in rel_data.items():
        arr = np.asarray(val)
        if arr.dtype == bool:
            constraints += [(a, int(ln), f"relation {name}") for a, ln in zip(rels[name].extents, arr.shape)]
    if constraints:
        sizes = infer_sizes(constraints, sizes)
    dense = {}
    for name, val in rel_data.items():
        r = rels[name]
        for a in r.extents:
            for s in a.size_vars():
                if s.name not in sizes:
                    raise InputError(f"cost: no value for the size {s.name} (extent of relation {name})")
        dense[name] = relation_dense(r, val, sizes)
    return sizes, dense


# --------------------------------------------------------------------------
# Public API


@deep
def cost_breakdown(expr: Expr, **sizes_and_relations) -> dict:
    """Figure 6 operation counts at the given sizes, by category:
    ``{"adds": int, "mults": int, "calls": {fn: int}}`` (their sum is
    :func:`cost`).  Sizes are keywords (``n=1000``); relation data are
    keywords too (``R=bool array`` or integer coordinate rows)."""
    return _breakdown(cost_terms(expr), expr, sizes_and_relations)


@deep
def cost_over(expr: Expr, binders, pred: Pred = TRUE, **sizes_and_relations) -> dict:
    """``Σ_{σ ∈ {binders : pred}} $⟦expr⟧σ`` for an open term (free index
    variables bound by ``binders``, a sequence of ``(IndexVar, extent)``,
    outermost first), as a breakdown like :func:`cost_breakdown`.  For
    per-rule cost oracles, whose sides are sub-terms under binders."""
    context = (tuple((i, as_aff(n)) for i, n in binders), pred)
    carrier = Iverson(pred, expr)
    return _breakdown(cost_terms(expr, context=context), carrier, sizes_and_relations)


def _breakdown(terms: dict, carrier: Expr, kwargs: dict) -> dict:
    sizes, rels = _parse_kwargs(carrier, kwargs)
    out = {"adds": 0, "mults": 0, "calls": {}}
    for (B, P), kinds in terms.items():
        try:
            k = count_at(B, P, sizes, rels)
        except ib.isl.Error as exc:  # never a raw islpy error (issue #15)
            raise UnsupportedError(f"cost: isl cannot count the points of {describe(P)} at sizes {sizes}: {exc}") from None
        if not k:
            continue
        for kind, coeff in kinds.items():
            if kind == ADD:
                out["adds"] += coeff * k
            elif kind == MUL:
                out["mults"] += coeff * k
            else:
                fn = kind[5:]
                out["calls"][fn] = out["calls"].get(fn, 0) + coeff * k
    out["calls"] = {f: v for f, v in sorted(out["calls"].items()) if v}
    return out


@deep
def cost(expr: Expr, **sizes_and_relations) -> int:
    """``$⟦expr⟧[]`` of Figure 6 at the given sizes: the number of scalar
    additions, multiplications and black-box calls, with the (*) and (**)
    adjustments.  Static: counts iteration-domain points, never runs the
    program.  ``tl.cost(loss, n=1000, m=16)``; relations as ``R=data``."""
    b = cost_breakdown(expr, **sizes_and_relations)
    return b["adds"] + b["mults"] + sum(b["calls"].values())
