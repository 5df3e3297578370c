"""Counting domains with relational predicates symbolically (paper Section
4.3: "with a data-driven p, use CSR-like representations"): the relation
count symbols of ``cost_symbolic``.

Relations (data predicates) are counted by named symbols:
``nnz_R`` is the number of true points of ``R``; ``nnz_R[*,_]`` the number
of distinct projections of its true points onto the ``*`` dimensions (the
``_`` ones are quantified by ``exists``: here, the non-empty rows of a
matrix pattern); ``nnz_R[*,0]`` counts the true points with second
coordinate 0 (a fixed coordinate is any index free of loop variables,
e.g. ``n - 1``).  A domain is expressible with these symbols when every
relation atom (possibly under ``exists`` over some of its arguments) applies
``R`` to distinct loop indices ranging exactly over ``R``'s extents (``*``),
to quantified indices ranging exactly over them (``_``), or to fixed
indices; the counted indices occur in no other relation atom, and every
affine constraint on them is implied by their ranges.  Then the count is
the product of the symbols times the count of the remaining affine domain.
Before that, indices fixed by an affine equality (``i = k``, as single-point
sums produce) are eliminated, which keeps the count; a relational predicate
free of loop indices (``R(0, 0) ∨ n < 2``) is one 0/1 symbol ``[R(0, 0) ∨ n < 2]``.
Anything else raises UnsupportedError (never a guess).
:func:`relation_count_values` evaluates the symbols on relation data.
"""

from __future__ import annotations

import numpy as np
import sympy

from . import isl_bridge as ib
from .cost_preds import has_relation
from .ir import conjuncts
from .errors import TensorLangError, UnsupportedError, describe
from .ir import TRUE, Aff, And, Cmp, Exists, IndexVar, Or, Pred, Rel, conj, free_indices, fresh_index, subst, sym_aff

# --------------------------------------------------------------------------
# Relation count symbols

_REL_SYMS: dict = {}
_REL_META: dict = {}


def relation_count_symbol(rel_name: str, spec) -> sympy.Symbol:
    """The count symbol of a relation pattern.

    ``spec`` has one entry per dimension of ``R``: ``"*"`` (counted), ``"_"``
    (projected away: quantified by ``exists``) or an affine index in the sizes
    (fixed, an ``Aff`` or int).  The symbol is the number of distinct tuples
    of the ``*`` coordinates of true points of ``R`` whose fixed coordinates
    have the given values.  All ``*``: ``nnz_R``; e.g. ``nnz_R[*,_]`` is the
    number of non-empty rows, ``nnz_R[*,0]`` the entries of column 0,
    ``nnz_R[2]`` the 0/1 value of ``R(2)``."""
    from .ir import as_aff

    spec = tuple(x if x in ("*", "_") else as_aff(x) for x in spec)
    if all(x == "*" for x in spec if isinstance(x, str)) and all(isinstance(x, str) for x in spec):
        name = f"nnz_{rel_name}"
    else:
        name = f"nnz_{rel_name}[{','.join(str(x) for x in spec)}]"
    sym = _REL_SYMS.get(name)
    if sym is None:
        sym = _REL_SYMS[name] = sympy.Symbol(name, integer=True, nonnegative=True)
        _REL_META[sym] = (rel_name, spec)
    return sym


def relation_truth_symbol(p: Pred) -> sympy.Symbol:
    """``[p]`` for a relational predicate ``p`` free of loop indices: its 0/1
    truth value (the same at every point of a domain)."""
    from .printer import pretty_pred

    name = f"[{pretty_pred(p)}]"
    sym = _REL_SYMS.get(name)
    if sym is None:
        sym = _REL_SYMS[name] = sympy.Symbol(name, integer=True, nonnegative=True)
        _REL_META[sym] = ("pred", p)
    return sym


