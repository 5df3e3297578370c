"""Consumers of a tiled accumulation run inside its tile loop (paper Section
4.3; issue #13, "the deconvolution primal within 2x of this machine's limit").

interchange.py accumulates a gen whose reads stream along its index, one
tile of the output at a time, and scatter.py zeroes each tile's slab as the
tile starts::

    for t in range(0, ceil(N / K)):                 # T, the tile loop
        for h in range(K t, min(N, K t + K)): D[h] = 0
        ... D[h] += ...  (only h in the slab)       # the accumulation
    acc = 0
    for i in range(0, N): v = D[i] - z[i]; acc += v * v     # C, a consumer

The deconvolution's primal is that, with ``D`` the convolution ``y`` (n
elements) and ``C`` the loss: ``D`` is written to memory tile by tile and
read back by ``C`` (zeroing a slab also reads its lines first), five memory
streams per output where the loss needs two (``x`` and ``z``).  Here every
top-level consumer of ``D`` runs, for each tile, over that tile's slab at
the end of the tile's iteration, while the slab is in L1, and ``D`` itself
is replaced by one tile buffer ``B`` of ``K`` elements (``D[h]`` read and
written as ``B[h - K t]``): the n-sized intermediate is never written.

Legality (each checked; otherwise the kernel is left as it is):

* ``T`` is a top-level unit-step loop whose body starts with the loop
  zeroing ``D[h]`` for ``h`` in ``[K t, hi_z)``, which has no ``break`` and
  assigns none of the names of its bounds, of ``hi_z`` or of ``D``'s
  extent ``N``; ``D`` is
  a one-dimensional allocation (pooled or not) that is no result, and is
  touched by no top-level statement but its allocation, ``T`` and the
  consumers after ``T``;
* isl: the tiles ``[K t, hi_z)`` over ``T``'s range partition ``[0, N)`` in
  increasing order (the set ``{(t, h) : t in T's range, h in the slab}`` is
  ``{(t, h) : 0 <= h < N, K t <= h < K t + K}``), and every access of ``D``
  in ``T`` lies in its own tile's slab, given the bounds of the loops
  around it (a loop whose bounds read a name assigned inside ``T``, or
  whose variable is assigned there, gives no constraint: fewer facts, a
  larger set to prove inside).  So tile ``t`` alone writes and reads its
  slab, and after its iteration the slab holds the values ``D`` has at the
  end of ``T``;
* each consumer ``C`` is a top-level unit-step loop over exactly ``[0, N)``
  (isl), with a straight-line body (assignments, accumulations, stores)
  reading ``D`` only as ``D[i]`` at its own variable ``i`` and never writing
  it; ``C`` is independent of ``T`` but for ``D`` and of the other
  consumers (rw.py: neither writes a name the other reads or writes), and
  independent of the statements between ``T`` and it that stay after the
  fused loop; ``i`` is not read after ``C``.  The statements between them
  that are assignments or allocations independent of ``T`` and of what
  precedes them (an accumulator's ``acc = 0``, the consumer's output array)
  move before ``T``.

Each consumer's iterations then run in their own order (tiles in increasing
order, ``i`` increasing within each), interleaved with ``T`` only where
nothing one does is seen by the other: every value is the unfused loop's.
The one change is the order of a reduction's additions: a consumer whose
body is assignments ending in one accumulation ``acc += e`` (the loss) is
split into codegen's ``LANES`` partial sums (``codegen._lanes``: lane ``k``
adds the iterations ``4q + k``, the remainder goes to ``acc``, then ``acc
+= (a1 + a2) + a3``), with the lanes carried across tiles (``K`` is a
multiple of ``LANES``, so every tile starts a new group of four and only
the last tile has a remainder): the order codegen gives a lone ``acc += e``
over ``[0, N)``, independent of ``K``.  The unfused loop, whose body is
not a lone accumulation, was printed as one chain of additions, four
cycles of latency per element (the m = 3 primal's largest loop); the lanes
overlap four chains.  Deterministic: a function of ``N`` only.

A pass of codegen ``serial_passes``; the parallel kernel runs the fused
tile loop in per-thread chunks of tiles (chunks.py; a kernel chunks.py
takes nothing from keeps its per-thread split of ``T`` and chunked
reduction of ``C``).  ``D`` stays an argument of both (the pooled
temporary the caller passes; the fused loop never touches it).  Built from loop-IR nodes; reads and
writes from rw.py, bounds from isl.
"""

