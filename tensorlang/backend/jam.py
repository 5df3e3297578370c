"""Unroll-and-jam of accumulated slabs by two (paper Section 4.3, sums become
accumulations; issue #13: the deconvolution's primal against this machine's
limit).

interchange.py's accumulation ``for r: for h in slab: D[h] = D[h] + e(r, h)``
loads and stores the slab once per point of ``r``: two loads and a store per
multiply-add, which the store port bounds.  Jammed by ``JAM`` = 2::

    q = r_lo + (max(0, r_hi - r_lo) // 2) * 2
    for r in range(r_lo, q, 2):
        r1 = r + 1
        for h in slab: D[h] = D[h] + e(r, h) + e(r1, h)
    for r in range(q, r_hi): for h in slab: D[h] = D[h] + e(r, h)   # the nest as it was

each ``D[h]`` is loaded and stored once per two points.  The sum is printed
left to right (``((D[h] + e(r, h)) + e(r1, h))``, codegen's ``FSum``), which
is exactly what the two iterations computed one after the other: the results
are bit for bit the nest's, at every size (tests/backend/test_jam.py).

Applies to the nests short_slabs.py matches (its ``_pattern``: one unit-step
loop ``H`` in a unit-step loop ``R``, one store ``D[p…, h] = D[p…, h] + t₁ +
…``, no term reading ``D``, ``H``'s bounds reading nothing ``R`` writes, so
the slab is the same for every ``r``), outside its gathers; a slab whose
bounds move with ``r`` (the adjoint's full convolution at tile edges) is left
as it is.  Session 14 measured jamming by 4 with moving edges: 0.7-1.7 s more
cold compile of the deconvolution gradient (docs/backend.md,
"Unroll-and-jam").  Measured (session 17, one thread, same process,
alternated): see docs/backend.md, "Unroll-and-jam by two".
Built from loop-IR nodes; the names statements read and write come from rw.py.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import Assign, If, KernelIR, Loop, walk_stmts
from .rw import rename
from .short_slabs import _Fresh, _pattern

JAM = 2  # points of r per sweep of the slab (module doc)


def _jammed(r, fresh) -> tuple:
    h, st, terms = _pattern(r)
    q, r1 = fresh("v"), fresh("i")
    whole = K.IBin("*", K.IBin("//", K.MinMax("max", (K.Int(0), K.IBin("-", r.hi, r.lo))), K.Int(JAM)), K.Int(JAM))
    both = K.FSum((K.Load(st.array, st.index, True),) + tuple(terms) + tuple(rename(t, r.var, r1) for t in terms))
    pairs = replace(r, hi=K.Name(q), step=JAM,
                    body=(Assign(r1, K.IBin("+", K.Name(r.var), K.Int(1))), replace(h, body=(replace(st, value=both),))))
    return (Assign(q, K.IBin("+", r.lo, whole)), pairs, replace(r, lo=K.Name(q)))


def _walk(stmts, fresh) -> tuple:
    out = []
    for s in stmts:
        if _pattern(s) is not None:
            out.extend(_jammed(s, fresh))
        elif isinstance(s, Loop):
            out.append(replace(s, body=_walk(s.body, fresh)))
        elif isinstance(s, If) and s.cold:  # loops that run only where their speed cannot matter
            out.append(replace(s, then=_walk(s.then, fresh)))
        elif isinstance(s, If):
            out.append(replace(s, then=_walk(s.then, fresh), orelse=_walk(s.orelse, fresh)))
        else:
            out.append(s)
    return tuple(out)


def jam_slabs(ir: KernelIR) -> KernelIR:
    """Signature: jam_slabs : KernelIR -> KernelIR (module doc)."""
    if not any(_pattern(s) is not None for s in walk_stmts(ir.body)):
        return ir
    return replace(ir, body=list(_walk(ir.body, _Fresh(ir))))


__all__ = ["JAM", "jam_slabs"]
