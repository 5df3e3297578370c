"""Reductions of an intermediate, turned into accumulations in its producer's loops (paper Sections 4.3, 5.4).

An adjoint often builds an intermediate ``X = gen[y..] s`` (n x n for the
n-body gradient: one vector per pair) and then reduces it along different
axes: ``D1 = gen[l,m] sum[i] [i<l]·X[i,l,m]·(-1)`` (column sums) and
``D2 = gen[l,m] sum[j] [l<j]·X[l,j,m]`` (row sums).  Gathering, each consumer
needs all of ``X``, so ``X`` is materialised (issue #13 item 2: +855 MB at
n = 4000).  Here each such consumer ``D = gen[h] sum[r] [p]·M`` whose one
access of ``X`` is ``X[σ(h, r)]`` with ``σ`` a permutation of its own
indices (a bijection from D's box onto X's box) is computed instead by
running over X's points ``y`` and adding ``M[(h, r) := σ⁻¹(y)]`` into
``D[h(σ⁻¹(y))]``.  The terms added are exactly those of the gather, once
each (the cost model's count is unchanged); only their summation order
differs.  The loop runs where X's bracket and p hold, so ``X`` must be a
factor of ``M`` (``M`` is zero wherever ``X`` is).  Each such loop reads
``X`` at its own point only, so :mod:`.contract` fuses it with X's loop and
replaces ``X`` by a per-iteration local: no n x n temporary remains.

The same accumulation serves a sum over a relation whose gather would run
transposed: ``dx[j] = sum[i] [S(i, j)]·A[i, j]·r[i]`` (the adjoint of
``A x``) gathers over S's coordinates sorted by column, reading A's values
through a permutation (issue #16 item 4); run over S in its own order it
reads ``vals[p]`` in sequence and adds into ``dx[j]``, and fuses with the
other passes over S (:mod:`.contract`).

Scatter loops write shared elements: their iterations are never spread over
threads as they are.  The kernel's parallel variant (codegen
``split_scatters``) runs them in per-thread chunks, each with its own
partial copy of the output, added in chunk order.
"""

from __future__ import annotations

from dataclasses import replace

from ..isl_bridge import isl

from ..ir import TRUE, Access, Add, Call, Gen, Iverson, Let, Mul, Proj, Rel, SparseVar, Sum, Var, accesses, conj, free_vars, gens, subst, sums, walk
from . import kir as K
from .domains import aff_expr, box_cons, has_rel
from ..ir import conjuncts
from .fusion import fuse
from .hoist import hoist, occurrences, split_bracket
from .interchange import TILE, accumulate_order
from .astgen import expr_of, isl_text
from .loopir import Alloc, If, Loop, Store


class ScatterPlan:
    """``D`` computed by accumulating into it from X's loops."""

    def __init__(self, x, x_binds, x_pred, d_binds, pred, value, tile=None):
        self.tile = tile  # strip-mine the innermost loop by this (interchange.py), or None
        self.x = x  # the reduced intermediate (a let Var)
        self.x_binds = x_binds  # X's gen binders [(IndexVar, extent)]
        self.x_pred = x_pred  # X's hoisted bracket (in X's indices)
        self.d_binds = d_binds  # D's gen binders, renamed to X's indices
        self.pred = pred  # D's bracket, in X's indices
        self.value = value  # the term added at X's point y, in X's indices


def _factors(e):
    if isinstance(e, Mul):
        return _factors(e.lhs) + _factors(e.rhs)
    return [e]


def _occurrences_of(e, x) -> int:
    """Occurrences (tree paths, not DAG nodes) of the variable ``x`` in ``e``."""
    if x not in free_vars(e):
        return 0
    match e:
        case Var():
            return 1
        case Access(arr=a):
            return _occurrences_of(a, x)
        case Gen(body=b) | Sum(body=b) | Iverson(body=b) | Proj(arg=b):
            return _occurrences_of(b, x)
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
            return _occurrences_of(a, x) + _occurrences_of(b, x)
        case Call(args=args):
            return sum(_occurrences_of(a, x) for a in args)
        case Let(value=a, body=b):
            return _occurrences_of(a, x) + _occurrences_of(b, x)
        case _:
            return 2  # unknown: never scatter