from __future__ import annotations

from dataclasses import replace

from ..isl_bridge import isl

from . import kir as K
from .astgen import isl_text
from .loopir import AccAdd, Alloc, Assign, Break, If, KernelIR, Loop, Store, map_stmts, rewrite_top, walk_stmts
from .roll import LANES
from .rw import FreshNames, dead_after, has_break, independent, names, reads_writes

_PLAIN = (Loop, If, Assign, AccAdd, Store, Alloc, Break)  # statements whose accesses the proof sees


# -- kernel-IR helpers ----------------------------------------------------------


def _to_buffer(stmts, d: str, b: str, lo: K.KExpr) -> tuple:
    """``stmts`` with ``D[h]`` read and written as ``B[h - lo]``."""

    def fn(x):
        if isinstance(x, K.Load) and x.array == d:
            return K.Load(b, (K.IBin("-", x.index[0], lo),), True)
        return None

    out = []
    for s in map_stmts(stmts, fn):
        out.append(_store_to_buffer(s, d, b, lo))
    return tuple(out)


def _store_to_buffer(s, d, b, lo):
    if isinstance(s, Store) and s.array == d:
        return Store(b, (K.IBin("-", s.index[0], lo),), s.value)
    if isinstance(s, Loop):
        return replace(s, body=tuple(_store_to_buffer(x, d, b, lo) for x in s.body))
    if isinstance(s, If):
        return replace(s, then=tuple(_store_to_buffer(x, d, b, lo) for x in s.then),
                       orelse=tuple(_store_to_buffer(x, d, b, lo) for x in s.orelse))
    return s


def _shifted(stmts, var: str, k: int) -> tuple:
    """``stmts`` with the name ``var`` read as ``var + k``."""
    if not k:
        return tuple(stmts)
    return map_stmts(stmts, lambda x: K.IBin("+", x, K.Int(k)) if isinstance(x, K.Name) and x.name == var else None)


def _accesses(e, d: str, out: list) -> list:
    """The index tuples of the loads of ``d`` in the expression ``e``."""
    if isinstance(e, K.Load):
        if e.array == d:
            out.append(e.index)
        for i in e.index:
            _accesses(i, d, out)
    elif isinstance(e, tuple):
        for x in e:
            _accesses(x, d, out)
    elif isinstance(e, K.KExpr):
        for c in K.children(e):
            _accesses(c, d, out)
    return out


def _uses(stmts, d: str, path: tuple, out: list) -> list:
    """``[(index, loops around it)]``: every access of ``d`` in ``stmts``."""
    for s in stmts:
        if isinstance(s, Loop):
            out += [(ix, path) for ix in _accesses((s.lo, s.hi), d, [])]
            _uses(s.body, d, path + (s,), out)
        elif isinstance(s, If):
            out += [(ix, path) for ix in _accesses(s.cond, d, [])]
            _uses(s.then, d, path, out)
            _uses(s.orelse, d, path, out)
        elif isinstance(s, (Assign, AccAdd)):
            out += [(ix, path) for ix in _accesses(s.value, d, [])]
        elif isinstance(s, Store):
            out += [(ix, path) for ix in _accesses((s.index, s.value), d, [])]
            if s.array == d:
                out.append((s.index, path))
        elif isinstance(s, Alloc):
            out += [(ix, path) for ix in _accesses(s.shape, d, [])]
    return out


