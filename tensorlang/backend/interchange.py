"""Loop order from access strides (paper Section 4.3; issue #13 item 3).

A gen over ``h`` whose element is a sum over ``r`` is lowered, gathering, as
``for h: acc = 0; for r: acc += M(h, r); D[h] = acc``: the innermost loop is
the sum's.  When the accesses run with stride 1 along a gen index instead
(the MLP's bias gradient ``gen[j] sum[b] dY[b, j]`` walks a column of
``dY``; the deconvolution's ``gen[i] sum[j] x[i - j + m - 1]·c[j]`` has an
innermost loop of length ``m`` carrying a reduction, which LLVM does not
vectorise under IEEE rules), the binding is accumulated instead
(scatter.py's plan with these loops)::

    D = 0
    for t in tiles of h_k:        # D's tile stays in L1 while r runs
        for r: for h_k in tile t: D[h] += M(h, r)

The innermost loop is then a gen index: no carried dependence, stride-1
reads and writes, vectorised by LLVM without reassociation.

Rounding: the sum indices keep their relative order and are outside the
gen index moved in, so each element ``D[h]`` receives exactly the terms of
the gather in exactly the same order: the results are bit-identical to the
gather's (serial kernel), except for an output shorter than
``short_slabs.SHORT`` (64) elements accumulated over at least
``short_slabs.RUN_MIN`` points, which the kernel gathers again, one tile of
the outer index at a time (short_slabs.py: a short slab's waits on its own
stores dominated the deconvolution's gradient).  The parallel variant runs scatter loops in
per-thread chunks with private partial copies added in chunk order
(codegen ``split_scatters``): deterministic for a given thread count.

The innermost index is chosen from the accesses (the read ones and the
write ``D[h]``): an access counts for an index when the index appears with
coefficient ±1 in its last subscript (unit stride in row-major order) and
against it when the index appears in an earlier subscript (a stride of a
whole row).  A gen index is moved in when it scores higher than the
gather's innermost sum index, or as high (a gen index carries no
reduction), and some read runs along it with stride 1 (else there is nothing
to stream: ``gen[i] sum[j] [j = i]·x[j]`` stays as it is).  Bindings BLAS takes (a product of two arrays read at bare
indices, blas.py) and bodies with relations, nested sums or lets are left as
they are.

Within one block (a gen over several indices, or one chain of sums) the
same scores choose the innermost loop (:func:`block_order`): the transposed
read ``sum[j, b] Y[b, j]`` runs ``b`` outside, ``j`` inside.  A sum's terms
are then added in another order than the program's: a reassociation, which
changes rounding at the level of any other summation order (NumPy's
pairwise sums differ as much) and is deterministic (a function of the
program and the sizes, not of the thread count or timing).
"""

from __future__ import annotations

from ..ir import Access, Aff, Gen, Let, Rel, SparseVar, Sum, Var, accesses, shape_of, walk
from .blas import match

TILE = 1024  # float64 elements of the output per tile: 8 KB, with the reads' window inside L1


def _maximal_accesses(e) -> list:
    """``[(base, idx)]`` of the array reads in ``e`` (outermost Access nodes)."""
    inner = set()
    out = []
    for n in walk(e):
        if isinstance(n, Access) and id(n) not in inner:
            base, idx = accesses(n)
            out.append((base, idx))
            a = n.arr
            while isinstance(a, Access):
                inner.add(id(a))
                a = a.arr
    return out


def _coeff(aff, v) -> int:
    return sum(c for s, c in aff.terms if s is v)


def stride_scores(sites, own) -> dict:
    """``{index: score}`` over the access sites ``[(base, idx)]`` (module doc)."""
    score = {v: 0 for v in own}
    for _, idx in sites:
        if not idx:
            continue
        for v in own:
            if any(_coeff(a, v) != 0 for a in idx[:-1]):
                score[v] -= 1
            elif abs(_coeff(idx[-1], v)) == 1:
                score[v] += 1
    return score


def _blas_like(dg, dbody) -> bool:
    """A contraction blas.py may take (its ``match``, every array's shape
    taken from its type): left to BLAS."""
    return match(dg, dbody, lambda b: shape_of(b.type) if isinstance(b, Var) and not isinstance(b, SparseVar) else None) is not None


def accumulate_order(dg, dbody, rb, m):
    """The loop order ``[(index, extent)]`` (outermost first) in which
    ``gen[dg] dbody``, ``dbody`` = ``[p]·sum[rb] M``, is better accumulated
    than gathered, or None (module doc)."""
    if not dg or not rb or _blas_like(dg, dbody):
        return None
    if any(isinstance(n, (Rel, SparseVar, Sum, Gen, Let)) for n in walk(m)):
        return None
    gv = [v for v, _ in dg]
    rv = [v for v, _ in rb]
    reads = _maximal_accesses(m)
    score = stride_scores(reads + [(None, tuple(_bare(v) for v in gv))], gv + rv)
    streams = stride_scores(reads, gv)
    best = max(reversed(gv), key=lambda v: score[v])  # ties: the last (innermost) gen index
    if score[best] < score[rv[-1]] or streams[best] < 1:
        return None  # no better, or the gen index reads nothing in sequence (x[j]·[j = i])
    own = dict(dg + rb)
    return [(v, own[v]) for v in gv if v is not best] + list(rb) + [(best, own[best])]


def _bare(v) -> Aff:
    return Aff(((v, 1),), 0)




def block_order(binds, expr, writes: bool):
    """``(perm, None)`` for a block over ``binds`` (one gen or one chain of
    sums) whose accesses in ``expr`` run with stride 1 along an index other
    than the last, that index moved innermost; else None.  ``writes``: the
    block stores its own element ``D[binds]`` (a gen).  A gen's points are
    independent; a sum's are added in the new order, which reassociates the
    sum (deterministic: the order depends on the program and sizes only)."""
    if len(binds) < 2 or expr is None:
        return None
    if any(isinstance(n, (Rel, SparseVar)) for n in walk(expr)):
        return None
    vs = [v for v, _ in binds]
    sites = _maximal_accesses(expr)
    if writes:
        sites.append((None, tuple(_bare(v) for v in vs)))
    score = stride_scores(sites, vs)
    best = max(range(len(vs)), key=lambda k: (score[vs[k]], k))
    if best == len(vs) - 1 or score[vs[best]] <= score[vs[-1]]:
        return None
    return tuple(k for k in range(len(vs)) if k != best) + (best,), None


__all__ = ["TILE", "accumulate_order", "block_order", "stride_scores"]