def _plain(e) -> bool:
    """No relation and no sparse tensor (their loops are driven by CSR data)."""
    return not any(isinstance(n, (Rel, SparseVar)) for n in walk(e))


def _plan(x, x_rhs, d_rhs):
    """The ScatterPlan of ``D = d_rhs`` reducing ``X = x_rhs``, or None."""
    xg, xbody = gens(x_rhs)
    dg, dbody = gens(d_rhs)
    if not xg or not dg or not _plain(x_rhs) or not _plain(d_rhs):
        return None
    p0, b1 = split_bracket(hoist(dbody))
    rb, inner = sums(b1)
    if not rb:
        return None
    p1, m = split_bracket(hoist(inner))
    hits = [f for f in _factors(m) if isinstance(f, Access) and accesses(f)[0] is x]
    if len(hits) != 1 or _occurrences_of(m, x) != 1 or x in free_vars(p0) or x in free_vars(p1):
        return None
    _, idx = accesses(hits[0])
    own = dict(dg + rb)
    if len(idx) != len(xg) or len(own) != len(idx):
        return None
    sigma = {}
    for a, (y, n) in zip(idx, xg):
        if a.const != 0 or len(a.terms) != 1 or a.terms[0][1] != 1:
            return None
        v = a.terms[0][0]
        if v not in own or v in sigma or own[v] is not n:  # nodes are hash-consed
            return None
        sigma[v] = y
    px, _ = split_bracket(hoist(xbody))
    d_binds = [(sigma[v], n) for v, n in dg]
    return ScatterPlan(x, xg, px, d_binds, subst(conj(p0, p1), idx=sigma), subst(m, idx=sigma))


def _plain_var(a):
    if a.const == 0 and len(a.terms) == 1 and a.terms[0][1] == 1:
        return a.terms[0][0]
    return None


def _transposed_plan(d_rhs):
    """``D = gen[h] sum[r] [R(.., r, .., h, ..) ∧ q]·M``: gathering, the sum
    would run over R's coordinates sorted by a later column (CSC-like order,
    values read through a permutation); accumulating instead, the loops run
    over R in its own order (CSR, ``vals[p]`` in sequence) and add into D."""
    dg, dbody = gens(d_rhs)
    if not dg:
        return None
    p0, b1 = split_bracket(hoist(dbody))
    rb, inner = sums(b1)
    if not rb:
        return None
    p1, m = split_bracket(hoist(inner))
    gv, sv = {v for v, _ in dg}, {v for v, _ in rb}
    for c in conjuncts(conj(p0, p1)):
        if not isinstance(c, Rel):
            continue
        args = [_plain_var(a) for a in c.args]
        if any(a is None for a in args) or len(set(args)) != len(args) or not set(args) <= gv | sv:
            continue
        kinds = ["s" if a in sv else "g" for a in args]
        if "s" not in kinds or "g" not in kinds[kinds.index("s"):]:
            continue  # the gather already runs in R's own order
        own = dict(dg + rb)
        order = [(a, own[a]) for a in args] + [(v, n) for v, n in dg + rb if v not in args]
        return ScatterPlan(None, order, TRUE, list(dg), conj(p0, p1), m)
    return None


def _strided_plan(d_rhs):
    """``D = gen[h] sum[r] [p]·M`` whose accesses run with stride 1 along a
    gen index: accumulated, that index innermost (interchange.py)."""
    dg, dbody = gens(d_rhs)
    if not dg or not _plain(d_rhs):
        return None
    p0, b1 = split_bracket(hoist(dbody))
    rb, inner = sums(b1)
    if not rb:
        return None
    p1, m = split_bracket(hoist(inner))
    order = accumulate_order(dg, dbody, rb, m)
    if order is None:
        return None
    return ScatterPlan(None, order, TRUE, list(dg), conj(p0, p1), m, TILE)


