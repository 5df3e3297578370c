"""Short accumulated slabs: one private copy per residue of the outer index
(paper Section 4.3, sums become accumulations; issue #13, the
deconvolution's gradient/primal time).

interchange.py accumulates a gen whose reads stream along its index: the
loops ``for r: for h in slab: D[h] = D[h] + e(r, h)`` (scatter.py), the
slab a tile of ``D`` (interchange.TILE elements) that stays in L1 while ``r`` runs.
When the gen's extent is small the slab is short: the deconvolution's
``dc[k] = Σ_i x[i - k + m - 1]·dY[i]`` runs ``for i in range(n): for k in
range(m)``, m = 3 or 16 against n = 4e6.  Each iteration of ``r`` then
loads ``D[h]`` that the previous one stored a few instructions earlier: the
loop waits on an add through a store-forwarded load (about 10 cycles) per
iteration of ``r``, for ``m/4`` vector operations of work.  Measured (one
thread, n = 4e6): 13 ms at m = 3 for the 12e6 terms, where the loops
around it run 3 ms each, and the largest of the gradient's four loops at
m = 16.

The rewrite keeps ``COPIES`` = 4 private copies of the slab, ``W[l, h]``,
and sends iteration ``r`` to copy ``(r - lo) mod COPIES``::

    q = r_lo
    if len(D) < SHORT and r_hi - r_lo >= RUN_MIN:
        s = hh - hl;  W = zeros(COPIES·s);  q = r_lo + whole groups of COPIES
        for r0 in range(r_lo, q, COPIES):
            for l in range(COPIES):          # unrolled by LLVM: COPIES independent slabs
                r = r0 + l
                for h in range(hl, hh): W[l·s + h - hl] += e(r, h)
    for r in range(q, r_hi): for h in range(hl, hh): D[h] += e(r, h)   # the nest as it was
    if len(D) < SHORT and r_hi - r_lo >= RUN_MIN:
        for h in range(hl, hh): D[h] = D[h] + W[0, h] + … + W[COPIES - 1, h]

so consecutive iterations of ``r`` store to different copies, and the
loops over them are unrolled into straight code.  The nest itself is
printed once: it runs the points past the last whole group, or all of
them when the test fails (then ``q = r_lo``, and the order is the old
one).  The copies are added element by element (a scalar chain of
``COPIES`` adds; a loop over the copies around a vectorised loop over
``h`` would be ``COPIES`` more loops for LLVM to compile).  Measured
(serial gradient kernel, n = 4e6, one process, alternated, load 1.8-2.4):
m = 3: 22.5 -> 19.3 ms, m = 16: 38.8 -> 32.0 ms; 8 and 16 copies gave
18.0 and 33.0, 18.0 and 32.5 ms for 1.17 and 1.27 s of compile time
against 0.92 s with 4 (0.40 s without the pass): 4 it is.  ``SHORT`` =
64: a slab that long is 16 four-wide vector operations per sweep, more
than the latency of a store-forwarded add to hide.  The test is on the
whole array ``D``, not on the slab: a long ``D`` has a short slab only in
its last tile, whose waits cost at most 10 cycles per ``r`` against at
least 256 vector operations per ``r`` for each full tile (under 4%), and
keeps its order of additions (interchange.py's column sums).  ``RUN_MIN``
= 1024: a shorter ``r`` loop saves at most a microsecond a call (measured,
session 12, serial gradient kernel, alternated, load 1.4-2.2: m = 3, n =
256: 19.7 against 18.4 us, n = 1024: 24.6 against 25.8, n = 4096: 22.3
against 32.2; m = 16: 10.7 / 11.0, 16.6 / 17.5, 40.1 / 43.9), while the
copies are a second version of the nest for Numba to compile; with both
tests size-only, a kernel compiled for sizes where they fail prints no
copies at all (size_classes.py, issue #14: the cold first gradient).

Applies to a unit-step loop ``R`` whose body is one unit-step loop ``H``
whose body is one store ``D[p…, h] = D[p…, h] + t₁ + …``: ``D`` an array
the kernel allocates (or is given, pooled), ``h`` ``H``'s variable, the
leading subscripts ``p…`` (a thread's private row, parallel_split.py)
reading neither ``R``'s nor ``H``'s variable nor ``D``, ``len(D)`` its
last extent, no term ``tₖ`` reading ``D``,
``H``'s bounds reading nothing ``R`` writes, ``R``'s bounds reading neither
``D`` nor ``H``'s variable (rw.py's ``names``).  Each ``D[h]`` then receives
the same terms; they are added in another order (the points past the
last whole group in ``r`` order, then each copy's sum of its points in
``r`` order, the copies in ``l`` order): a reassociation, fixed by the
loop bounds.  The parallel variant gets the
same rewrite, after its per-thread split: a chunked accumulation's tiles
are disjoint, so its result stays bitwise the serial one (each element is
one chunk's value plus zeros), as before.
Built from loop-IR nodes; the names statements read and write come from
rw.py.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts
from .rw import names, reads_writes

COPIES = 4  # private copies of a short slab (module doc)
RUN_MIN = 1024  # points of r from which the copies are taken (module doc), at least COPIES
SHORT = 64  # arrays shorter than this are accumulated in copies (module doc)


class _Fresh:
    """Allocator-style names (``<letter><k>``, kir.NameAllocator's letters)
    not used anywhere in a kernel."""

    def __init__(self, ir: KernelIR):
        self.used = set(ir.args) | {a.name for a in ir.allocs} | set(ir.results)
        for s in walk_stmts(ir.body):
            r, w = reads_writes([s])
            self.used |= r | w
        self.k: dict = {}

    def __call__(self, letter: str) -> str:
        k = self.k.get(letter, 0)
        while f"{letter}{k}" in self.used:
            k += 1
        self.k[letter] = k + 1
        self.used.add(f"{letter}{k}")
        return f"{letter}{k}"


def _pattern(r):
    """``(H, store, terms)`` when ``r`` is ``for r: for h: D[h] = D[h] + terms`` (module doc), else None."""
    if not (isinstance(r, Loop) and r.step == 1 and len(r.body) == 1 and not r.parallel):
        return None
    h = r.body[0]
    if not (isinstance(h, Loop) and h.step == 1 and len(h.body) == 1 and not h.parallel):
        return None
    st = h.body[0]
    if not isinstance(st, Store) or not st.index or st.index[-1] != K.Name(h.var):
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
    if bounds & {r.var, h.var, st.array} or names((r.lo, r.hi), set()) & {h.var, st.array}:
        return None
    return h, st, terms


def _split(r, extent, fresh) -> tuple:
    h, st, terms = _pattern(r)
    d, hv = st.array, h.var
    s, q, w, r0, lane, acc = fresh("v"), fresh("v"), fresh("t"), fresh("i"), fresh("i"), fresh("v")
    n_r = K.IBin("-", r.hi, r.lo)
    test = K.and_of([K.Cmp("<", extent, K.Int(SHORT)), K.Cmp(">=", n_r, K.Int(RUN_MIN))])
    at = (K.IBin("+", K.IBin("*", K.Name(lane), K.Name(s)), K.IBin("-", K.Name(hv), h.lo)),)
    # R's variable is set per copy, not substituted: its loads stay at a plain name, which
    # offsets.py leaves as it is (a hoisted max(0, r0 + l) base kept a 3 -> 16 point loop
    # 1.5x slower, measured)
    point = Assign(r.var, K.IBin("+", K.Name(r0), K.Name(lane)))
    own = Store(w, at, K.FSum((K.Load(w, at, True),) + terms))
    groups = Loop(r0, r.lo, K.Name(q), COPIES,
                  (Loop(lane, K.Int(0), K.Int(COPIES), 1, (point, replace(h, body=(own,))), "sum"),), r.kind)
    copies = (
        Assign(s, K.IBin("-", h.hi, h.lo)),
        Alloc(w, (K.IBin("*", K.Int(COPIES), K.Name(s)),), True, "temporary", "residue copies"),
        Assign(q, K.IBin("+", r.lo, K.IBin("*", K.IBin("//", n_r, K.Int(COPIES)), K.Int(COPIES)))),
        groups,
    )
    # the copies added into D element by element, copy order innermost: a scalar chain of
    # COPIES loads and adds (a loop over the copies around a vectorised loop over h would be
    # COPIES more loops to compile)
    back = Loop(lane, K.Int(0), K.Int(COPIES), 1, (Assign(acc, K.FSum((K.Name(acc), K.Load(w, at, True)))),), "sum")
    combine = replace(h, body=(Assign(acc, K.Load(d, st.index, True)), back, Store(d, st.index, K.Name(acc))))
    # the points past the last whole group (every point when the test fails) run the nest as it
    # was, in order, before the copies are added: one copy of the nest serves both cases
    # both tests a size-class choice whose general side is the nest alone (size_classes.py): a
    # kernel compiled for sizes where the test fails prints neither the copies nor their sum
    return (Assign(q, r.lo), If(test, copies, general="orelse"), replace(r, lo=K.Name(q)),
            If(test, (combine,), general="orelse"))


def _extents(ir: KernelIR) -> dict:
    """Array name -> the extent of its last dimension, for the kernel's allocations (pooled ones included)."""
    allocs = list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]
    return {a.name: a.shape[-1] for a in allocs if a.shape}


def _target(s, extents):
    """The accumulated array's extent when ``s`` is a nest this pass rewrites, else None."""
    got = _pattern(s)
    return None if got is None else extents.get(got[1].array)


def _walk(stmts, extents, fresh) -> tuple:
    out = []
    for s in stmts:
        extent = _target(s, extents)
        if extent is not None:
            out.extend(_split(s, extent, fresh))
        elif isinstance(s, Loop):
            out.append(replace(s, body=_walk(s.body, extents, fresh)))
        elif isinstance(s, If):
            out.append(replace(s, then=_walk(s.then, extents, fresh), orelse=_walk(s.orelse, extents, fresh)))
        else:
            out.append(s)
    return tuple(out)


def residue_copies(ir: KernelIR) -> KernelIR:
    """Signature: residue_copies : KernelIR -> KernelIR (module doc)."""
    extents = _extents(ir)
    if not any(_target(s, extents) is not None for s in walk_stmts(ir.body)):
        return ir
    return replace(ir, body=list(_walk(ir.body, extents, _Fresh(ir))))


__all__ = ["COPIES", "RUN_MIN", "SHORT", "residue_copies"]
