"""Parallel variants of reductions and scatters (paper Section 4.3; issue #13 item 4).

Split out of codegen.py, which prints what these decide:

* ``reductions``: the top-level reduction loops (a sum block's outer loop,
  not inside another loop, accumulating into scalars it does not read) that
  the parallel variant runs as ``T`` contiguous chunks with their own partial
  sums, added in chunk order (codegen ``_chunked``);
* ``split_scatters``: each top-level scatter loop whose only shared writes
  are accumulations, rewritten (kernel-IR nodes) into work-balanced chunks,
  each adding into its own slice of a ``[T, ...]`` copy of the output, the
  slices then added in chunk order.

The chunks depend only on ``T`` and the loop bounds, never on scheduling, so
a given thread count always gives the same result.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .blas import Gemm
from .loopir import AccAdd, Alloc, Assign, Break, If, KernelIR, Loop, Store, map_stmts, walk_stmts
from .rw import dead_after, names, reads_writes

# kernel_parallel's extra last argument (no allocator name has an underscore);
# an argument, not numba.get_num_threads() in the kernel, which would keep
# Numba from caching the compiled code
THREADS_ARG = "n_threads"


# -- parallel reductions (issue #13 item 4) -------------------------------------------


def _own_break(stmts) -> bool:
    """A ``break`` that would leave this loop (not one of an inner loop)."""
    for s in stmts:
        if isinstance(s, Break) or (isinstance(s, If) and (_own_break(s.then) or _own_break(s.orelse))):
            return True
    return False


def _reduction_vars(loop: Loop, rest, results: set):
    """The scalars ``loop`` reduces into, when it is a reduction that can be
    split into independent chunks; else None.  ``rest``: the statements that
    run after it, ``results``: the names the kernel returns."""
    if loop.parallel or loop.kind not in ("sum", "rel") or _own_break(loop.body):
        return None
    stmts = list(walk_stmts(loop.body))
    written = {loop.var}
    for s in stmts:
        if isinstance(s, (Assign, Alloc)):
            written.add(s.target if isinstance(s, Assign) else s.name)
        elif isinstance(s, Loop):
            written.add(s.var)
    accs = sorted({s.target for s in stmts if isinstance(s, AccAdd)} - written)
    if not accs:
        return None
    # every array stored to is allocated per iteration (no shared writes)
    mine = {s.name for s in stmts if isinstance(s, Alloc) and not s.pooled}
    if any(isinstance(s, Store) and s.array not in mine for s in stmts):
        return None
    if set(accs) & reads_writes(loop.body, updates=False)[0]:
        return None  # a partial sum read inside the loop: not a plain reduction
    # a value computed in the loop and read after it (before being assigned
    # again) would be some chunk's, not the last iteration's; a later loop
    # that reuses a name (the peeled borders of a stencil reuse ``i1``,
    # ``v3``...) assigns it first
    if written & results or not all(dead_after(w, rest) for w in written):
        return None
    return tuple(accs)


def reductions(ir: KernelIR) -> dict:
    """``id(loop) -> reduction variables`` for the top-level reductions that
    the parallel variant splits into per-thread chunks."""
    out: dict = {}
    results = set(ir.results)

    def collect(stmts, after: tuple):
        # ``after``: what runs once ``stmts`` are done (the rest of the enclosing lists)
        for k, s in enumerate(stmts):
            rest = tuple(stmts[k + 1:]) + after
            if isinstance(s, Loop):
                if not s.parallel and s.kind in ("sum", "rel"):
                    accs = _reduction_vars(s, rest, results)
                    if accs:
                        out[id(s)] = accs
            elif isinstance(s, If):
                collect(s.then, rest)
                collect(s.orelse, rest)

    collect(tuple(ir.body), ())
    return out


def _reads_except(stmts, skip, out: set) -> set:
    """Names read by ``stmts`` outside the statement ``skip``."""
    for s in stmts:
        if s is skip:
            continue
        if isinstance(s, If):
            names(s.cond, out)
            _reads_except(s.then, skip, out)
            _reads_except(s.orelse, skip, out)
        else:
            out |= reads_writes([s])[0]
    return out


def _rename_acc(stmts, ren: dict) -> tuple:
    out = []
    for s in stmts:
        match s:
            case AccAdd(target=t, value=v) if t in ren:
                s = AccAdd(ren[t], v)
            case Loop(body=b):
                s = replace(s, body=_rename_acc(b, ren))
            case If(then=t, orelse=e):
                s = replace(s, then=_rename_acc(t, ren), orelse=_rename_acc(e, ren))
        out.append(s)
    return tuple(out)


# -- parallel scatters (issue #13 item 4) ---------------------------------------------------
#
# A scatter loop (scatter.py: ``D[h(y)] += term(y)`` over X's points) writes
# shared elements, so its iterations cannot simply be spread over threads.
# Its parallel variant gives each of the ``T`` chunks a private partial copy
# of every array it accumulates into (one slice of a zeroed ``[T, ...]``
# buffer), runs the chunk's outer iterations adding into that slice, then
# adds the slices into the array element by element in chunk order.  The
# chunks are contiguous runs of the outer loop balanced by a work count
# (each outer iteration counts 1 + the trip counts of its directly nested
# loops whose bounds are known before the iteration runs), a function of the
# loop bounds and ``T`` only: a given thread count gives bitwise the same
# result, equal to the serial one to rounding.
#
# Rule: the private copies cost ``T`` times the output in memory and in the
# final additions, so the chunked loop runs only when
#     (elements accumulated into) * T * 4 <= (work count),
# checked at run time (the counts depend on the sizes); otherwise the serial
# loop runs, inside the parallel variant as well.
SCATTER_SPLIT_FACTOR = 4


def _accumulation(s, arrays: set):
    """``(array, index, term)`` when ``s`` is ``a[ix] = a[ix] + term`` for an
    array ``a`` in ``arrays``; else None."""
    if not isinstance(s, Store) or s.array not in arrays or not isinstance(s.value, K.FSum):
        return None
    terms = s.value.terms
    if len(terms) != 2 or terms[0] != K.Load(s.array, s.index, terms[0].unsigned if isinstance(terms[0], K.Load) else True):
        return None
    return s.array, s.index, terms[1]


def _zeroing(s, arrays: set) -> bool:
    """``a[ix] = 0`` for an array ``a`` in ``arrays``: a tiled accumulation
    zeroes its tile's slab as the tile starts (scatter.py), in the loop."""
    return isinstance(s, Store) and s.array in arrays and K.is_const(s.value, 0.0)