def _assigned(stmts) -> set:
    """Names given a value other than as a loop's variable (assignments,
    accumulations): their value at an access may not be the one a loop's
    bounds saw."""
    return {s.target for s in walk_stmts(stmts) if isinstance(s, (Assign, AccAdd))}


# -- isl proofs ------------------------------------------------------------------


def _text(e):
    return isl_text(e, names(e, set()))


def _params(texts, dims) -> str:
    got = set()
    for t in texts:
        got |= _words(t)
    return ", ".join(sorted(got - set(dims)))


_ISL_WORDS = {"floor", "min", "max", "and", "or", "not", "mod"}


def _words(text: str) -> set:
    out, cur = set(), ""
    for ch in text + " ":
        if ch.isalnum() or ch == "_":
            cur += ch
        else:
            if cur and not cur[0].isdigit() and cur not in _ISL_WORDS:
                out.add(cur)
            cur = ""
    return out


def _tiles_partition(t: str, lo_t, hi_t, lo_z, hi_z, n, k: int) -> bool:
    """isl: the slabs ``[lo_z, hi_z)`` for ``t`` in ``[lo_t, hi_t)`` are the
    tiles ``[k t, k t + k) ∩ [0, n)`` (so they partition ``[0, n)``, in order)."""
    texts = [_text(x) for x in (lo_t, hi_t, lo_z, hi_z, n)]
    if None in texts:
        return False
    lt, ht, lz, hz, nn = texts
    h = "h_tile"
    par = _params(texts, {t, h})
    got = isl.Set(f"[{par}] -> {{ [{t}, {h}] : {lt} <= {t} < {ht} and {lz} <= {h} < {hz} }}")
    want = isl.Set(f"[{par}] -> {{ [{t}, {h}] : 0 <= {h} < {nn} and {k} * {t} <= {h} < {k} * {t} + {k} }}")
    return got.is_equal(want)


def _in_slab(index, path, tl: Loop, k: int, n, assigned: set) -> bool:
    """isl: at every point of the loops around it (``path``, inside ``tl``),
    ``index`` lies in tile ``t``'s slab ``[k t, k t + k) ∩ [0, n)``."""
    if len(index) != 1:
        return False
    ix, t = _text(index[0]), tl.var
    cons = [f"{_text(tl.lo)} <= {t} < {_text(tl.hi)}"]
    seen = set()
    for lp in reversed(path):  # innermost first: an inner loop's variable hides an outer one's
        if lp.var in seen or lp.var in assigned or lp.var == t:
            seen.add(lp.var)
            continue
        seen.add(lp.var)
        lo, hi = _text(lp.lo), _text(lp.hi)
        if lo is None or hi is None or (names((lp.lo, lp.hi), set()) & assigned):
            continue  # no fact about this loop's variable: it ranges over everything
        cons.append(f"{lo} <= {lp.var} < {hi}")
    nn = _text(n)
    if ix is None or nn is None or t in seen:
        return False
    bad = f"({ix} < {k} * {t} or {ix} >= {k} * {t} + {k} or {ix} < 0 or {ix} >= {nn})"
    texts = cons + [bad]
    par = _params(texts, set())
    return isl.Set(f"[{par}] -> {{ : {' and '.join(cons)} and {bad} }}").is_empty()


def _whole_range(lp: Loop, n) -> bool:
    """isl: ``lp`` runs over exactly ``[0, n)``."""
    texts = [_text(lp.lo), _text(lp.hi), _text(n)]
    if None in texts:
        return False
    lo, hi, nn = texts
    v = "i_all"
    par = _params(texts, {v})
    got = isl.Set(f"[{par}] -> {{ [{v}] : {lo} <= {v} < {hi} }}")
    want = isl.Set(f"[{par}] -> {{ [{v}] : 0 <= {v} < {nn} }}")
    return got.is_equal(want)


# -- the pattern -------------------------------------------------------------------