def scatter_plans(binds, outs) -> dict:
    """``{D: ScatterPlan}`` for the bindings that reduce an intermediate X
    used by nothing else (every use of X one of these reductions)."""
    outset = set(outs)
    plans: dict = {}
    for k, (x, rhs) in enumerate(binds):
        if x in outset or not gens(rhs)[0]:
            continue
        users = [(d, r) for d, r in binds[k + 1:] if x in free_vars(r)]
        if not users:
            continue
        got = {d: _plan(x, rhs, r) for d, r in users}
        if all(p is not None for p in got.values()):
            plans.update(got)
    for d, rhs in binds:
        if d not in plans:
            got = _transposed_plan(rhs) or _strided_plan(rhs)
            if got is not None:
                plans[d] = got
    return plans


def fuse_with_scatters(binds, outs, base):
    """(fused bindings, {D: ScatterPlan}): fusion.fuse, except that the
    reductions found here and the intermediates they reduce stay bindings."""
    keep = [o for o in outs if isinstance(o, Var)]
    pre = scatter_plans(binds, keep)
    keep += [p.x for p in pre.values() if p.x is not None] + list(pre)
    fused = fuse(binds, keep, base)
    return fused, scatter_plans(fused, [o for o in outs if isinstance(o, Var)])


def scatter_binding(lw, d, plan: ScatterPlan, role: str) -> list:
    """``D`` zeroed, then one loop over X's points adding each term into it.
    A tiled accumulation zeroes each tile of ``D`` as its loop starts
    (:func:`_tile_zeroing`) instead of the whole of ``D`` before the loops."""
    name = lw.names.new("array")
    ext = [n for _, n in plan.d_binds]
    alloc = Alloc(name, tuple(aff_expr(n, lw.scope0) for n in ext), True, role, d.name, role == "temporary")
    lw.allocs.append(alloc)
    lw.arrays[d] = (name, tuple(ext))
    lw.shared = occurrences(plan.value)
    lw.cse, lw._keep = {}, []
    pos = {y: k for k, (y, _) in enumerate(plan.x_binds)}
    seen = set()

    def emit(sc, dims):
        seen.update(dims)
        st, code = lw.scalar(plan.value, sc)
        at = tuple(K.Name(dims[pos[y]]) for y, _ in plan.d_binds)
        return st + [Store(name, at, K.sum_of([K.Load(name, at), code]))]

    order = (tuple(range(len(plan.x_binds))), plan.tile) if plan.tile else None
    stmts, _ = lw.block(plan.x_binds, conj(plan.x_pred, plan.pred), lw.scope0, emit, "scatter", plan.value, order)
    tiled = _tile_zeroing(lw, plan, name, alloc.shape, stmts, seen) if plan.tile else None
    if tiled is not None:
        stmts = tiled
        k = next(k for k, a in enumerate(lw.allocs) if a is alloc)
        lw.allocs[k] = alloc = replace(alloc, zero=False)
    return [alloc] + stmts


# A tiled accumulation (interchange.py) runs ``for t: for r: for h in tile t:
# D[.., h] += ..``: tile ``t`` is the only one writing ``D[.., h]`` for ``h``
# in ``[TILE t, TILE t + TILE)``.  Zeroing that slab as tile ``t`` starts,
# while it is about to be in cache, replaces the pass over the whole of ``D``
# before the loops (issue #13: the deconvolution's primal and gradient
# zeroed 4e6-element arrays on every call).  Every element receives the same
# additions in the same order from the same 0: bit-identical.  It is sound
# when the loops are one loop over ``t`` (no guard around it, each tile
# visited once) and every element of D's box has a point of the scatter's
# domain (so every tile is visited: the loop over ``t`` scans the projection
# of the domain).  Otherwise ``D`` is zeroed before the loops, as before.