def _scatter_split(loop: Loop, top: list, body: list, results: set, allocs: dict):
    """``(accumulated arrays, private allocations)`` when the scatter
    ``loop`` (in the statement list ``top``, part of the kernel's ``body``,
    in no other loop) can run in per-thread chunks, else None."""
    # a relation-driven scatter (the transposed sum over a relation) is a 'rel' loop;
    # any loop qualifies whose only shared writes are accumulations (checked below)
    if loop.parallel or loop.kind not in ("scatter", "rel") or loop.step != 1 or _own_break(loop.body):
        return None
    stmts = list(walk_stmts(loop.body))
    written = {loop.var}
    for s in stmts:
        if isinstance(s, (Assign, AccAdd)):
            written.add(s.target)
        elif isinstance(s, Loop):
            written.add(s.var)
        elif isinstance(s, Alloc):
            written.add(s.name)
    if {s.target for s in stmts if isinstance(s, AccAdd)} - {s.target for s in stmts if isinstance(s, Assign)}:
        return None  # a scalar from outside the loop accumulated: not handled here
    stored = {s.array for s in stmts if isinstance(s, Store)}
    inner = {s.name for s in stmts if isinstance(s, Alloc)}
    outside = _reads_except(body, loop, set(results))
    before, k = set(), next(i for i, t in enumerate(top) if t is loop) - 1
    while k >= 0 and isinstance(top[k], Alloc) and not top[k].pooled:
        before.add(top[k].name)
        k -= 1
    if written & outside:
        return None  # a value computed in the loop is read after it
    accs, private = set(), []
    for a in sorted(stored - inner):
        sites = [s for s in stmts if isinstance(s, Store) and s.array == a]
        if a in allocs and a in before and not allocs[a].zero and a not in outside and a not in results:
            private.append(allocs[a])  # a contracted per-iteration array, allocated just before the loop
        elif a in allocs and all(_accumulation(s, {a}) or _zeroing(s, {a}) for s in sites) \
                and any(_accumulation(s, {a}) for s in sites):
            if any(a in _stmt_reads(s, accs | {a}) for s in stmts):
                return None  # read apart from its own accumulation
            accs.add(a)
        else:
            return None
    if not accs:
        return None
    return tuple(sorted(accs)), tuple(private)