def relation_count_values(expr, **sizes_and_relations) -> dict:
    """Values of the relation count symbols occurring in the sympy
    expression ``expr``, from relation data (bool arrays, by relation name)
    and sizes (ints, for fixed coordinates)."""
    sizes = {k: v for k, v in sizes_and_relations.items() if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
    out = {}
    for sym in expr.free_symbols:
        meta = _REL_META.get(sym)
        if meta is None:
            continue
        name, spec = meta
        if name == "pred":
            from .cost_preds import _pred_vec
            from .ir import relations_of

            rels = {}
            for r in relations_of(spec):
                if r.name not in sizes_and_relations:
                    raise TensorLangError(f"relation data for {r.name} is needed to evaluate {sym}")
                rels[r.name] = np.asarray(sizes_and_relations[r.name], dtype=bool)
            out[sym] = int(_pred_vec(spec, {}, sizes, rels, 1)[0])
            continue
        if name not in sizes_and_relations:
            raise TensorLangError(f"relation data for {name} is needed to evaluate {sym}")
        data = np.asarray(sizes_and_relations[name], dtype=bool)
        if data.ndim != len(spec):
            raise TensorLangError(f"relation {name} needs a bool array of {len(spec)} dimension(s)")
        index = []
        empty = False
        for d, x in enumerate(spec):
            if isinstance(x, str):
                index.append(slice(None))
            else:
                k = x.evaluate(sizes)
                empty |= not 0 <= k < data.shape[d]
                index.append(k if 0 <= k < data.shape[d] else 0)
        if empty:
            out[sym] = 0
            continue
        sub = data[tuple(index)]
        kept = [x for x in spec if isinstance(x, str)]
        drop = tuple(k for k, x in enumerate(kept) if x == "_")
        sub = sub.any(axis=drop) if drop else sub
        out[sym] = int(np.count_nonzero(sub))
    return out


def _plain_var(a: Aff):
    """The index variable ``i`` if ``a`` is exactly ``i``, else None."""
    if a.const == 0 and len(a.terms) == 1:
        s, c = a.terms[0]
        if c == 1 and isinstance(s, IndexVar):
            return s
    return None


def _solve_equalities(binders, conjs: list, protected: frozenset):
    """Eliminate the variables of ``binders`` that an affine equality fixes.

    For a conjunct ``a = b`` with ``a - b = ±v + r`` (``v`` a binder), the
    tuples of ``{binders : conjs}`` are in bijection with those of the domain
    without ``v``, ``v`` replaced by its solution and its range
    ``0 <= sol < extent`` added, so the count is unchanged.  A ``protected``
    variable (an argument of a relation) is eliminated only when its
    solution is a plain index or free of indices, so relation arguments stay
    of the forms the count symbols describe."""
    binders, conjs = tuple(binders), list(conjs)
    while True:
        ext = dict(binders)
        for c in conjs:
            if not (isinstance(c, Cmp) and c.op == "=="):
                continue
            d = c.lhs - c.rhs
            choice = None
            for s_, coef in d.terms:
                if s_ not in ext or abs(coef) != 1 or any(s_ in n.index_vars() for _, n in binders):
                    continue
                sol = (d - Aff(((s_, coef),), 0)) * (-coef)
                if s_ not in protected or _plain_var(sol) is not None or not sol.index_vars():
                    choice = (s_, sol)
                    if s_ not in protected:
                        break
            if choice is not None:
                v, sol = choice
                rest = [subst(x, idx={v: sol}) for x in conjs if x is not c]
                rest += [Cmp("<=", Aff((), 0), sol), Cmp("<", sol, ext[v])]
                conjs = [y for x in rest for y in conjuncts(x)]
                binders = tuple(b for b in binders if b[0] is not v)
                break
        else:
            return binders, conjs


def _split_atom(c: Pred, B):
    """A conjunct containing a relation -> (R, spec, counted args, affine
    conjuncts pulled out of exists), or UnsupportedError."""
    exvars = []
    body = c
    taken = {i for i, _ in B}
    while isinstance(body, Exists):
        v, inner = body.var, body.body
        if v in taken:  # shadows a loop index: rename apart
            w = fresh_index(v.name)
            inner = subst(inner, idx={v: sym_aff(w)})
            v = w
        taken.add(v)
        exvars.append((v, body.extent))
        body = inner
    if not isinstance(body, (Rel, And)) and not exvars:
        raise UnsupportedError(
            f"symbolic cost: the relational predicate {describe(c)} is not a conjunction of relation atoms "
            "(a relation under 'or' has no count symbol); use tl.cost with relation data"
        )
    parts = conjuncts(body)
    protected = frozenset().union(*(free_indices(p) for p in parts if has_relation(p)))
    exvars, parts = _solve_equalities(exvars, parts, protected)
    exvars = list(exvars)
    ex_set = {i for i, _ in exvars}
    rels = [p for p in parts if has_relation(p)]
    outer = [p for p in parts if not has_relation(p) and not (free_indices(p) & ex_set)]
    inner_aff = [p for p in parts if not has_relation(p) and (free_indices(p) & ex_set)]
    if len(rels) != 1 or not isinstance(rels[0], Rel):
        raise UnsupportedError(
            f"symbolic cost: {describe(c)} needs a count of a combination of relations; "
            "use tl.cost with relation data"
        )
    atom = rels[0]
    if inner_aff:
        # allowed only when implied by the ranges of the existential variables
        if not ib.implies(tuple(B) + tuple(exvars), TRUE, conj(*inner_aff)):
            raise UnsupportedError(
                f"symbolic cost: {describe(c)} restricts a relation by an affine condition on a quantified "
                "index; use tl.cost with relation data"
            )
    spec, counted = [], []
    used_ex = set()
    exts = dict(exvars)
    for d, a in enumerate(atom.args):
        v = _plain_var(a)
        if v is not None and v in ex_set:
            if v in used_ex or exts[v] is not atom.rel.extents[d]:
                raise UnsupportedError(
                    f"symbolic cost: in {describe(c)} the quantified index {v!r} must range exactly over "
                    f"dimension {d} of {atom.rel.name}"
                )
            used_ex.add(v)
            spec.append("_")
        elif a.index_vars() & ex_set:
            raise UnsupportedError(f"symbolic cost: {describe(c)} applies a relation to a non-variable index {a}")
        elif not a.index_vars():
            spec.append(a)  # a fixed coordinate (sizes and constants only)
        else:
            spec.append("*")
            counted.append(a)
    for v, ext in exvars:
        if v not in used_ex:  # exists over an unused variable: its range is non-empty
            outer.append(Cmp("<=", Aff((), 1), ext))
    return atom.rel, tuple(spec), tuple(counted), outer


def _relation_factor(B, P: Pred):
    """``#{B : P}`` = Π symbols × ``#{B' : A}``: returns (sympy factor, B', A)."""
    conjs = []
    for c in conjuncts(P):
        if c not in conjs:
            conjs.append(c)
    protected = frozenset().union(*(free_indices(c) for c in conjs if has_relation(c)))
    B, conjs = _solve_equalities(B, conjs, protected)
    affine, atoms = [], []
    bvars = {i for i, _ in B}
    closed = sympy.Integer(1)
    for c in conjs:
        if not has_relation(c):
            affine.append(c)
            continue
        if not (free_indices(c) & bvars):  # the same truth value at every point
            closed *= relation_truth_symbol(c)
            continue
        rel, spec, args, outer = _split_atom(c, B)
        affine.extend(outer)
        atoms.append((rel, spec, args, c))
    # the same atom in two enclosing predicates counts once
    uniq = {}
    for rel, spec, args, c in atoms:
        uniq.setdefault((rel, tuple(x if isinstance(x, str) else id(x) for x in spec), args), (spec, c))
    ext = dict(B)
    used: set = set()
    factor = sympy.Integer(1)
    for (rel, _, args), (spec, c) in uniq.items():
        dims = [d for d, x in enumerate(spec) if x == "*"]
        for d, a in zip(dims, args):
            v = _plain_var(a)
            if v is None or v not in ext or v in used or ext[v] is not rel.extents[d]:
                raise UnsupportedError(
                    f"symbolic cost: {describe(c)} must apply {rel.name} to distinct loop indices ranging "
                    f"exactly over its extents (dimension {d}: {a}); use tl.cost with relation data"
                )
            used.add(v)
        factor *= relation_count_symbol(rel.name, spec)
    for i, n in B:
        if n.index_vars() & used:
            raise UnsupportedError(f"symbolic cost: the range of {i!r} depends on an index constrained by a relation")
    free_aff = [a for a in affine if not (free_indices(a) & used)]
    tied = [a for a in affine if free_indices(a) & used]
    if tied and not ib.implies(tuple(B), conj(*free_aff), conj(*tied)):
        raise UnsupportedError(
            "symbolic cost: an affine condition "
            f"{describe(conj(*tied))} restricts indices of a relation; use tl.cost with relation data"
        )
    rest = tuple((i, n) for i, n in B if i not in used)
    return factor * closed, rest, conj(*free_aff)



def _exists_over_or(c: Pred) -> Pred:
    """``exists[v] (r ∧ (x ∨ y))`` -> ``exists[v] (r ∧ x) ∨ exists[v] (r ∧ y)``
    for a relational disjunction (so inclusion-exclusion can split it)."""
    if not isinstance(c, Exists):
        return c
    body = _exists_over_or(c.body)
    if isinstance(body, Or):
        return Or(Exists(c.var, c.extent, body.lhs), Exists(c.var, c.extent, body.rhs))
    parts = conjuncts(body)
    for k, p in enumerate(parts):
        p = _exists_over_or(p)
        if isinstance(p, Or) and has_relation(p):
            rest = parts[:k] + parts[k + 1:]
            return Or(_exists_over_or(Exists(c.var, c.extent, conj(*rest, p.lhs))),
                      _exists_over_or(Exists(c.var, c.extent, conj(*rest, p.rhs))))
    return Exists(c.var, c.extent, body) if body is not c.body else c
