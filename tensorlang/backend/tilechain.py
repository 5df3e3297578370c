"""A later tile loop runs inside an earlier one when each of its tiles reads
only what the earlier loop's tiles up to the same one wrote (paper Section
4.3; issue #13, "no materialized n x m intermediates", the deconvolution's
gradient/primal time).

The deconvolution's gradient is three top-level loops over tiles of 1024:
``T`` computes the residual ``r = 2(y - z)`` tile by tile into an n-sized
array (tilefuse.py fused the residual into the convolution's tile loop),
``L`` gathers ``dx[k] = Σ_j r[k - m + 1 + j]·c[j]`` tile by tile of ``k``,
and the ``dc`` reduction reads all of ``r``.  Unfused, ``L`` reads ``r`` back
from memory (32 MB at n = 4e6) after ``T`` wrote it; tile ``u`` of ``L``
reads ``r`` only at ``[1024 u - m + 1, 1024 u + 1024)``, which tiles ``u - 1``
and ``u`` of ``T`` wrote, so it can run right after tile ``u`` of ``T``,
while those values are in L1/L2 (loop fusion with non-negative dependence
distances)::

    for t in range(lo, max(hi_T, hi_L)):
        if t < hi_T: <T's body at t>
        if t < hi_L: <L's body at u = t>

Legality (each checked; otherwise the kernel is left as it is):

* ``T`` and ``L`` are top-level unit-step loops with the same lower bound,
  ``L`` the first later top-level loop that fuses (one reading an array
  ``T`` writes: the others are passed over cheaply); neither holds a statement the
  access analysis cannot see or a ``break``; their upper bounds read nothing
  either loop writes; neither variable is read after ``L``;
* ``L`` writes no name ``T`` reads or writes, and the only names ``T`` writes
  that ``L`` reads are arrays (never a scalar: ``L`` would see its value at
  the current tile, not the last), at least one (independent nests are
  hfuse.py's); neither loop is a lone ``acc += e``, whose lanes (codegen)
  an ``if`` around it would lose;
* isl, for each such array ``A``: no iteration ``u`` of ``L`` reads an
  element that an iteration ``t > u`` of ``T`` writes.  So every value ``L``
  reads is already the one ``T`` leaves (``T`` writes it no more after tile
  ``u``), and ``T`` never reads what ``L`` writes.  Asked by tiles (every
  read of ``L``'s tile ``u`` below ``K u + K``, every write of ``T``'s tile
  ``t`` at or above ``K t``, ``K`` a tile size of either loop), each access
  at its point (points.py: the loops around it bound their variables, the
  conditions of the ``if``\\ s around it hold, a scalar assigned an affine
  value before it stands for that value, ``i6 = v8``, ``v8 = max(1024 u,
  m - i5 - 1)``); else pairwise, with the loop bounds alone;
* or ``L`` is the loop ending the special side of a version choice whose
  test reads only sizes (``if test: [pre…, L] else: G``, ``G`` general,
  size_classes.py: short_slabs.py's gathers over tiles of ``r``); then
  ``pre`` moves before the fused loop and ``G`` after it, each under the
  same test and general side, and ``L``'s part of the fused loop too, so a
  size class where the test fails prints ``T`` and ``G`` alone;
* the statements between ``T`` and ``L`` are allocations or assignments
  independent of ``T`` (they move before the fused loop: ``dx``'s
  allocation), or independent of ``L``'s statement (they stay after it: in
  the parallel variant, ``dx``'s loop between ``T`` and ``dc``'s).

Every value is the unfused kernel's: the fused loop runs each of ``T``'s and
``L``'s iterations once, in their own order, with ``L``'s tile ``u`` after
every write to what it reads; no reduction changes order.  The parallel
variant (codegen ``_variant_passes``) takes only loops whose tile ``u``
reads what ``T``'s tile ``u`` alone wrote (``same_tile``: no ``t != u``
instead of no ``t > u``), before chunks.py splits the fused loop into
per-thread chunks of tiles, which a dependence from tile ``u - 1`` to tile
``u`` would forbid: the deconvolution's ``dc`` joins ``dY``'s producer
there, ``dx`` (a halo from the tile before) stays a chunked loop of its
own.  Statements that move in front of the fused loop go before the
allocations and assignments right before ``T``, so that its tile buffer
stays next to it (chunks.py allocates such a buffer per chunk).  Each
access is taken at its point by points.py.  Built from loop-IR nodes;
reads and writes from rw.py, the proof by isl.
"""

from __future__ import annotations

from ..isl_bridge import isl