def _stmt_reads(s, accs) -> set:
    """Names one statement reads itself (not its body's); an accumulation
    into an array of ``accs`` does not count as reading it."""
    out: set = set()
    match s:
        case Loop(lo=lo, hi=hi):
            names(lo, out)
            names(hi, out)
        case If(cond=c):
            names(c, out)
        case Assign(value=v) | AccAdd(value=v):
            names(v, out)
        case Store(array=a, index=ix):
            got = _accumulation(s, accs)
            for i in ix:
                names(i, out)
            names(got[2] if got else s.value, out)
        case Alloc(shape=sh):
            for x in sh:
                names(x, out)
        case Gemm():
            out.update(s.arrays_read())
    return out


def _size(alloc: Alloc) -> K.KExpr:
    out = K.Int(1)
    for d in alloc.shape:
        out = K.IBin("*", out, K.MinMax("max", (K.Int(0), d)))
    return out


def _iteration_work(loop: Loop) -> K.KExpr:
    """1 + the trip counts of the loops directly in ``loop``'s body whose
    bounds read nothing the iteration computes (a lower bound on its work)."""
    local = set()
    for s in walk_stmts(loop.body):
        if isinstance(s, (Assign, AccAdd)):
            local.add(s.target)
        elif isinstance(s, Loop):
            local.add(s.var)
        elif isinstance(s, (Alloc, Store)):
            local.add(s.name if isinstance(s, Alloc) else s.array)
    w = K.Int(1)
    for s in loop.body:
        leaves = [t for t in walk_stmts(s.body) if not isinstance(t, Loop)] if isinstance(s, Loop) else []
        if leaves and all(_zeroing(t, {getattr(t, "array", None)}) for t in leaves):
            continue  # a tile's zeroing (scatter.py) counts as before, when it ran outside the loop
        if isinstance(s, Loop) and s.step == 1 and not (names(s.lo, set()) | names(s.hi, set())) & local:
            w = K.IBin("+", w, K.MinMax("max", (K.Int(0), K.IBin("-", s.hi, s.lo))))
    return w


def _rename_array(stmts, old: str, new: str) -> tuple:
    def fn(e):
        return replace(e, array=new) if isinstance(e, K.Load) and e.array == old else e

    def sfn(s):
        return replace(s, array=new) if isinstance(s, Store) and s.array == old else s

    return map_stmts(stmts, fn, sfn)


