"""Short accumulated slabs are gathered again, one tile of the outer index at
a time (paper Section 4.3, sums become accumulations; issue #13, the
deconvolution's gradient/primal time).

interchange.py accumulates a gen whose reads stream along its index: the
loops ``for r: for h in slab: D[h] = D[h] + e(r, h)`` (scatter.py), the
slab a tile of ``D`` (interchange.TILE elements) that stays in L1 while ``r``
runs.  When the gen's extent is small the slab is short: the
deconvolution's ``dc[k] = Σ_i x[i - k + m - 1]·dY[i]`` runs ``for i in
range(n): for k in range(m)``, m = 3 or 16 against n = 4e6.  Each iteration
of ``r`` then loads ``D[h]`` that the previous one stored a few instructions
earlier (a store-forwarded add, about 10 cycles, per iteration of ``r``) for
``m/4`` vector operations of work, and the inner loop of ``m`` points pays
its vectorizer's set-up on every ``r``.

Here such a nest gets, before it, its gather form over tiles of ``r``::

    q = r_lo
    if len(D) < SHORT and r_hi - r_lo >= RUN_MIN:
        for rb in range(r_lo, r_hi, TILE):            # a tile of r: its reads' window in L1
            re = min(r_hi, rb + TILE)
            for h in range(hl, hh):
                acc = 0
                for r in range(rb, re): acc += e(r, h)   # LANES partial sums (codegen._lanes)
                D[h] = D[h] + acc
        q = r_hi
    for r in range(q, r_hi): for h in range(hl, hh): D[h] += e(r, h)   # the nest as it was

Each element's dot product over a tile is a stride-1 reduction with
``LANES`` independent partial sums (SLP packs them into vector registers),
its reads in L1 across the ``hh - hl`` elements, and ``D[h]`` is loaded and
stored once per tile instead of once per point.  The nest itself is printed
once: it runs nothing after the gathers, and every point when the test
fails.  Both tests are size-only, so a kernel compiled for sizes where they
fail prints no gathers (size_classes.py, issue #14: the cold first
gradient).

Measured (one thread, the 2-core Xeon, same process, alternated, 9 rounds,
``tl.grad`` with the earlier rewrite, ``COPIES`` = 4 private copies of the
slab per residue of ``r``, against this one with 8 partial sums and
``SHORT`` = 64): deconvolution n = 4e6, m = 3: 39.4 -> 20.9 ms; m = 16: 49.0
-> 41.4 ms; n = 1e6, m = 16: 10.1 -> 8.3 ms; the batched convolution n =
64000, B = 32, m = 16: 0.83x.  Then 16 partial sums and ``SHORT`` = 1024
against 8 and 64 (with jam.py's sweeps): m = 3 0.92x, m = 16 0.96x, m = 64
(n = 1e6, before taken by the accumulated nest) 0.88x and 0.93x, m = 100
0.91x, m = 200 0.97x, m = 600 (n = 5e5) 0.92x, the batched convolution
0.96x; 16 partial sums cost about 0.1 s more cold compile than 8.  So
``SHORT`` is one tile: a slab of a whole tile (m = 1024 or more) runs the
accumulated nest, whose reads stream along it.  ``RUN_MIN`` = 1024 (one
tile): a shorter ``r`` loop gains at most a microsecond a call.

When ``D`` is a result of the kernel and the nest is the body of
interchange's tile loop over ``D`` (``for u: [zero D's slab; the nest]``,
the deconvolution's ``dc``), the version is taken at the top level, with
the tiles of ``r`` outermost (session 19)::

    if len(D) < SHORT and r_hi - r_lo >= RUN_MIN:
        for u: zero D's slab
        for tau in range(0, ceil((r_hi - r_lo) / TILE)):
            rb = r_lo + TILE tau; re = min(r_hi, rb + TILE)
            for u: for h in slab: (each element's dot product over the tile, as above)
    else:
        for u: [zero D's slab; the nest]              # as it was

The same terms in the same order for every ``D[h]`` (distinct ``u`` own
distinct elements), and ``tau`` a top-level unit-step tile loop that
tilechain.py runs inside the tile loop producing what the dot products read
(``dY``).  A temporary ``D`` keeps its tile loop whole, for tilefuse.py.

Applies to a unit-step loop ``R`` whose body is one unit-step loop ``H``
whose body is one store ``D[p…, h] = D[p…, h] + t₁ + …``: ``D`` an array
the kernel allocates (or is given, pooled), ``h`` ``H``'s variable, the
leading subscripts ``p…`` (a thread's private row, parallel_split.py)
reading neither ``R``'s nor ``H``'s variable nor ``D``, ``len(D)`` its
last extent, no term ``tₖ`` reading ``D``, ``H``'s bounds reading nothing
``R`` writes, ``R``'s bounds reading neither ``D`` nor ``H``'s variable
(rw.py's ``names``).  Interchanging ``R`` and ``H`` within a tile is then
legal (each ``D[h]`` is touched by its own iterations only), and each
``D[h]`` receives the same terms; they are added in another order (per
tile of ``r``, lane ``k`` the points ``rb + LANES q + k``, the rest of the
tile in lane 0, the lanes in lane order, then the tile's sum into ``D[h]``,
tiles in order): a reassociation, fixed by the loop bounds.  The parallel
variant gets the same rewrite, after its per-thread split: a chunked
accumulation's tiles are disjoint, so its result stays bitwise the serial
one (each element is one chunk's value plus zeros), as before.
Built from loop-IR nodes; the names statements read and write come from
rw.py.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .interchange import TILE
from .loopir import AccAdd, Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts
from .rw import FreshNames, names
from .tilefuse import _slab  # the zeroed-slab pattern, defined once

LANES = 16  # partial sums of each element's dot product over a tile (module doc)
RUN_MIN = 1024  # points of r from which the gathers are taken (module doc)
SHORT = TILE  # arrays shorter than this (one tile) are gathered (module doc)


def slab_nest(r, moving: bool = False, offset: bool = False):
    """``(H, store, terms)`` when ``r`` is ``for r: for h: D[h] = D[h] + terms`` (module doc), else None;
    ``moving``: ``H``'s bounds may read ``R``'s variable (jam.py); ``offset``: the last
    subscript may be ``h - c``, ``c`` fixed in the nest (tilefuse.py's tile buffer, jam.py)."""
    if not (isinstance(r, Loop) and r.step == 1 and len(r.body) == 1 and not r.parallel):
        return None
    h = r.body[0]
    if not (isinstance(h, Loop) and h.step == 1 and len(h.body) == 1 and not h.parallel):
        return None
    st = h.body[0]
    if not isinstance(st, Store) or not st.index:
        return None
    last = st.index[-1]
    if offset and isinstance(last, K.IBin) and last.op == "-" and last.lhs == K.Name(h.var):
        last = last.lhs if not names(last.rhs, set()) & {r.var, h.var, st.array} else None
    if last != K.Name(h.var):
        return None
    if names(st.index[:-1], set()) & {r.var, h.var, st.array}:
        return None  # leading subscripts (a thread's private row, parallel_split.py) fixed in the nest
    v = st.value
    if not (isinstance(v, K.FSum) and len(v.terms) >= 2 and v.terms[0] == K.Load(st.array, st.index, True)):
        return None
    terms = v.terms[1:]
    if st.array in names(terms, set()):
        return None  # a term reads the accumulated array: not a plain accumulation
    bounds = names((h.lo, h.hi), set())
    if bounds & ({h.var, st.array} if moving else {r.var, h.var, st.array}) or \
            names((r.lo, r.hi), set()) & {h.var, st.array}:
        return None
    return h, st, terms


def _gather(r, extent, rb: str, re: str, acc: str) -> tuple:
    """``(test, element)``: the size-only test of the gathers, and one element's
    dot product over the tile ``[rb, re)`` of ``r`` added into ``D[h]``, its
    reads' window in L1."""
    h, st, terms = slab_nest(r)
    d = st.array
    test = K.and_of([K.Cmp("<", extent, K.Int(SHORT)), K.Cmp(">=", K.IBin("-", r.hi, r.lo), K.Int(RUN_MIN))])
    dot = Loop(r.var, K.Name(rb), K.Name(re), 1, (AccAdd(acc, K.sum_of(terms)),), "sum", lanes=LANES)
    element = (Assign(acc, K.Float(0.0)), dot, Store(d, st.index, K.FSum((K.Load(d, st.index, True), K.Name(acc)))))
    return test, element


def _split(r, extent, fresh) -> tuple:
    h = r.body[0]
    q, rb, re, acc = fresh("v"), fresh("i"), fresh("v"), fresh("v")
    test, element = _gather(r, extent, rb, re, acc)
    tiles = Loop(rb, r.lo, r.hi, TILE, (
        Assign(re, K.MinMax("min", (r.hi, K.IBin("+", K.Name(rb), K.Int(TILE))))),
        replace(h, body=element)), r.kind)
    # the nest as it was runs from q: nothing after the gathers, every point when the test
    # fails; a size-class choice whose general side is the nest alone (size_classes.py): a
    # kernel compiled for sizes where the test fails prints no gathers
    return (Assign(q, r.lo), If(test, (tiles, Assign(q, r.hi)), general="orelse"), replace(r, lo=K.Name(q)))


def _tile_of(u, extents, results):
    """``(R, extent)`` when ``u`` is interchange's tile loop of a short-slab nest:
    ``for u: [for h in [K u, ...): D[h] = 0; R]`` with ``R`` a nest this pass
    rewrites accumulating into ``D`` over the slab (module doc, "over tiles of
    r"), ``u``'s and ``R``'s bounds reading no name ``u``'s body assigns, and
    ``D`` a result of the kernel; else None.  A temporary ``D`` keeps ``u``
    whole at the top level, where tilefuse.py runs ``D``'s consumers in it."""
    got = _slab(u) if isinstance(u, Loop) and len(u.body) == 2 else None
    if got is None:
        return None
    d, r = got[0], u.body[1]
    nest = slab_nest(r)
    if nest is None or nest[1].array != d or d not in extents or d not in results:
        return None
    inner = {x.var for x in walk_stmts(u.body) if isinstance(x, Loop)} | {u.var}
    if names((u.lo, u.hi, r.lo, r.hi), set()) & (inner | {d}):
        return None
    return r, extents[d]


def _split_tiled(u, r, extent, fresh):
    """The nest's gathers with the tiles of ``r`` outermost (module doc): ``if
    test: [zero every slab; for each tile of r: for u: each element's dot
    product over the tile] else: u as it was``.  The slabs of distinct ``u``
    are distinct elements of ``D``, so the interchange leaves every element's
    terms and their order as ``_split`` gives them; ``r``'s tiles as a
    unit-step loop ``τ`` (``rb = r_lo + TILE τ``), the form of a tile loop
    that tilechain.py can run inside the producer of what the dot products read."""
    h = r.body[0]
    tau, rb, re, acc = fresh("i"), fresh("v"), fresh("v"), fresh("v")
    test, element = _gather(r, extent, rb, re, acc)
    count = K.IBin("//", K.IBin("+", K.IBin("-", r.hi, r.lo), K.Int(TILE - 1)), K.Int(TILE))
    tiles = Loop(tau, K.Int(0), count, 1, (
        Assign(rb, K.IBin("+", r.lo, K.IBin("*", K.Int(TILE), K.Name(tau)))),
        Assign(re, K.MinMax("min", (r.hi, K.IBin("+", K.Name(rb), K.Int(TILE))))),
        replace(u, body=(replace(h, body=element),))), r.kind)
    zero = replace(u, body=(u.body[0],))
    return (If(test, (zero, tiles), (u,), general="orelse"),)


def _extents(ir: KernelIR) -> dict:
    """Array name -> the extent of its last dimension, for the kernel's allocations (pooled ones included)."""
    allocs = list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]
    return {a.name: a.shape[-1] for a in allocs if a.shape}