def _uncovered(lw, plan: ScatterPlan):
    """The sizes (a kernel-IR condition) for which some point of D's box has
    no point of the scatter's domain (``K.Bool(False)``: none; the
    deconvolution's is ``m = 0``), or None when the domain is not affine."""
    xs = [y for y, _ in plan.x_binds]
    dv = [y for y, _ in plan.d_binds]
    if not set(dv) <= set(xs) or len(set(dv)) != len(dv):
        return None
    cs = conjuncts(conj(plan.x_pred, plan.pred))
    if any(has_rel(c) for c in cs):
        return None
    order = dv + [y for y in xs if y not in dv]
    nm = {y: f"zc{k}" for k, y in enumerate(order)}
    sc = lw.scope0.child(nm)
    ext = dict(plan.x_binds)
    box = box_cons([nm[y] for y in order], [ext[y] for y in order], sc)
    hdr, known = lw.scope0.header(), lw.scope0.cons
    full = isl.Set(f"{hdr} -> {{ [{', '.join(nm[y] for y in order)}] : {' and '.join(known + box + [sc.pred(c) for c in cs])} }}")
    proj = full.project_out(isl.dim_type.set, len(dv), len(order) - len(dv))
    want = isl.Set(f"{hdr} -> {{ [{', '.join(nm[y] for y in dv)}] : {' and '.join(known + box[:len(dv)])} }}")
    bad = want.subtract(proj).params()
    if bad.is_empty():
        return K.Bool(False)
    build = isl.AstBuild.from_context(isl.Set(lw.scope0.context_text()))
    return expr_of(build.expr_from_set(bad), {})


def _zero_loops(name: str, at: list, bounds: list) -> tuple:
    """``for at[k] in bounds[k]: name[at] = 0`` (one statement)."""
    zero = (Store(name, tuple(K.Name(v) for v in at), K.Float(0.0)),)
    for v, (a, b) in reversed(list(zip(at, bounds))):
        zero = (Loop(v, a, b, 1, zero, "gen"),)
    return zero


def _tile_zeroing(lw, plan: ScatterPlan, name: str, shape: tuple, stmts: list, dims: set):
    """``stmts`` with D's slab of each tile zeroed as the tile's loop starts,
    or None when that is not sound (see above)."""
    if plan.x is not None or len(stmts) != 1 or not isinstance(stmts[0], Loop):
        return None
    tl = stmts[0]
    if tl.step != 1 or tl.var in dims:
        return None  # not the tile's loop
    dv = [y for y, _ in plan.d_binds]
    tiled = plan.x_binds[-1][0]  # the strip-mined (innermost) index
    if tiled not in dv:
        return None
    bad = _uncovered(lw, plan)
    if bad is None:
        return None
    lo = K.IBin("*", K.Int(plan.tile), K.Name(tl.var))
    at = [lw.names.new("index") for _ in shape]
    slab = [(lo, K.MinMax("min", (n, K.int_add(lo, K.Int(plan.tile))))) if y == tiled else (K.Int(0), n)
            for y, n in zip(dv, shape)]
    out = [replace(tl, body=_zero_loops(name, at, slab) + tuple(tl.body))]
    if bad != K.Bool(False) and not _visits_every_tile(lw, tl, plan.tile, shape[dv.index(tiled)]):  # sizes for which some tile is never visited: all of D zeroed first
        all_at = [lw.names.new("index") for _ in shape]  # names apart: the parallel split reads them
        out.insert(0, If(bad, _zero_loops(name, all_at, [(K.Int(0), n) for n in shape]), ()))
    return out


def _visits_every_tile(lw, tl: Loop, tile: int, n: K.KExpr) -> bool:
    """Does the tile loop ``tl`` run every tile ``t`` of ``[0, n)`` (``0 <= t``,
    ``tile·t < n``) at every size?  Then each slab of D is zeroed as its tile
    starts even at the sizes where some point of D has no term (isl's loop
    over ``t`` need not be narrowed to them: the deconvolution's runs
    ``range(0, (n1 - 1) // 1024 + 1)`` whatever m is), and zeroing all of D
    first would be code that can only repeat the slabs' work: Numba compiles
    it for nothing (issue #14 item 6).  Decided with isl on the loop's
    kernel-IR bounds; False when they are not affine."""
    sizes = set(lw.scope0.params)
    lo, hi, ext = isl_text(tl.lo, sizes), isl_text(tl.hi, sizes), isl_text(n, sizes)
    if None in (lo, hi, ext):
        return False
    known = " and ".join(dict.fromkeys(lw.scope0.cons)) or "0 = 0"
    missed = isl.Set(f"{lw.scope0.header()} -> {{ [t] : {known} and 0 <= t and {tile} * t < {ext} "
                     f"and not ({lo} <= t and t < {hi}) }}")
    return missed.is_empty()


__all__ = ["ScatterPlan", "scatter_plans", "scatter_binding", "fuse_with_scatters"]