def _split_scatter(loop: Loop, accs, private, allocs: dict) -> list:
    """The statements running ``loop`` in ``T`` balanced chunks (kernel-IR
    nodes, printed like any others), or serially when the output is large."""
    v = loop.var
    T, W, pre, c, k = f"{v}_T", f"{v}_W", f"{v}_pre", f"{v}_c", f"{v}_k"
    off = K.IBin("-", K.Name(v), loop.lo)
    count = [Assign(W, K.Int(0)), Alloc(pre, (K.IBin("-", loop.hi, loop.lo),), False, "temporary", pre),
             Loop(v, loop.lo, loop.hi, 1, (Store(pre, (off,), K.Name(W)), AccAdd(W, _iteration_work(loop))), "gen"),
             Assign(T, K.MinMax("max", (K.Int(1), K.Name(THREADS_ARG))))]
    elements = K.Int(0)
    for a in accs:
        elements = K.IBin("+", elements, _size(allocs[a]))
    worth = K.BoolOp("and", (K.Cmp(">", K.Name(T), K.Int(1)), K.Cmp(
        "<=", K.IBin("*", K.IBin("*", elements, K.Name(T)), K.Int(SCATTER_SPLIT_FACTOR)), K.Name(W))))
    body = loop.body
    parts = {a: f"{a}_p" for a in accs}

    zeroed = {s.array for s in walk_stmts(body) if _zeroing(s, set(accs))}

    def to_part(s):
        if _zeroing(s, set(accs)):
            return replace(s, array=parts[s.array], index=(K.Name(c),) + tuple(s.index))
        got = _accumulation(s, set(accs)) if isinstance(s, Store) else None
        if got is None:
            return s
        a, ix, term = got
        at = (K.Name(c),) + tuple(ix)
        return Store(parts[a], at, K.FSum((K.Load(parts[a], at), term)))

    body = map_stmts(body, lambda e: None, to_part)
    mine = []
    for al in private:
        new = f"{al.name}_c"
        body = _rename_array(body, al.name, new)
        mine.append(replace(al, name=new))
    # the chunk of outer iteration v: its work prefix scaled to [0, T)
    chunk_of = K.MinMax("min", (K.IBin("-", K.Name(T), K.Int(1)),
                                K.IBin("//", K.IBin("*", K.Load(pre, (off,)), K.Name(T)), K.Name(W))))
    run = Loop(v, loop.lo, loop.hi, 1, (If(K.Cmp("==", chunk_of, K.Name(c)), body),), "gen")
    split = [Alloc(parts[a], (K.Name(T),) + tuple(allocs[a].shape), True, "temporary", parts[a]) for a in accs]
    split.append(Loop(c, K.Int(0), K.Name(T), 1, tuple(mine) + (run,), "gen", parallel=True))
    for a in accs:  # element by element (in parallel), the chunks' copies in chunk order
        ix = tuple(f"{a}_e{d}" for d in range(len(allocs[a].shape)))
        at = tuple(K.Name(i) for i in ix)
        st = (Loop(k, K.Int(0), K.Name(T), 1, (Store(a, at, K.FSum((K.Load(a, at), K.Load(parts[a], (K.Name(k),) + at)))),), "gen"),)
        if a in zeroed:
            # the loop zeroes every element it does not skip (scatter.py), so ``a``
            # holds no zeros before it: the first chunk's copy is stored, not added
            st = (Store(a, at, K.Load(parts[a], (K.Int(0),) + at)), replace(st[0], lo=K.Int(1)))
        for d in reversed(range(len(ix))):
            st = (Loop(ix[d], K.Int(0), allocs[a].shape[d], 1, st, "gen", parallel=d == 0),)
        split += list(st)
    return count + [If(worth, tuple(split), (loop,))]


def split_scatters(ir: KernelIR, skip=frozenset()) -> list:
    """The parallel variant's top-level statements: each scatter loop not
    inside another loop that qualifies (``_scatter_split``) replaced by
    ``_split_scatter``; ``skip``: ids of top-level statements left as they are
    (already run in chunks, chunks.py)."""
    allocs = {a.name: a for a in list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]}

    def go(stmts) -> list:
        out = []
        for s in stmts:
            if id(s) in skip:
                out.append(s)
                continue
            if isinstance(s, If):
                s = replace(s, then=tuple(go(s.then)), orelse=tuple(go(s.orelse)))
            got = _scatter_split(s, stmts, ir.body, set(ir.results), allocs) if isinstance(s, Loop) else None
            out += _split_scatter(s, *got, allocs) if got else [s]
        return out

    return go(ir.body)