from . import kir as K
from .hfuse import _lanes
from .loopir import AccAdd, Alloc, Assign, If, KernelIR, Loop, rewrite_top, walk_stmts
from .points import accesses_of, in_tiles, tile_sizes
from .rw import dead_after, has_break, independent, names, reads_writes, rename
from .size_classes import _sizes
from .tilefuse import _PLAIN, _params


def _no_later_write(t_loop: Loop, l_loop: Loop, array: str, params: set, same_tile: bool = False) -> bool:
    """isl: no iteration ``u`` of ``l_loop`` reads an element of ``array`` that an
    iteration ``t > u`` of ``t_loop`` writes (``same_tile``: ``t != u``): by
    tiles, every read of tile ``u`` below ``K u + K`` and every write of tile
    ``t`` at or above ``K t`` (with ``same_tile`` each inside its own tile),
    for a tile size ``K`` of either loop, each access at its point; else
    pairwise, with the loop bounds alone (points.py)."""
    for k in sorted(set(tile_sizes(t_loop)) | set(tile_sizes(l_loop)), reverse=True):
        if in_tiles(l_loop, array, "read", params, k, same_tile, True) and \
                in_tiles(t_loop, array, "write", params, k, True, same_tile):
            return True
    return _no_later_pairwise(t_loop, l_loop, array, params, same_tile)


def _no_later_pairwise(t_loop, l_loop, array, params, same_tile) -> bool:
    """The question of :func:`_no_later_write`, every read against every write,
    with the loop bounds alone (cheap sets: the facts at each point, compared
    pairwise, cost their product)."""
    reads = accesses_of(l_loop, array, "read", "rd", params, False)
    writes = accesses_of(t_loop, array, "write", "wr", params, False)
    if reads is None or writes is None:
        return False
    (rdims, rs), (wdims, ws) = reads, writes
    dims = rdims + wdims
    for rix, rf in rs:
        for wix, wf in ws:
            if len(rix) != len(wix):
                return False
            eqs = [f"{a} = {b}" for a, b in zip(rix, wix)]
            other = f"{wdims[0]} != {rdims[0]}" if same_tile else f"{wdims[0]} > {rdims[0]}"
            cons = rf + wf + eqs + [other]
            par = _params(cons, set(dims))
            text = f"[{par}] -> {{ [{', '.join(dims)}] : {' and '.join(f'({c})' for c in cons)} }}"
            if not isl.Set(text).is_empty():
                return False
    return True


# -- the pattern -------------------------------------------------------------------


def _fusable(t_loop, l_loop, ir: KernelIR, rest, same_tile: bool) -> bool:
    for lp in (t_loop, l_loop):
        if not (isinstance(lp, Loop) and lp.step == 1 and not lp.parallel and lp.body) or _lanes(lp):
            return False  # a lone ``acc += e`` loop would lose codegen's lanes inside an ``if``
        if has_break(lp.body) or any(not isinstance(s, _PLAIN) for s in walk_stmts(lp.body)):
            return False
    if t_loop.lo != l_loop.lo or t_loop.var == l_loop.var:
        return False
    rt, wt = reads_writes([t_loop])
    rl, wl = reads_writes([l_loop])
    if wl & (rt | wt):
        return False
    if names((t_loop.lo, t_loop.hi, l_loop.hi), set()) & (wt | wl):
        return False
    arrays = {a.name for a in ir.allocs} | set(ir.args)
    shared = wt & rl
    if shared - arrays:
        return False  # a scalar T leaves for L
    if not shared:
        return False  # nothing to reuse: independent nests are hfuse.py's, which keeps lanes
    fixed = set(ir.args) - {s.target for s in walk_stmts(ir.body) if isinstance(s, (Assign, AccAdd))}
    if names((t_loop.lo, t_loop.hi, l_loop.lo, l_loop.hi), set()) - fixed:
        return False
    # what neither loop assigns has one value at every access of both: a statement between
    # them that assigns it moves before T only if T does not read it, and stays after L
    # only if L does not (_fuse_with)
    params = (rt | rl) - (wt | wl)
    if not all(_no_later_write(t_loop, l_loop, a, params, same_tile) for a in sorted(shared)):
        return False
    return dead_after(t_loop.var, rest) and dead_after(l_loop.var, rest) \
        and t_loop.var not in ir.results and l_loop.var not in ir.results


def _version(s, sizes: set):
    """``(pre, loop)`` when ``s`` is a version choice ``if test: [pre…, loop] else: …``
    whose test reads only sizes and whose general side is the else side
    (size_classes.py; short_slabs.py's gathers over tiles of ``r``), else None."""
    if not (isinstance(s, If) and s.general == "orelse" and s.then and isinstance(s.then[-1], Loop)):
        return None
    if isinstance(s.cond, K.Bool) or names(s.cond, set()) - sizes:
        return None
    return s.then[:-1], s.then[-1]