def _slab(tl):
    """``(D, K, zero loop)`` when ``tl``'s body starts ``for h in [K t, hi): D[h] = 0``, else None."""
    if not (isinstance(tl, Loop) and tl.step == 1 and not tl.parallel and tl.body):
        return None
    z = tl.body[0]
    if not (isinstance(z, Loop) and z.step == 1 and len(z.body) == 1 and isinstance(z.body[0], Store)):
        return None
    st = z.body[0]
    if st.index != (K.Name(z.var),) or not (isinstance(st.value, K.Float) and K.is_const(st.value, 0.0)):
        return None
    lo = z.lo
    if not (isinstance(lo, K.IBin) and lo.op == "*"):
        return None
    pair = (lo.lhs, lo.rhs) if isinstance(lo.lhs, K.Int) else (lo.rhs, lo.lhs)
    if not (isinstance(pair[0], K.Int) and pair[0].value > 0 and pair[1] == K.Name(tl.var)):
        return None
    return st.array, pair[0].value, z


def _straight(stmts) -> bool:
    return all(isinstance(s, (Assign, AccAdd, Store)) for s in stmts)


def _consumer(c, d: str) -> bool:
    """``c`` is a unit-step loop with a straight-line body reading ``D`` only at ``D[c.var]``."""
    if not (isinstance(c, Loop) and c.step == 1 and _straight(c.body)):
        return False
    if any(isinstance(s, Store) and s.array == d for s in c.body):
        return False
    idx = []
    for s in c.body:
        _accesses((s.index, s.value) if isinstance(s, Store) else s.value, d, idx)
    if any(ix != (K.Name(c.var),) for ix in idx):
        return False
    r, w = reads_writes(c.body)
    return c.var not in w and d in r


def _lane_form(c) -> bool:
    """Assignments ending in the one accumulation ``acc += e``, ``acc`` read nowhere else."""
    if c.kind != "sum" or not c.body or not isinstance(c.body[-1], AccAdd):
        return False
    acc = c.body[-1].target
    if any(not isinstance(s, Assign) for s in c.body[:-1]):
        return False
    return all(acc not in names(s.value, set()) and getattr(s, "target", None) != acc for s in c.body[:-1]) \
        and acc not in names(c.body[-1].value, set())


def _lanes(c, body, lo, hi, fresh):
    """``(before T, in T, after T)``: the consumer over one tile ``[lo, hi)`` in
    ``LANES`` partial sums carried across tiles (module doc)."""
    acc = body[-1].target
    lanes = [fresh("v") for _ in range(1, LANES)]
    q = fresh("v")
    before = [Assign(a, K.Float(0.0)) for a in lanes]
    group = []
    for k in range(LANES):
        for s in _shifted(body, c.var, k):
            group.append(AccAdd(lanes[k - 1], s.value) if isinstance(s, AccAdd) and k else s)
    count = K.IBin("//", K.MinMax("max", (K.Int(0), K.IBin("-", hi, lo))), K.Int(LANES))
    rest = list(body)
    if len(rest) == 1:  # a lone ``acc += e`` would get codegen's own lanes, zeroed per tile: named apart
        tmp = fresh("v")
        rest = [Assign(tmp, rest[0].value), AccAdd(acc, K.Name(tmp))]
    inside = [
        Assign(q, K.IBin("+", lo, K.IBin("*", count, K.Int(LANES)))),
        Loop(c.var, lo, K.Name(q), LANES, tuple(group), c.kind),
        Loop(c.var, K.Name(q), hi, 1, tuple(rest), c.kind),  # only the last tile has a remainder
    ]
    total = K.Name(lanes[0])
    for a in lanes[1:]:
        total = K.FSum((total, K.Name(a)))
    return before, inside, [AccAdd(acc, total)]


