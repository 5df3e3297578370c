"""Column partial sums: vectorizable reductions over 2-D (and deeper) domains
(paper Section 4.3, sums become accumulations; issue #17, heat adjoint).

A sum over a rectangular domain is lowered as ``for i: for j: acc += e(i, j)``.
Without fastmath (codegen keeps IEEE order rules) LLVM cannot vectorize the
inner loop: every iteration adds into the one scalar ``acc`` (codegen's
``LANES`` give four scalar chains, still one element per instruction).  The
rewrite here keeps one partial sum per *column* ``j``::

    w = zeros(hi - lo)
    for i: ...; for j in range(lo, hi): w[j - lo] += e(i, j); ...
    for q in range(hi - lo): acc += w[q]

so the inner loop has no carried dependence (each ``j`` owns ``w[j - lo]``)
and runs in SIMD lanes (heat adjoint's ``Σ dstate · lap(s)`` on 256²: 60 ->
35 µs).  The order of additions changes (columns first, then across the
columns) but is fixed by the loop bounds only: deterministic.

It applies, in the serial kernel, to a loop ``L`` (a sum loop not nested in
another loop) whose body holds an innermost loop ``for j in range(lo, hi):
acc += e`` with ``acc`` assigned nowhere in ``L`` and read there only by its
accumulations, and ``lo``, ``hi`` invariant in ``L`` (no loop variable or
local of ``L`` in them).  A long row keeps at most ``MAX_COLUMNS`` partial
sums (more would leave the cache): its first ``MAX_COLUMNS`` points go into
the columns, the rest (``j >= lo + MAX_COLUMNS``, an empty loop for any
shorter row) into ``acc`` as before.  One copy of ``L`` serves every row
length: an earlier form tested the length and kept a second, plain copy of
the whole nest, which doubled its generated source (issue #14 item 6, cold
compile latency; wave's kernels: 710 -> 639 lines).
Everything is built from loop-IR nodes (``loopir.py``, ``kir.py``).
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import AccAdd, Alloc, Assign, Break, If, KernelIR, Loop, Store, map_outer_loops, substitute_stmts, walk_stmts
from .rw import names, reads_writes

MAX_COLUMNS = 1 << 14  # 128 KiB of float64 partial sums per reduction variable


def _inner_accs(s) -> list:
    """The scalars an innermost loop ``for j in range(lo, hi)`` (step 1, a sum
    loop) accumulates into by statements of its own body, ``acc += e`` with
    ``acc`` read nowhere else in the loop."""
    if not (isinstance(s, Loop) and s.step == 1 and s.kind == "sum" and not s.parallel):
        return []
    if any(isinstance(x, (Loop, Break)) for x in walk_stmts(s.body)):
        return []
    accs = []
    for x in s.body:
        if isinstance(x, AccAdd) and x.target not in accs:
            accs.append(x.target)
    if not accs:
        return []
    direct = {id(x) for x in s.body}
    nested = {x.target for x in walk_stmts(s.body) if isinstance(x, AccAdd) and id(x) not in direct}
    reads = reads_writes(s.body, updates=False)[0]
    return [a for a in accs if a not in nested and a not in reads]


def candidates(loop: Loop) -> list:
    """``[(inner loop, [acc…])]``: the inner reduction loops of ``loop``'s
    body (directly or under its ifs, not in deeper loops) whose scalars may
    keep column partial sums."""
    if loop.kind != "sum" or loop.parallel or any(isinstance(s, Break) for s in walk_stmts(loop.body)):
        return []
    reads, written = reads_writes(loop.body, updates=False)
    written = written | {loop.var}
    assigned = {s.target for s in walk_stmts(loop.body) if isinstance(s, Assign)}
    out = []

    def scan(stmts):
        for s in stmts:
            if isinstance(s, Loop):
                if names((s.lo, s.hi), set()) & written:
                    continue
                accs = [a for a in _inner_accs(s) if a not in assigned and a not in reads]
                if accs:
                    out.append((s, accs))
            elif isinstance(s, If):
                scan(s.then)
                scan(s.orelse)

    scan(loop.body)
    return out


def _column_form(loop: Loop, inner: list, fresh) -> tuple:
    """``loop`` with the accumulations of every loop of ``inner`` going into
    their own column arrays, guarded by the rows' lengths (module doc)."""
    pre, post, sub, tests = [], [], {}, []
    for m, accs in inner:
        # columns kept: the row's length, at most MAX_COLUMNS
        ext = K.MinMax("min", (K.IBin("-", m.hi, m.lo), K.Int(MAX_COLUMNS)))
        col = (K.IBin("-", K.Name(m.var), m.lo),)
        arr = {}
        for acc in accs:
            w, q = fresh(acc, "w"), fresh(acc, "q")
            arr[acc] = w
            pre.append(Alloc(w, (ext,), True, "temporary", acc))
            post.append(Loop(q, K.Int(0), ext, 1, (AccAdd(acc, K.Load(w, (K.Name(q),))),), "sum"))
        body = tuple(Store(arr[x.target], col, K.FSum((K.Load(arr[x.target], col), x.value)))
                     if isinstance(x, AccAdd) and x.target in arr else x for x in m.body)
        split = K.int_add(m.lo, K.Int(MAX_COLUMNS))
        # the row's tail beyond MAX_COLUMNS points (none in a shorter row): into acc
        sub[id(m)] = (replace(m, hi=K.MinMax("min", (m.hi, split)), body=body), replace(m, lo=split))
    cols = replace(loop, body=substitute_stmts(loop.body, sub))
    return tuple(pre) + (cols,) + tuple(post)


def _namer(used: set, prefix: str = ""):
    """``fresh(base, tag)``: ``<base>_<prefix><tag><k>``, a name not in ``used`` (then added)."""
    count = [0]

    def fresh(base: str, tag: str) -> str:
        while True:
            count[0] += 1
            nm = f"{base}_{prefix}{tag}{count[0]}"
            if nm not in used:
                used.add(nm)
                return nm

    return fresh


def column_sums(ir: KernelIR) -> KernelIR:
    """Signature: column_sums : KernelIR -> KernelIR (module doc); the
    statements not nested in a loop are rewritten, the rest kept."""
    used = {s.name for s in ir.allocs} | set(ir.args) | reads_writes(ir.body, updates=False)[1]
    fresh, changed = _namer(used), [False]

    def top(s) -> tuple:
        inner = candidates(s)
        if not inner:
            return (s,)
        changed[0] = True
        return _column_form(s, inner, fresh)

    body = map_outer_loops(ir.body, top)
    return replace(ir, body=list(body)) if changed[0] else ir


def chunk_column_sums(chunk: Loop) -> tuple:
    """One thread's chunk of a split reduction (parallel_split.py), with its
    own column partial sums: the statements that replace it, the column
    arrays allocated in the chunk (private to its thread)."""
    inner = candidates(chunk)
    if not inner:
        return (chunk,)
    # the chunk's accumulators are renamed ``<acc>_q`` (codegen ``_chunked``),
    # so ``<acc>_q_c<tag><k>`` clashes with no name outside the chunk
    r, w = reads_writes([chunk])
    return _column_form(chunk, inner, _namer(r | w, "c"))


__all__ = ["column_sums", "chunk_column_sums", "MAX_COLUMNS"]
