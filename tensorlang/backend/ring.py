"""A temporary that lives only inside one tile loop, reading at most one tile
back, kept in a buffer of two tiles (paper Section 4.3; issue #13, "no
materialized n x m intermediates", the deconvolution's gradient/primal
time).

After tilechain.py, the deconvolution gradient's serial kernel (for the sizes
where ``dc`` is gathered tile by tile, short_slabs.py) is one loop over tiles
of 1024 that writes the residual ``r = 2(y - z)`` into an n-sized pooled
temporary and reads it back in the same iteration: ``dx`` reads
``r[1024 u - m + 1, 1024 u + 1024)``, ``dc`` the tile itself.  Nothing else
touches ``r``, yet it is written to memory (32 MB at n = 4e6, and its lines
read for ownership first).  Here ``r`` becomes a buffer ``B`` of two tiles,
``r[h]`` read and written as ``B[h - K u + K]``, and each iteration starts by
moving the upper half of ``B`` to its lower half (``K`` copies within L1)::

    for u in range(lo, hi):                      # T
        for q in range(0, K): B[q] = B[q + K]    # tile u - 1's values
        ... r[h] ...  ->  ... B[h - K u + K] ...

Legality (each checked; otherwise the kernel is left as it is):

* ``T`` is a top-level unit-step loop with no ``break`` and no statement
  the access analysis cannot see, that assigns neither its variable nor a
  name its accesses of ``r`` depend on but through the loops and scalars
  points.py follows;
* ``r`` is a one-dimensional temporary (pooled or not), no result, touched
  by no top-level statement but its allocation and ``T``;
* isl (points.py, each access at its point): every access of ``r`` in
  iteration ``u`` lies in ``[K u - K, K u + K)``, for a tile size ``K`` of
  ``T``.

Then an element ``h`` is touched only by the iterations ``u`` whose window
holds it (``floor(h / K)`` and the next), where it has the slot ``h - K u +
K``; the copy moves every element of the window below ``K u`` from the slot
it had in iteration ``u - 1`` to the one it has in ``u``, and the elements
above were never touched before ``u`` (in the unfused kernel they hold
nothing a read may see either: ``r`` is an uninitialised temporary).  So
every read sees the value the n-sized array held there: the arithmetic, and
its order, are the kernel's own.

Where other top-level statements read ``r`` too, all on the else side of
one size test (the deconvolution's general side of ``dc``, the unfused
nest after ``T``, short_slabs.py), the buffer is chosen by that test::

    B = ring if test else r            # before T
    o = (K u - K) if test else 0       # each iteration; the copy under ``if test``

and ``r[h]`` is ``B[h - o]``: where the test fails ``T`` runs on ``r``
itself, exactly as before, for the readers after it; where it holds, the
window is proven given the test.  This is no version choice of its own: it
runs on the statements a size class prints (size_classes.py), after
``decide`` has taken the general side where the class's sizes fail the test
(the readers after ``T`` are then unguarded, and ``r`` stays).

A pass of the serial variant (codegen ``printed_ir``, after tilechain.py):
the parallel variant splits ``T`` into chunks of tiles, whose first tile
would find the previous chunk's values in no buffer of its own.  Built
from loop-IR nodes; the proof by isl (points.py).
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import Alloc, Assign, If, KernelIR, Loop, Store, rewrite_top, walk_stmts
from .points import in_tiles, tile_sizes
from .rw import FreshNames, has_break, names, reads_writes
from .size_classes import _sizes
from .tilefuse import _PLAIN, _to_buffer


def _guard(s, a: str, sizes: set):
    """The condition ``c`` when ``s`` is ``if c: … else: …`` touching ``a`` only on
    its else side, ``c`` reading only sizes; else None."""
    if not (isinstance(s, If) and s.orelse) or names(s.cond, set()) - sizes:
        return None
    r, w = reads_writes(list(s.then))
    return None if a in r | w else s.cond


def _candidates(ir: KernelIR, body: list, k: int) -> list:
    """``[(r, c)]``: the temporaries ``body[k]`` touches that no other top-level
    statement touches but their allocation (``c`` None) or ``if`` statements on one size
    test ``c``, on their else sides alone (each temporary its own ``c``)."""
    temps = {a.name for a in ir.allocs if a.role == "temporary" and len(a.shape) == 1}
    temps -= set(ir.results) | set(ir.copies)
    r, w = reads_writes([body[k]])
    sizes = set(_sizes(ir))
    out = []
    for a in sorted((r | w) & temps):
        guards = set()
        for j, s in enumerate(body):
            if j == k or isinstance(s, Alloc) and s.name == a:
                continue
            rs, ws = reads_writes([s])
            if a in rs | ws:
                guards.add(_guard(s, a, sizes))
        if None in guards or len(guards) > 1:
            continue
        out.append((a, next(iter(guards), None)))
    return out


def _ring_at(body: list, k: int, ir: KernelIR, fresh) -> list | None:
    t_loop = body[k]
    if not (isinstance(t_loop, Loop) and t_loop.step == 1 and not t_loop.parallel and t_loop.body):
        return None
    arrays = _candidates(ir, body, k)
    if not arrays:
        return None
    if has_break(t_loop.body) or any(not isinstance(s, _PLAIN) for s in walk_stmts(t_loop.body)):
        return None
    r, w = reads_writes(t_loop.body)
    if t_loop.var in w:
        return None
    params = (r | set(ir.args)) - w - {t_loop.var}
    sizes = tile_sizes(t_loop)
    out_body, before, head = t_loop.body, [], []
    u = K.Name(t_loop.var)
    for a, cond in arrays:
        tile = next((c for c in sizes if c > 1 and in_tiles(t_loop, a, "any", params, c, True, True, below=1,
                                                               given=cond)),
                    None)
        if tile is None:
            continue
        ring = fresh("t")
        low = K.IBin("-", K.IBin("*", K.Int(tile), u), K.Int(tile))  # the window's first element, K u - K
        before.append(Alloc(ring, (K.Int(2 * tile),), False, "temporary", f"{a} (two tiles)"))
        q = fresh("i")
        copy = Loop(q, K.Int(0), K.Int(tile), 1,
                    (Store(ring, (K.Name(q),), K.Load(ring, (K.IBin("+", K.Name(q), K.Int(tile)),), True)),), "gen")
        if cond is None:
            buf, off = ring, low
            head += [copy]
        else:  # the ring where the size test holds, ``a`` itself (at offset 0) where its readers outside run
            buf, off = fresh("t"), K.Name(fresh("v"))
            before.append(Assign(buf, K.Select(cond, K.Name(ring), K.Name(a))))
            head += [Assign(off.name, K.Select(cond, low, K.Int(0))), If(cond, (copy,))]
        out_body = _to_buffer(out_body, a, buf, off)
    if not before:
        return None
    return body[:k] + before + [replace(t_loop, body=tuple(head) + out_body)] + body[k + 1:]


def ring_temps(ir: KernelIR) -> KernelIR:
    """Signature: ring_temps : KernelIR -> KernelIR (module doc)."""
    if not any(isinstance(s, Loop) for s in ir.body):
        return ir
    fresh = FreshNames(ir)
    return rewrite_top(ir, lambda body, k: _ring_at(body, k, ir, fresh))


__all__ = ["ring_temps"]
