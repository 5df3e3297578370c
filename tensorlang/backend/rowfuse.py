"""Row fusion: one sweep over a large matrix for all the loops that read it
(paper Section 4.3; issue #13, the quadratic form's grad/primal time).

A gradient reads its large operands several times, one loop nest per
binding.  The quadratic form ``y = A x; loss = y·y`` differentiated in x and
A lowers (for A past the caches) to

    for i: y[i] = Σ_k A[i, k]·x[k]               # the primal's A x
    for i: w += y[i] - y[i]                      # A's finiteness witness (blas.py)
    for i: r[i] = y[i] + y[i]; for k: dA[i, k] = r[i]·x[k]
    for k: dx[k] = 0
    for i: c = r[i]; for k: dx[k] += A[i, k]·c   # Aᵀ r, row by row (blas.py)

two sweeps over A's 128 MB (n = 4000) and one over dA's.  Each row loop
only needs the rows the earlier ones produced *at the same i*, so the loops
fuse into one that visits each row of A once, while it is in cache:

    for i: y[i] = …; w += …; r[i] = …; dA[i, :] = …; dx[:] += A[i, :]·r[i]

This pass does that on the serial kernel's top-level statements, for any
loops, not this program alone:

* two top-level loops ``P`` (earlier) and ``Q`` match when their bounds and
  steps are equal, and they are *related*: both read a 2-D (or deeper) array
  at first subscript their own loop variable (a row sweep of the same
  matrix), or ``Q`` reads an array ``P`` writes (a producer and its consumer);
* they fuse when every name one writes and the other touches is an array
  accessed in both only at first subscript the loop variable (so iteration
  ``i`` of ``Q`` needs only what iteration ``i`` of ``P`` wrote, and the
  fused body runs ``P``'s part before ``Q``'s), and the statements between
  them split into those independent of ``P`` (moved in front of the fused
  loop) and those depending on it (moved after it), ``Q`` depending on none
  of the latter;
* the fusion is kept only when it lowers the number of top-level loop nests
  reading some 2-D array (fewer sweeps over a matrix); else the kernel is
  unchanged.

A GEMV whose matrix is past the caches runs loops (blas.py: the witnessed
``A v`` and the row-order ``vᵀA``); a smaller one calls BLAS, chosen at run
time from the sizes (``If(size test, [Gemm], loops)``, the test including
``elements < WITNESS_MIN``).  The fused loops are therefore a *version* of
the kernel: ``if not test₁ and … : fused else: original``, where the
original keeps every BLAS choice (and hfuse.py's fusions); when there is
one choice (blas.py writes the tests of ``A x`` and ``vᵀA`` over one matrix
alike), the original takes its BLAS side only: its loops would be dead code
that Numba compiles all the same (the quadratic form's kernel: 100 -> 50 lines).  Choices without
that bound (GEMMs, which BLAS takes at every large size) stay in the
version as they are: duplicating the kernel for sizes where a sweep costs
nothing would only double its compile time.  Top-level allocations are hoisted in front of the version test,
so they keep their huge pages (hugepages.py).  The version test reads only
sizes and the fused loops are right at every size: a kernel compiled for
sizes that take them prints them alone, one for sizes that take BLAS keeps
the test (size_classes.py).  Everything is built from
loop-IR nodes.  A serial pass (codegen ``serial_passes``), which the
parallel kernel runs in per-thread chunks where chunks.py can (else it
keeps a ``prange`` per nest).
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .blas import WITNESS_MIN, Gemm
from .hfuse import fuse_nests
from .loopir import AccAdd, Alloc, If, KernelIR, Loop, Store, walk_stmts
from .rw import OPAQUE, dead_after, has_break, independent, names, reads_writes, rename


def _accesses(stmts, out: list, stores: bool = True) -> list:
    """Every ``(array, index)`` a statement list loads (and stores, if ``stores``)."""

    def expr(e):
        if isinstance(e, K.Load):
            out.append((e.array, e.index))
            for i in e.index:
                expr(i)
        elif isinstance(e, (tuple, list)):
            for x in e:
                expr(x)
        elif isinstance(e, K.KExpr) and not isinstance(e, (K.Int, K.Bool, K.Float, K.Name)):
            for f in e.__dataclass_fields__:
                expr(getattr(e, f))

    for s in walk_stmts(stmts):
        if isinstance(s, Store):
            if stores:
                out.append((s.array, s.index))
            expr((s.index, s.value))
        elif isinstance(s, Loop):
            expr((s.lo, s.hi))
        elif isinstance(s, If):
            expr(s.cond)
        elif isinstance(s, (AccAdd,)) or hasattr(s, "value"):
            expr(s.value)
    return out


def _row_local(loop: Loop, name: str) -> bool:
    """Every access of the array ``name`` in ``loop`` has first subscript its variable,
    and no whole-array statement (a BLAS call, an allocation) touches it."""
    for s in walk_stmts(loop.body):
        if (isinstance(s, Gemm) and name in (s.out,) + s.arrays_read()) or (isinstance(s, Alloc) and s.name == name):
            return False
    got = [idx for a, idx in _accesses([loop], []) if a == name]
    return bool(got) and all(idx and idx[0] == K.Name(loop.var) for idx in got)


def _matrices(loop: Loop) -> set:
    """The arrays of 2 or more dimensions ``loop`` reads row by row (first subscript its variable)."""
    arrs = {a for a, idx in _accesses([loop], [], stores=False) if len(idx) >= 2}
    return {a for a in arrs if _row_local(loop, a)}


def _related(p: Loop, q: Loop) -> bool:
    if _matrices(p) & _matrices(q):
        return True
    _, wp = reads_writes([p])
    rq, _ = reads_writes([q])
    arrays = {a for a, _ in _accesses([q], [])}
    return bool(wp & rq & arrays)


def _legal(p: Loop, q: Loop) -> bool:
    if (p.lo, p.hi, p.step) != (q.lo, q.hi, q.step) or has_break(p.body) or has_break(q.body):
        return False
    rp, wp = reads_writes([p])
    rq, wq = reads_writes([q])
    if OPAQUE in wp | wq:
        return False
    if p.var != q.var and (p.var in rq | wq or q.var in rp | wp):
        return False  # a renamed loop variable would collide
    hazards = ((wp & (rq | wq)) | (wq & rp)) - {p.var, q.var}
    return all(_row_local(p, h) and _row_local(q, h) for h in hazards)


def _sweeps(stmts) -> dict:
    """Matrix name -> number of top-level loops reading it row by row."""
    out: dict = {}
    for s in stmts:
        if isinstance(s, Loop):
            for a in _matrices(s):
                out[a] = out.get(a, 0) + 1
    return out


def _fuse_once(body: list, results: set):
    """``body`` with one pair of top-level loops fused, or None."""
    for i, p in enumerate(body):
        if not isinstance(p, Loop):
            continue
        for j in range(i + 1, len(body)):
            q = body[j]
            if not (isinstance(q, Loop) and _related(p, q) and _legal(p, q)):
                continue
            if q.var in results or not dead_after(q.var, body[j + 1:]):
                continue
            between, after = [], []
            for m in body[i + 1:j]:  # those depending on P (or on one that does) go after the fused loop
                (after if not independent([p] + after, [m]) else between).append(m)
            if after and not independent([q], after):
                continue
            fused = replace(p, body=tuple(p.body) + tuple(rename(q.body, q.var, p.var) if q.var != p.var else q.body),
                            kind=p.kind if p.kind == q.kind else "sum", parallel=False)
            return body[:i] + between + [fused] + after + body[j + 1:]
    return None


def _loops_when_large(cond) -> bool:
    """The BLAS choice ``cond`` requires a matrix under ``WITNESS_MIN`` elements
    (blas.py's GEMVs past the caches run loops): only then can the fused
    version run at a size where a sweep costs anything.  A choice BLAS takes at
    every large size (a GEMM) would only duplicate the kernel's code."""
    parts = cond.args if isinstance(cond, K.BoolOp) and cond.op == "and" else (cond,)
    return any(isinstance(p, K.Cmp) and p.op == "<" and p.rhs == K.Int(WITNESS_MIN) for p in parts)


def _negate(c):
    """``not c`` as kernel IR (comparisons, and/or, constants), or None."""
    flip = {"<": ">=", ">=": "<", "<=": ">", ">": "<="}
    if isinstance(c, K.Cmp) and c.op in flip:
        return K.Cmp(flip[c.op], c.lhs, c.rhs)
    if isinstance(c, K.Bool):
        return K.Bool(not c.value)
    if isinstance(c, K.BoolOp):
        parts = [_negate(a) for a in c.args]
        if None in parts:
            return None
        return K.or_of(parts) if c.op == "and" else K.and_of(parts)
    return None


def row_fuse(ir: KernelIR) -> KernelIR:
    """Signature: row_fuse : KernelIR -> KernelIR (module doc).  Unchanged unless
    some matrix is swept by fewer top-level loops afterwards."""
    sizes = {a for a in ir.args if a.startswith("n")}
    body = list(ir.body)
    # the run-time BLAS choices (size tests only): the fused version takes their loops
    conds = []
    for s in body:
        if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then) and names(s.cond, set()) <= sizes \
                and _loops_when_large(s.cond):
            if s.cond not in conds:
                conds.append(s.cond)
    version: list = []
    for s in body:
        version.extend(s.orelse if isinstance(s, If) and s.cond in conds else (s,))
    allocs = [s for s in version if isinstance(s, Alloc)]
    if any(s not in body for s in allocs):
        return ir  # an allocation inside a BLAS choice: not hoisted (keep the kernel as it is)
    version = [s for s in version if not isinstance(s, Alloc)]
    before = _sweeps(version)
    results = set(ir.results) | set(ir.copies)
    while True:
        got = _fuse_once(version, results)
        if got is None:
            break
        version = got
    after = _sweeps(version)
    if not any(after.get(a, 0) < n for a, n in before.items()):
        return ir
    rest = [s for s in body if not isinstance(s, Alloc)]
    if not conds:
        return replace(ir, body=allocs + version)
    nots = [_negate(c) for c in conds]  # every choice takes its loops
    if None in nots:
        return ir
    test = K.and_of(nots)
    if len(conds) == 1:
        # the else branch runs only when the one choice holds: its BLAS side
        # alone (the loops there are dead code Numba would still compile)
        rest = [x for s in rest for x in (s.then if isinstance(s, If) and s.cond == conds[0] else (s,))]
    orig = fuse_nests(replace(ir, body=rest)).body
    # the fused loops are right at every size: a size-class choice whose general side is
    # ``then`` (size_classes.py; a kernel for sizes that take them prints them alone)
    return replace(ir, body=allocs + [If(test, tuple(version), tuple(orig), general="then")])


__all__ = ["row_fuse"]
