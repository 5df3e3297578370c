"""Contractions in the shape rules 6.48/6.49 transpose (paper Section 6.3, Figure 16).

``paper_form`` puts a tensor-SSA contraction into the shape the rules assume
(distinct summation variables per factor, RULES.md Note on Fig. 10);
``reduction`` builds the summed cotangent of a rule's right side without
repeating a reduction the context does not vary (Theorem 6.55 needs each rule
cost-preserving, RULES.md 5.7 step 4).
"""

from __future__ import annotations

from tensorlang.ir import TRUE, Cmp, Exists, Expr, Iverson, Var, access, conj, free_indices, fresh_index, fresh_var, make_gens, make_sums, shape_of, sym_aff
from tensorlang.typecheck import iverson
from tensorlang.typecheck import type_of

from .ssa_form import ContractRHS


def _exists(binds, p):
    for i, n in reversed(list(binds)):
        p = Exists(i, n, p)
    return p


def affs(ivs) -> list:
    return [sym_aff(i) for i in ivs]


def paper_form(view: ContractRHS) -> ContractRHS:
    """Make each factor's access list ``~i0``/``~i1`` distinct summation
    variables ranging over exactly that factor's shape, linked to the rest
    only through ``p`` (the shape Fig. 10 and rule 6.48 assume).  An access
    by a generator variable, a repeated variable, a variable shared between
    the factors or one whose range differs from the dimension becomes a new
    summation variable ``u`` with ``u = v`` conjoined to ``p``."""
    gens_ = set(i for i, _ in view.gens)
    ext = dict(view.gens) | dict(view.sums)
    sums_ = list(view.sums)
    p = view.p
    seen: set = set()
    factors = []
    for x, idx in view.factors:
        dims = shape_of(x.type)
        new = []
        for v, n in zip(idx, dims):
            if v in gens_ or v in seen or ext[v] is not n:
                u = fresh_index("u")
                sums_.append((u, n))
                p = conj(p, Cmp("==", sym_aff(u), sym_aff(v)))
                v = u
            seen.add(v)
            new.append(v)
        factors.append((x, tuple(new)))
    return ContractRHS(view.gens, tuple(sums_), p, tuple(factors))


def _split_sums(view: ContractRHS):
    """``(~i0 binds, ~i1 binds, ~s binds)`` of a paper-form contraction."""
    ext = dict(view.sums)
    lists = [[(v, ext[v]) for v in idx] for _, idx in view.factors]
    used = {v for _, idx in view.factors for v in idx}
    s = [(v, n) for v, n in view.sums if v not in used]
    return lists, s


def reduction(gens: list, binds: list, body: Expr):
    """``gen[~gens] sum[~binds] body`` as ``(lets, value)`` that compute it
    without repeating a reduction its context does not vary.

    Rules 6.48/6.49 sum the cotangent over every binder of the primal
    (``sum[~g ~s]``).  Where the primal's summand does not use a binder
    (``gen[~g] sum[k:n+1] s0``), the cost model pays that sum once and
    shares it (DAG sharing, rule 4.32), but the transposed
    ``sum[~g] sum[k:n+1] dY[~g]`` pays ``|~g|·(n+1)`` additions: Theorem 6.55
    failed (397 > 4·56 at n = 7; RULES.md 5.7 step 4 needs every rule
    cost-preserving).  Two rewrites that keep the value restore it (4.30 (**):
    a reduction of ``N`` terms costs ``N - 1``; 4.32: a let is paid once):

    * the binders the summand does not use are moved outermost
      (``sum`` commutes) and the rest is bound once:
      ``let r = sum[~used] body in sum[~unused] r`` costs
      ``(|used| - 1) + (|unused| - 1) <= |used|·|unused| - 1``;
    * where the reduction does not use ``~gens`` (X broadcast, rule 6.49),
      it is bound once outside ``gen[~gens]`` instead of per element.
    """
    fi = free_indices(body)
    bound = {i for i, _ in binds}
    if any(free_indices(n) & bound for _, n in binds):
        return [], make_gens(gens, make_sums(binds, body))  # a dependent extent: no reordering
    used = [(i, n) for i, n in binds if i in fi]
    unused = [(i, n) for i, n in binds if i not in fi]
    lets_: list = []
    gvars = {i for i, _ in gens}
    summed = make_sums(used, body)
    if unused:
        if gens and free_indices(summed) & gvars:
            # shared per element of ~gens: r[~gens] is the reduction over ~used
            r = fresh_var("r", type_of(make_gens(gens, summed)))
            lets_.append((r, make_gens(gens, summed)))
            summed = access(r, affs(i for i, _ in gens))
        else:
            r = fresh_var("r", type_of(summed))
            lets_.append((r, summed))
            summed = r
        # summed only where the reduction has a term (its bracket's support over
        # ~gens): unbracketed, sum[~unused] would add |unused| zeros at every
        # element that the primal's bracket skipped
        pred = body.pred if isinstance(body, Iverson) else TRUE
        summed = make_sums(unused, iverson(_exists(used, pred), summed))
    if gens and not (free_indices(summed) & gvars):
        # rule 6.49, X broadcast (no index of X occurs in the summand): the reduction is
        # the same at every ~i, so it is bound once; inside gen[~i] it would be
        # recomputed per element, |~i| times the primal's cost (Theorem 6.55).
        if not isinstance(summed, Var):
            r = fresh_var("r", type_of(summed))
            lets_.append((r, summed))
            summed = r
    return lets_, make_gens(gens, summed)
