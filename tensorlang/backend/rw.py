"""Which names loop-IR statements read and write: the dependence analysis
shared by the loop passes that move, merge or split statements (hfuse.py's
nest fusion, rowfuse.py's row fusion, colsum.py's column sums, fission.py,
parallel_split.py's per-thread reductions) and by codegen.

A *name* is anything the kernel's source names: an array, a local scalar, a
loop variable, a size argument.  An expression reads the names it mentions
(``names``); a statement reads the names of its expressions and writes its
target (a loop writes its variable, an allocation its array, a BLAS call
``blas.Gemm`` its output).  An accumulation ``acc += e`` reads and writes
``acc``; a store ``a[i] = e`` reads and writes ``a`` (a partial write: the
array's other elements live on).  A statement this analysis does not know
reads and writes ``OPAQUE``, so that it depends on everything.
Built from loop-IR nodes (``loopir.py``, ``kir.py``).
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .blas import Gemm
from .loopir import AccAdd, Alloc, Assign, Break, If, Loop, Store, walk_stmts

OPAQUE = "<opaque statement>"  # not a name the printer can produce


def names(e, out: set) -> set:
    """``out`` with every name the kernel-IR expression ``e`` (or a tuple or list of them) reads.
    Every pass's dependence test calls this (the parallel variant's ``chunk_loops`` some
    30,000 times for one kernel), so it dispatches on the exact type first."""
    t = type(e)
    if t is K.Name:
        out.add(e.name)
    elif t is K.Load:
        out.add(e.array)
        for i in e.index:
            names(i, out)
    elif t is tuple or t is list:
        for x in e:
            names(x, out)
    elif t is not K.Int and t is not K.Float and isinstance(e, K.KExpr):
        for f in K.field_names(t):
            names(getattr(e, f), out)
    return out


def reads_writes(stmts, updates: bool = True) -> tuple:
    """``(read names, written names)`` of statements (module doc).  With
    ``updates=False`` an accumulation neither reads nor writes its target and a
    store does not write its array: the names read besides the accumulators,
    and the names the statements define (colsum.py, fission.py)."""
    reads: set = set()
    writes: set = set()
    for s in walk_stmts(stmts):
        if isinstance(s, Loop):
            names((s.lo, s.hi), reads)
            writes.add(s.var)
        elif isinstance(s, If):
            names(s.cond, reads)
        elif isinstance(s, Assign):
            names(s.value, reads)
            writes.add(s.target)
        elif isinstance(s, AccAdd):
            names(s.value, reads)
            if updates:
                reads.add(s.target)
                writes.add(s.target)
        elif isinstance(s, Store):
            names((s.index, s.value), reads)
            reads.add(s.array)  # a partial write: the array's other elements live on
            if updates:
                writes.add(s.array)
        elif isinstance(s, Alloc):
            names(s.shape, reads)
            writes.add(s.name)
        elif isinstance(s, Gemm):  # out = lhs · rhs over whole arrays (blas.py)
            reads.update(s.arrays_read())
            writes.add(s.out)
        elif not isinstance(s, Break):  # a statement this analysis does not know: depends on everything
            reads.add(OPAQUE)
            writes.add(OPAQUE)
    return reads, writes


def independent(a, b, skip=frozenset()) -> bool:
    """Neither statement list writes a name the other reads or writes (the
    names in ``skip`` excepted), and neither holds an unknown statement: they
    may run in either order, or interleaved."""
    ra, wa = reads_writes(a)
    rb, wb = reads_writes(b)
    wa, wb = wa - skip, wb - skip
    if OPAQUE in wa or OPAQUE in wb:
        return False
    return not (wa & (rb | wb) or wb & ra)


def has_break(stmts) -> bool:
    return any(isinstance(s, Break) for s in walk_stmts(stmts))


def rename(x, old: str, new: str):
    """``x`` (statements or kernel-IR expressions) with the name ``old`` read as ``new``."""
    if isinstance(x, K.Name):
        return K.Name(new) if x.name == old else x
    if isinstance(x, tuple):
        return tuple(rename(y, old, new) for y in x)
    if isinstance(x, list):
        return [rename(y, old, new) for y in x]
    if isinstance(x, (K.Int, K.Bool, K.Float)) or not hasattr(x, "__dataclass_fields__"):
        return x
    kw = {f: rename(getattr(x, f), old, new) for f in K.field_names(type(x))}
    if isinstance(x, Loop) and x.var == old:
        kw["var"] = new
    if isinstance(x, (Assign, AccAdd)) and x.target == old:
        kw["target"] = new
    return replace(x, **kw)


def _status(var: str, stmts) -> str:
    """'read' when ``stmts`` may read ``var`` before assigning it, 'killed'
    when they surely assign it first, else 'none'."""
    for s in stmts:
        if isinstance(s, Assign):
            if var in names(s.value, set()):
                return "read"
            if s.target == var:
                return "killed"
        elif isinstance(s, AccAdd):
            if var in names(s.value, set()) or s.target == var:
                return "read"
        elif isinstance(s, Store):
            if var in names((s.index, s.value), set()) or s.array == var:
                return "read"
        elif isinstance(s, Alloc):
            if var in names(s.shape, set()):
                return "read"
            if s.name == var:
                return "killed"
        elif isinstance(s, If):
            if var in names(s.cond, set()):
                return "read"
            a, b = _status(var, s.then), _status(var, s.orelse)
            if "read" in (a, b):
                return "read"
            if a == b == "killed":
                return "killed"
        elif isinstance(s, Loop):
            if var in names((s.lo, s.hi), set()):
                return "read"
            # the body may run zero times: it kills nothing for what follows
            if s.var != var and _status(var, s.body) == "read":
                return "read"
        elif isinstance(s, Gemm):  # reads its operand arrays, then writes ``out`` entirely (blas.py)
            if var in s.arrays_read():
                return "read"
            if s.out == var:
                return "killed"
        elif not isinstance(s, Break):  # a statement this analysis does not know: it may read anything
            return "read"
    return "none"


def dead_after(var: str, rest) -> bool:
    """``var`` is not read by ``rest`` before being assigned again (a fused
    loop leaves the first loop's variable, not the second's, at its last value)."""
    return _status(var, rest) != "read"



class FreshNames:
    """Names ``<prefix><k>`` (kir.NameAllocator's letters, or hfuse's ``cse``) not
    used anywhere in a kernel: ``fresh = FreshNames(ir); fresh("v")``."""

    def __init__(self, ir):
        self.used = set(ir.args) | {a.name for a in ir.allocs} | set(ir.results)
        for s in walk_stmts(ir.body):
            r, w = reads_writes([s])
            self.used |= r | w
        self.k: dict = {}

    def __call__(self, prefix: str) -> str:
        k = self.k.get(prefix, 0)
        while f"{prefix}{k}" in self.used:
            k += 1
        self.k[prefix] = k + 1
        self.used.add(f"{prefix}{k}")
        return f"{prefix}{k}"


__all__ = ["OPAQUE", "names", "reads_writes", "independent", "has_break", "rename", "dead_after", "FreshNames"]