def _chained(lp: Loop) -> bool:
    """``lp`` is a fused loop of this pass: ``for t in [lo, max(h…))`` whose every
    statement runs under ``t < h`` (directly, or inside a version's test) for an
    ``h`` of its bound."""
    if not (isinstance(lp.hi, K.MinMax) and lp.hi.fn == "max"):
        return False
    t = K.Name(lp.var)

    def guarded(s):
        if isinstance(s, If) and s.general and not s.orelse and len(s.then) == 1:
            s = s.then[0]
        return isinstance(s, If) and not s.orelse and isinstance(s.cond, K.Cmp) and s.cond.op == "<" \
            and s.cond.lhs == t and s.cond.rhs in lp.hi.args

    return all(guarded(s) for s in lp.body)


def _fuse_at(body: list, k: int, ir: KernelIR, same_tile: bool):
    """``body`` with the loop ``body[k]`` and a later top-level loop (or the loop
    of a later version choice, ``_version``) fused, or None: the first such
    loop that fuses, the statements between moving before the fused loop or
    after it (module doc)."""
    t_loop = body[k]
    if not isinstance(t_loop, Loop):
        return None
    sizes = set(_sizes(ir))
    written = reads_writes([t_loop])[1]
    for j in range(k + 1, len(body)):
        if not isinstance(body[j], (Loop, If)) or not reads_writes([body[j]])[0] & written:
            continue  # reads nothing T writes: never fused (_fusable), so not asked
        got = _fuse_with(body, k, j, ir, sizes, same_tile)
        if got is not None:
            return got
    return None


def _fuse_with(body: list, k: int, j: int, ir: KernelIR, sizes: set, same_tile: bool):
    t_loop = body[k]
    version = _version(body[j], sizes)
    if version is None and not isinstance(body[j], Loop):
        return None
    pre, l_loop = version if version is not None else ((), body[j])
    if not all(independent([p], [t_loop]) for p in pre):
        return None
    hoisted, stay = [], []
    for i in range(k + 1, j):
        s = body[i]
        if isinstance(s, (Assign, Alloc)) and independent([s], [t_loop]) \
                and all(independent([s], [body[h]]) for h in stay):
            hoisted.append(s)
        elif independent([s], [body[j]]):
            stay.append(i)
        else:
            return None
    if not _fusable(t_loop, l_loop, ir, body[j + 1:], same_tile):
        return None
    t = K.Name(t_loop.var)
    l_part = If(K.Cmp("<", t, l_loop.hi), rename(l_loop.body, l_loop.var, t_loop.var))
    before, after = [], []
    if version is not None:
        # the choice's three parts keep its test and general side, so a size class
        # decides all three alike: where the test fails, only the else side is printed
        vs = body[j]
        before = [If(vs.cond, tuple(pre), (), general="orelse")] if pre else []
        l_part = If(vs.cond, (l_part,), (), general="orelse")
        after = [If(vs.cond, (), vs.orelse, general="orelse")] if vs.orelse else []
    if _chained(t_loop):  # a loop this pass made: its parts are guarded already, the bound a max
        t_part, his = t_loop.body, t_loop.hi.args
    else:
        t_part, his = (If(K.Cmp("<", t, t_loop.hi), t_loop.body),), (t_loop.hi,)
    fused = Loop(t_loop.var, t_loop.lo, K.MinMax("max", his + (l_loop.hi,)), 1, t_part + (l_part,), t_loop.kind)
    # what moves in front goes before the allocations and assignments right before T, so
    # that T's tile buffer stays next to the loop (chunks.py allocates it per chunk)
    moved, k0 = hoisted + before, k
    while k0 > 0 and isinstance(body[k0 - 1], (Alloc, Assign)) and independent([body[k0 - 1]], moved):
        k0 -= 1
    return body[:k0] + moved + body[k0:k] + [fused] + after + [body[i] for i in stay] + body[j + 1:]


def chain_tiles(ir: KernelIR, same_tile: bool = False) -> KernelIR:
    """Signature: chain_tiles : KernelIR -> KernelIR (module doc).  ``same_tile``:
    only a loop whose tile ``u`` reads what the earlier loop's tile ``u`` alone
    wrote (the parallel variant's: chunks.py then splits the fused loop)."""
    if sum(isinstance(s, Loop) for s in ir.body) < 2:
        return ir
    return rewrite_top(ir, lambda body, k: _fuse_at(body, k, ir, same_tile), again=True)


__all__ = ["chain_tiles"]