def _fuse_at(body: list, k: int, ir: KernelIR, fresh):
    """``body`` with the tile loop ``body[k]`` and its consumers fused, or None."""
    tl = body[k]
    got = _slab(tl)
    if got is None:
        return None
    d, tile, zero = got
    shapes = {a.name: a for a in ir.allocs}
    alloc = shapes.get(d)
    if alloc is None or len(alloc.shape) != 1 or d in ir.results or d in ir.copies:
        return None
    n = alloc.shape[0]
    inner = _assigned(tl.body)
    if inner & (names((tl.lo, tl.hi, zero.hi, n), set()) | {tl.var}):
        return None
    if any(not isinstance(s, _PLAIN) for s in walk_stmts(tl.body)) or has_break(tl.body):
        return None  # an access the proof cannot see, or a tile cut short
    # D's other top-level statements: its allocation before T, the consumers after
    cons = []
    for j, s in enumerate(body):
        if j == k:
            continue
        r, w = reads_writes([s])
        touches = d in (r | w)
        if isinstance(s, Alloc) and s.name == d:
            if j > k:
                return None
            continue
        if touches and j < k:
            return None
        if touches:
            if not _consumer(s, d):
                return None
            cons.append(j)
    if not cons:
        return None
    last = cons[-1]
    between = [j for j in range(k + 1, last) if j not in cons]
    # isl: the tiles partition [0, N) in order; every access of D in T is in its own slab
    if not _tiles_partition(tl.var, tl.lo, tl.hi, zero.lo, zero.hi, n, tile):
        return None
    if not all(_in_slab(ix, path, tl, tile, n, inner) for ix, path in _uses(tl.body, d, (), [])):
        return None
    # the consumers: over [0, N), independent of T (but for D), of each other and of what stays between
    moved_names = reads_writes([tl])[1]
    for j in cons:
        c = body[j]
        if not _whole_range(c, n) or names((c.lo, c.hi, n), set()) & moved_names:
            return None
        if not independent([c], [tl], frozenset({d})):
            return None
        if not dead_after(c.var, body[last + 1:]) or c.var in ir.results:
            return None
    for a in range(len(cons)):
        for b in range(a + 1, len(cons)):
            if not independent([body[cons[a]]], [body[cons[b]]]):
                return None
    hoisted, stay = [], []
    for j in between:
        s = body[j]
        earlier = [body[i] for i in stay] + [body[i] for i in cons if i < j]
        if isinstance(s, (Assign, Alloc)) and independent([s], [tl]) and all(independent([s], [e]) for e in earlier):
            hoisted.append(j)
        else:
            stay.append(j)
    for j in cons:
        if not all(independent([body[j]], [body[i]]) for i in stay if i < j):
            return None
        if names((body[j].lo, body[j].hi), set()) & reads_writes([body[i] for i in stay if i < j])[1]:
            return None
    # the rewrite
    buf = fresh("t")
    lo, hi = zero.lo, zero.hi
    tail, before, after = [], [], []
    for j in cons:
        c = body[j]
        cbody = _to_buffer(c.body, d, buf, lo)
        if _lane_form(c) and tile % LANES == 0:
            b, inside, a = _lanes(c, cbody, lo, hi, fresh)
            before += b
            tail += inside
            after += a
        else:
            tail.append(Loop(c.var, lo, hi, 1, cbody, c.kind))
    t2 = replace(tl, body=_to_buffer(tl.body, d, buf, lo) + tuple(tail))
    balloc = Alloc(buf, (K.Int(tile),), False, "temporary", f"{alloc.binding} (one tile)")
    out = [s for s in body[:k] if not (isinstance(s, Alloc) and s.name == d)]
    out += [body[j] for j in hoisted] + before + [balloc, t2] + after + [body[j] for j in stay]
    return out + list(body[last + 1:])


def tile_consumers(ir: KernelIR) -> KernelIR:
    """Signature: tile_consumers : KernelIR -> KernelIR (module doc)."""
    if not any(_slab(s) is not None for s in ir.body):
        return ir
    fresh = FreshNames(ir)
    return rewrite_top(ir, lambda body, k: _fuse_at(body, k, ir, fresh))


__all__ = ["tile_consumers"]