def _target(s, extents):
    """The accumulated array's extent when ``s`` is a nest this pass rewrites, else None."""
    got = slab_nest(s)
    return None if got is None else extents.get(got[1].array)


def _walk(stmts, extents, fresh, results=()) -> tuple:
    out = []
    for s in stmts:
        extent = _target(s, extents)
        tiled = _tile_of(s, extents, results)
        if tiled is not None:
            out.extend(_split_tiled(s, tiled[0], tiled[1], fresh))
        elif extent is not None:
            out.extend(_split(s, extent, fresh))
        elif isinstance(s, Loop):
            out.append(replace(s, body=_walk(s.body, extents, fresh)))
        elif isinstance(s, If):
            out.append(replace(s, then=_walk(s.then, extents, fresh), orelse=_walk(s.orelse, extents, fresh)))
        else:
            out.append(s)
    return tuple(out)


def short_slab_gathers(ir: KernelIR) -> KernelIR:
    """Signature: short_slab_gathers : KernelIR -> KernelIR (module doc)."""
    extents = _extents(ir)
    if not any(_target(s, extents) is not None for s in walk_stmts(ir.body)):
        return ir
    # the tiled form at the top level only (tilechain.py's loops); nested nests as before
    return replace(ir, body=list(_walk(ir.body, extents, FreshNames(ir), tuple(ir.results))))


__all__ = ["LANES", "RUN_MIN", "SHORT", "short_slab_gathers", "slab_nest"]
