"""The parallel kernel runs the serial kernel's loop nests in per-thread chunks
(paper Section 4.3; issue #13, "with both cores, the large workloads at
least 1.6x faster than single-threaded").

The serial kernel's passes (codegen ``serial_passes``: tiles, tile fusion,
residue copies, column sums, lanes) made the parallel variant, which ran
without them, slower per thread than the serial one: the deconvolution
gained nothing from two threads (loss 0.78x at n = 1e5).  Here the parallel
variant starts from the serial kernel's loop IR and spreads a top-level
loop ``L`` over ``T`` threads (``T`` the kernel's ``n_threads``) in
contiguous chunks of its iterations, each chunk running the serial loop
nest on its share:

* **chunked loop** (``_chunk``): ``L``'s iterations write disjoint elements
  of every array they store to outside ``L`` and read no element another
  iteration writes (isl, each access at its point, points.py: the bounds
  of the loops and the conditions around it, affine scalars assigned
  before it: ``_own_tiles``, one set per access, asked first; else
  ``_disjoint``, every store against every access); a scalar accumulated in ``L`` (``acc += e``, not
  otherwise read there) gets one partial sum per chunk, chunk 0's starting
  from ``acc`` and the others from 0, added in chunk order after the loop;
  an array allocated uninitialised just before ``L`` and touched nowhere
  else (a tile buffer, tilefuse.py) is allocated per chunk; every scalar
  ``L`` assigns is assigned before it is read in each iteration and is not
  read after ``L``.  An allocated array ``L`` only accumulates into
  (``A[ix] = A[ix] + t``, read nowhere else in ``L``: the column partial
  sums of colsum.py) at elements several iterations share gets a zeroed
  ``[T, ...]`` copy, one slice per chunk, added into ``A`` element by
  element in chunk order; taken at run time when ``size(A) * T *
  SPLIT_FACTOR`` is at most ``L``'s work (its trips times its first
  iteration's, parallel_split's count), else ``L`` runs serially.  The
  deconvolution's tile loops (primal, the adjoint's ``dx``) and the
  Laplacian's rows are such loops; so are loops in a top-level ``If``;
* **chunked accumulation** (``_split_inner``): a loop ``S`` inside ``L``
  whose only writes outside itself are accumulations ``A[ix] = A[ix] + t``
  into arrays it does not otherwise read runs in ``T`` contiguous chunks,
  each adding into its own slice of a zeroed ``[T, ...]`` copy of ``A``,
  the slices then added into ``A`` in chunk order (element by element).
  Taken at run time when ``size(A) * T * SPLIT_FACTOR <= trips(S)``.  The
  deconvolution's ``dc`` (a sum over ``n`` into ``m`` elements, all in one
  tile) is such a loop;
* both apply: ``L`` is chunked when it has at least ``CHUNK_MIN`` iterations
  per thread, else it runs serially with its inner loops chunked.

The chunks are functions of ``T`` and the loop bounds only, never of the
scheduling: a given thread count always gives the same result.  With one
thread, a chunked loop runs its iterations in the serial order from the
serial starting values, so ``kernel_parallel`` at ``n_threads = 1`` returns
bitwise the serial kernel's values (a chunked accumulation adds its one
slice to ``A``: ``A + (0 + terms)``, the same numbers but for the sign of a
zero).  Built from loop-IR nodes; printed by codegen.py.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..isl_bridge import isl

from . import kir as K
from .loopir import AccAdd, Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts
from .parallel_split import THREADS_ARG, _accumulation, _iteration_work, _rename_acc
from .rw import _status, dead_after, names, reads_writes
from .points import accesses_of, in_tiles, tile_sizes
from .tilefuse import _params

# a loop is chunked when it runs at least this many iterations per thread (a
# chunk of contiguous iterations is then at most 1 + 1/CHUNK_MIN of the
# average); below it, its inner accumulations are chunked instead
CHUNK_MIN = 4
# a chunked accumulation's ``[T, ...]`` copies cost ``T`` times its array in
# memory and in the final additions: taken when size * T * this <= its trips
SPLIT_FACTOR = 4

_PLAIN = (Loop, If, Assign, AccAdd, Store, Alloc)


class _Names:
    def __init__(self):
        self.k = 0

    def __call__(self, base: str) -> str:
        self.k += 1
        return f"{base}_k{self.k}"  # allocator names have no underscore: no clash


def _trips(loop: Loop) -> K.KExpr:
    span = K.IBin("-", loop.hi, loop.lo)
    if loop.step != 1:
        span = K.IBin("//", K.IBin("+", span, K.Int(loop.step - 1)), K.Int(loop.step))
    return K.MinMax("max", (K.Int(0), span))


def _bound(loop: Loop, n: str, c: K.KExpr, t: str) -> K.KExpr:
    """``lo + step * ((N c) // T)``: the first iteration of chunk ``c``."""
    q = K.IBin("//", K.IBin("*", K.Name(n), c), K.Name(t))
    return K.IBin("+", loop.lo, q if loop.step == 1 else K.IBin("*", K.Int(loop.step), q))


def _written(stmts) -> set:
    out = set()
    for s in walk_stmts(stmts):
        if isinstance(s, Assign):
            out.add(s.target)
        elif isinstance(s, Loop):
            out.add(s.var)
        elif isinstance(s, Alloc):
            out.add(s.name)
    return out


def _stores(stmts, path: tuple, out: list) -> list:
    for s in stmts:
        if isinstance(s, Store):
            out.append((s.array, s.index, path))
        elif isinstance(s, Loop):
            _stores(s.body, path + (s,), out)
        elif isinstance(s, If):
            _stores(s.then, path, out)
            _stores(s.orelse, path, out)
    return out


def _decided(stmts, truth: dict) -> list:
    out = []
    for s in stmts:
        if isinstance(s, If) and s.cond in truth:
            out += _decided(s.then if truth[s.cond] else s.orelse, truth)
        elif isinstance(s, If):
            out.append(replace(s, then=tuple(_decided(s.then, truth)), orelse=tuple(_decided(s.orelse, truth))))
        elif isinstance(s, Loop):
            out.append(replace(s, body=tuple(_decided(s.body, truth))))
        else:
            out.append(s)
    return out


def _carried(body, written: set) -> bool:
    """May an iteration of a loop with this ``body`` read one of the scalars
    ``written`` (assigned in the body) before assigning it, getting the value
    of an earlier iteration?  A condition that reads nothing the body writes
    has the same value in every iteration, so each combination of those
    conditions is checked on its own (the tile loop's two version tests
    ``m < 64 and n >= 1024``: the second reads what the first assigned)."""
    conds = list(dict.fromkeys(s.cond for s in walk_stmts(body)
                               if isinstance(s, If) and not names(s.cond, set()) & written))
    if len(conds) > 4:
        conds = []
    for bits in range(1 << len(conds)):
        truth = {c: bool(bits >> k & 1) for k, c in enumerate(conds)}
        flat = _decided(body, truth)
        if any(_status(w, flat) == "read" for w in written):
            return True
    return False


# -- isl: iterations of L touch disjoint elements --------------------------------


def _own_tiles(loop: Loop, array: str) -> bool:
    """isl: every access of ``array`` in iteration ``u`` of ``loop`` lies in
    ``[K u, K u + K)`` for a tile size ``K`` of the loop, with every fact at
    its point (points.py: an index bounded by an assigned scalar, the jammed
    ``dx`` nest's, whose pairwise questions with every fact took 5.9 s of isl;
    one set per access took 0.2 s)."""
    reads, writes = reads_writes([loop])
    params = reads - writes
    return any(in_tiles(loop, array, "any", params, k, True, True) for k in tile_sizes(loop))


def _disjoint(loop: Loop, array: str) -> bool:
    """isl: no element of ``array`` stored in one iteration of ``loop`` is
    accessed (read or stored) in another, each access at its point (points.py;
    a name the loop reads and never assigns has one value throughout), pairwise
    with the loop bounds alone."""
    reads, writes = reads_writes([loop])
    params = reads - writes
    stores = accesses_of(loop, array, "write", "a", params, False)
    loads = accesses_of(loop, array, "read", "b", params, False)
    again = accesses_of(loop, array, "write", "b", params, False)
    if stores is None or loads is None or again is None:
        return False
    (adims, aws), (bdims, brs), (_, bws) = stores, loads, again  # one walk order: the same b dimensions
    dims = adims + bdims
    for aix, af in aws:
        for bix, bf in brs + bws:
            if len(aix) != len(bix):
                return False
            cons = af + bf + [f"{x} = {y}" for x, y in zip(aix, bix)] + [f"{adims[0]} != {bdims[0]}"]
            par = _params(cons, set(dims))
            if not _empty(f"[{par}] -> {{ [{', '.join(dims)}] : {' and '.join(f'({c})' for c in cons)} }}"):
                return False
    return True


@lru_cache(maxsize=4096)
def _empty(text: str) -> bool:
    """isl's emptiness of one set, by its text: a kernel's all-versions and
    size-class sources (and a program's primal and derivative kernels) ask
    the same questions, which were half of a cold deconvolution gradient's
    compile (0.43 of 2.2 s)."""
    return isl.Set(text).is_empty()


# -- chunked loop -----------------------------------------------------------------


def _chunkable(loop: Loop, top: list, pos: int, after: tuple, results: set, allocs: dict = {}):
    """``(accumulators, private allocations, accumulated arrays)`` when the top-level ``loop``
    (``top[pos]``) can run in chunks (module doc), else None."""
    if loop.parallel or not loop.body or loop.step < 1:
        return None
    stmts = list(walk_stmts(loop.body))
    if any(not isinstance(s, _PLAIN) for s in stmts):
        return None  # a break, a BLAS call: not handled
    written = _written(loop.body) | {loop.var}
    accs = sorted({s.target for s in stmts if isinstance(s, AccAdd)} - written)
    if set(accs) & reads_writes(loop.body, updates=False)[0]:
        return None  # a partial sum read inside the loop
    rest = tuple(top[pos + 1:]) + after
    if (written | set(accs)) & results or not all(dead_after(w, rest) for w in written):
        return None
    if _carried(loop.body, written - {loop.var}):
        return None  # a scalar carried from one iteration to the next
    if loop.var in names((loop.lo, loop.hi), set()):
        return None
    inner = {s.name for s in stmts if isinstance(s, Alloc)}
    stored = {s.array for s in stmts if isinstance(s, Store)} - inner
    others = [s for k, s in enumerate(top) if k != pos] + list(after)
    private = []
    k = pos - 1
    while k >= 0 and isinstance(top[k], (Alloc, Assign)):
        s = top[k]
        if isinstance(s, Alloc) and s.name in stored and not s.zero and not s.pooled and s.name not in results:
            if s.name not in reads_writes([t for t in others if t is not s])[0] | reads_writes(
                    [t for t in others if t is not s])[1]:
                private.append(s)
        k -= 1
    sums = []  # arrays only accumulated into (column sums, colsum.py): per-chunk copies
    for a in sorted(stored - {p.name for p in private}):
        # the tile question first: one set per access (a one-dimensional index
        # only, so others go on at once), where the pairwise one costs the product
        if _own_tiles(loop, a) or _disjoint(loop, a):
            continue
        if a in allocs and _only_accumulated(stmts, a):
            sums.append(a)
        else:
            return None
    return tuple(accs), tuple(private), tuple(sums)


def _only_accumulated(stmts, a: str) -> bool:
    """Every store into ``a`` is ``a[ix] = a[ix] + t`` and nothing else reads ``a``."""
    for t in stmts:
        if isinstance(t, Store) and t.array == a and _accumulation(t, {a}) is None:
            return False
        if a in _reads_besides(t, {a}):
            return False
    return True


def _reads_besides(t, accs: set) -> set:
    """The names statement ``t`` reads (its own loop bounds, condition, value,
    index or shape), not counting the array of an accumulation into ``accs``."""
    if isinstance(t, Store):
        own = _accumulation(t, accs)
        return names(t.index, set()) | names(own[2] if own else t.value, set())
    if isinstance(t, Loop):
        return names((t.lo, t.hi), set())
    if isinstance(t, If):
        return names(t.cond, set())
    if isinstance(t, (Assign, AccAdd)):
        return names(t.value, set())
    return names(t.shape, set())


def _chunk(loop: Loop, accs, private, fresh, sums=(), allocs: dict = {}) -> list:
    """``loop`` in ``T`` contiguous chunks (module doc), kernel-IR statements."""
    t, n, c = fresh("T"), fresh("N"), fresh("c")
    out = [Assign(t, K.MinMax("max", (K.Int(1), K.Name(THREADS_ARG)))), Assign(n, _trips(loop))]
    parts = {a: fresh(a + "_p") for a in sums}
    out += [Alloc(parts[a], (K.Name(t),) + tuple(allocs[a].shape), True, "temporary", parts[a]) for a in sums]
    part = {a: fresh(a + "_p") for a in accs}
    mine = {a: fresh(a + "_q") for a in accs}
    out += [Alloc(part[a], (K.Name(t),), False, "temporary", part[a]) for a in accs]
    cv = K.Name(c)
    body = list(private)
    first = K.Cmp("==", cv, K.Int(0))
    body += [Assign(mine[a], K.Select(first, K.Name(a), K.Float(0.0))) for a in accs]
    run = replace(loop, lo=_bound(loop, n, cv, t), hi=_bound(loop, n, K.IBin("+", cv, K.Int(1)), t),
                  body=_to_parts(_rename_acc(loop.body, mine), parts, cv))
    body.append(run)
    body += [Store(part[a], (cv,), K.Name(mine[a])) for a in accs]
    out.append(Loop(c, K.Int(0), K.Name(t), 1, tuple(body), "gen", parallel=True))
    for a in accs:  # the chunks' partial sums in chunk order
        k = fresh("k")
        out.append(Assign(a, K.Load(part[a], (K.Int(0),), True)))
        out.append(Loop(k, K.Int(1), K.Name(t), 1, (AccAdd(a, K.Load(part[a], (K.Name(k),), True)),), "gen"))
    for a in sums:
        out += _combine(a, parts[a], t, allocs, fresh)
    return out


def _to_parts(stmts, parts: dict, cv: K.KExpr) -> tuple:
    """``stmts`` with each accumulation ``A[ix] = A[ix] + t`` into an array of
    ``parts`` made into its chunk's copy ``parts[A][c, ix]``."""
    def to_part(st):
        got = _accumulation(st, set(parts)) if isinstance(st, Store) else None
        if got is None:
            return st
        a, ix, term = got
        at = (cv,) + tuple(ix)
        return Store(parts[a], at, K.FSum((K.Load(parts[a], at, True), term)))

    return _map_stmts_s(stmts, to_part) if parts else tuple(stmts)


def _combine(a: str, part: str, t: str, allocs: dict, fresh) -> list:
    """``A[e] += part[k, e]`` for every element, ``k`` in chunk order."""
    ix = tuple(fresh(f"e{d}") for d in range(len(allocs[a].shape)))
    at = tuple(K.Name(i) for i in ix)
    k = fresh("k")
    st = (Loop(k, K.Int(0), K.Name(t), 1, (Store(a, at, K.FSum((K.Load(a, at, True), K.Load(
        part, (K.Name(k),) + at, True)))),), "gen"),)
    for d in reversed(range(len(ix))):
        st = (Loop(ix[d], K.Int(0), allocs[a].shape[d], 1, st, "gen"),)
    return list(st)


# -- chunked accumulation inside a loop -------------------------------------------


def _inner_split(s: Loop, rest: tuple, allocs: dict):
    """The arrays the loop ``s`` (inside a top-level loop; ``rest`` what runs
    after it, the enclosing loop's next iteration included) accumulates into,
    when it can run in chunks adding into private copies, else None."""
    if s.parallel or s.step < 1 or s.kind not in ("scatter", "sum", "rel") or not s.body:
        return None
    stmts = list(walk_stmts(s.body))
    if any(not isinstance(t, _PLAIN) for t in stmts):
        return None
    written = _written(s.body) | {s.var}
    if {t.target for t in stmts if isinstance(t, AccAdd)} - written:
        return None  # a scalar accumulated across iterations: not handled here
    if _carried(s.body, written - {s.var}) or not all(dead_after(w, rest) for w in written):
        return None
    inner = {t.name for t in stmts if isinstance(t, Alloc)}
    accs = set()
    for t in stmts:
        if isinstance(t, Store) and t.array not in inner:
            got = _accumulation(t, {t.array})
            if got is None or t.array not in allocs:
                return None
            accs.add(t.array)
    if not accs:
        return None
    for t in stmts:  # an accumulated array is read only by its own accumulations
        if _reads_besides(t, accs) & accs:
            return None
    return tuple(sorted(accs))


def _split_inner(s: Loop, accs, allocs: dict, fresh) -> tuple:
    t, n, c = fresh("T"), fresh("N"), fresh("c")
    cv = K.Name(c)
    parts = {a: fresh(a + "_p") for a in accs}
    elements = K.Int(0)
    for a in accs:
        size = K.Int(1)
        for d in allocs[a].shape:
            size = K.IBin("*", size, K.MinMax("max", (K.Int(0), d)))
        elements = K.IBin("+", elements, size)
    worth = K.BoolOp("and", (K.Cmp(">", K.Name(t), K.Int(1)), K.Cmp(
        "<=", K.IBin("*", K.IBin("*", elements, K.Name(t)), K.Int(SPLIT_FACTOR)), K.Name(n))))

    run = replace(s, lo=_bound(s, n, cv, t), hi=_bound(s, n, K.IBin("+", cv, K.Int(1)), t),
                  body=_to_parts(s.body, parts, cv))
    split = [Alloc(parts[a], (K.Name(t),) + tuple(allocs[a].shape), True, "temporary", parts[a]) for a in accs]
    split.append(Loop(c, K.Int(0), K.Name(t), 1, (run,), "gen", parallel=True))
    for a in accs:  # element by element, the chunks' copies in chunk order
        split += _combine(a, parts[a], t, allocs, fresh)
    return (Assign(t, K.MinMax("max", (K.Int(1), K.Name(THREADS_ARG)))), Assign(n, _trips(s)),
            If(worth, tuple(split), (s,)))


def _map_stmts_s(stmts, sfn) -> tuple:
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = replace(s, body=_map_stmts_s(s.body, sfn))
        elif isinstance(s, If):
            s = replace(s, then=_map_stmts_s(s.then, sfn), orelse=_map_stmts_s(s.orelse, sfn))
        out.append(sfn(s))
    return tuple(out)


def _inner(stmts, rest: tuple, allocs: dict, fresh, done: list) -> tuple:
    """``stmts`` (inside a top-level loop) with each outermost qualifying loop
    run as a chunked accumulation; ``done`` collects how many were."""
    out = []
    for k, s in enumerate(stmts):
        after = tuple(stmts[k + 1:]) + rest
        if isinstance(s, Loop):
            accs = _inner_split(s, after, allocs)
            if accs:
                out += list(_split_inner(s, accs, allocs, fresh))
                done.append(s)
                continue
            s = replace(s, body=_inner(s.body, after + (s,), allocs, fresh, done))
        elif isinstance(s, If):
            s = replace(s, then=_inner(s.then, after, allocs, fresh, done),
                        orelse=_inner(s.orelse, after, allocs, fresh, done))
        out.append(s)
    return tuple(out)


# -- the pass ------------------------------------------------------------------------


def _chunked_loop(s: Loop, got, rest: tuple, allocs: dict, fresh) -> list:
    """The statements running ``s`` in chunks (``got``: ``_chunkable``'s answer)."""
    accs, private, sums = got
    new = _chunk(s, accs, private, fresh, sums, allocs)
    if sums:  # worth its copies (as parallel_split's rule): sizes * T * SPLIT_FACTOR <= the loop's work
        t = fresh("T")
        first = K.substitute(_iteration_work(s), {s.var: s.lo})
        work = K.IBin("*", _trips(s), first)  # (the first iteration's work, times the trips)
        size = K.Int(0)
        for a in sums:
            one = K.Int(1)
            for d in allocs[a].shape:
                one = K.IBin("*", one, K.MinMax("max", (K.Int(0), d)))
            size = K.IBin("+", size, one)
        worth = K.Cmp("<=", K.IBin("*", K.IBin("*", size, K.Name(t)), K.Int(SPLIT_FACTOR)), work)
        return [Assign(t, K.MinMax("max", (K.Int(1), K.Name(THREADS_ARG)))),
                If(worth, tuple(new), tuple(private) + (s,))]
    if accs:  # (a loop with partial sums is always chunked: codegen's split of reductions might wrap its fallback)
        return new
    done: list = []
    serial = replace(s, body=_inner(s.body, (s,) + rest, allocs, fresh, done))
    if not done:
        return new
    t = fresh("T")
    many = K.Cmp(">=", _trips(s), K.IBin("*", K.Int(CHUNK_MIN), K.Name(t)))
    # the serial loop allocates what the chunks would have
    return [Assign(t, K.MinMax("max", (K.Int(1), K.Name(THREADS_ARG)))),
            If(many, tuple(new), tuple(private) + (serial,))]


def chunk_loops(ir: KernelIR):
    """``(loop IR, handled)``: the serial kernel's loop IR ``ir`` with each
    top-level loop that qualifies run in per-thread chunks (module doc);
    ``handled``: the ids of the new top-level statements (left alone by
    parallel_split's scatter split)."""
    fresh = _Names()
    results = set(ir.results)
    allocs = {a.name: a for a in list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]}
    handled: set = set()

    def go(body: list, after: tuple) -> list:
        out = []
        for pos, s in enumerate(body):
            if isinstance(s, If):  # a top-level guard (a border's ``n >= 2``): its branches as top level
                rest = tuple(body[pos + 1:]) + after
                s2 = replace(s, then=tuple(go(list(s.then), rest)), orelse=tuple(go(list(s.orelse), rest)))
                if s2 != s:
                    handled.add(id(s2))
                out.append(s2)
                continue
            got = _chunkable(s, body, pos, after, results, allocs) if isinstance(s, Loop) else None
            if got is None:
                # left to the earlier parallel treatment (codegen: prange gen loops, split
                # reductions, parallel_split's scatters); inner accumulations are chunked
                # only as the fallback of a chunked loop with too few iterations
                out.append(s)
                continue
            out = [x for x in out if not any(x is p for p in got[1])]  # allocated in each chunk instead
            new = _chunked_loop(s, got, tuple(body[pos + 1:]) + after, allocs, fresh)
            handled.update(id(x) for x in new)
            out += new
        return out

    out = go(list(ir.body), ())
    return replace(ir, body=out), handled


__all__ = ["chunk_loops", "CHUNK_MIN", "SPLIT_FACTOR"]
