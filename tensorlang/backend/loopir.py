"""The backend's loop IR: what isl's AST becomes before it is printed as Python.

Paper Section 4.3: affine predicates become narrowed loop bounds and sums
become accumulations.  The loop IR is deliberately small (loops, ifs,
assignments, array stores, accumulations, allocations) so tests can inspect
what a kernel does (loop nests, bounds, temporaries) without parsing source.
Statements are frozen; their index and value expressions are typed kernel-IR
nodes (``kir.py``), printed to Python only by ``codegen.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .kir import KExpr, map_up


@dataclass(frozen=True)
class Loop:
    """``for var in range(lo, hi, step)``; ``kind`` is 'gen', 'sum', 'rel' or 'exists'.
    ``lanes``: the partial sums codegen prints for a reduction ``for var: acc += e``
    (``codegen._lanes``); 0 takes codegen's ``LANES``."""

    var: str
    lo: KExpr
    hi: KExpr  # exclusive
    step: int
    body: tuple
    kind: str
    parallel: bool = False
    lanes: int = 0


@dataclass(frozen=True)
class If:
    """``if cond: then else: orelse``.  ``cold``: ``orelse`` runs only at sizes
    where its speed cannot matter (the loops behind a BLAS call, taken below
    ``blas.BLAS_MIN_WORK`` multiply-adds or at an extent 0); the printer
    emits them plainly, without partial-sum lanes (codegen.py), which saves
    their share of Numba's compile time (issue #14 item 6).  ``general``: see
    below and size_classes.py (a kernel compiled for one size class takes the
    general side of such a test whose condition is known there)."""

    cond: KExpr
    then: tuple
    orelse: tuple = ()
    cold: bool = False
    # a size-class version choice (size_classes.py): "then" or "orelse" names the side that
    # computes the right value at every size (the other is a faster or cheaper version, right
    # where ``cond`` sends it); "" an ordinary conditional, never decided at compile time
    general: str = ""


@dataclass(frozen=True)
class Assign:
    """``target = value`` (a scalar local: index, accumulator or temporary)."""

    target: str
    value: KExpr


@dataclass(frozen=True)
class AccAdd:
    """``target += value`` (a sum's scalar accumulator)."""

    target: str
    value: KExpr


@dataclass(frozen=True)
class Store:
    """``array[index...] = value`` (a gen writes its own output element)."""

    array: str
    index: tuple  # kir index expressions (the gen block's own loop variables)
    value: KExpr


@dataclass(frozen=True)
class Break:
    pass


@dataclass(frozen=True)
class Alloc:
    """A kernel-allocated array: an output or a let-bound temporary."""

    name: str
    shape: tuple  # kir integer expression of each extent (in sizes)
    zero: bool  # zero-initialised (the domain does not cover the array)
    role: str  # 'output' or 'temporary'
    binding: str  # the let variable it holds (its user name: documentation only)
    pooled: bool = False  # a temporary passed in by the caller, reused across calls


@dataclass
class KernelIR:
    """One compiled program: arguments, allocations, statements, results."""

    args: list  # allocator names in call order
    allocs: list  # [Alloc]
    body: list  # statements (allocations are emitted where they occur)
    results: list  # kir expressions returned, flattened (Name, or Load-free copies)
    functions: dict = field(default_factory=dict)  # allocator name -> registered function name
    copies: set = field(default_factory=set)  # result names returned as copies (input arrays)


def walk_stmts(stmts):
    """All statements, depth first (loops, ifs and their bodies)."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)


def loop_depth(stmts) -> int:
    """Deepest nesting of loops in ``stmts``."""
    best = 0
    for s in stmts:
        if isinstance(s, Loop):
            best = max(best, 1 + loop_depth(s.body))
        elif isinstance(s, If):
            best = max(best, loop_depth(s.then), loop_depth(s.orelse))
    return best


def loops(stmts):
    return [s for s in walk_stmts(stmts) if isinstance(s, Loop)]


def substitute_stmts(stmts, sub: dict) -> tuple:
    """``stmts`` with each statement ``s`` with ``id(s)`` in ``sub`` replaced by
    the statements ``sub[id(s)]`` (a sequence), inside loops and ifs too."""
    out = []
    for s in stmts:
        if id(s) in sub:
            out.extend(sub[id(s)])
        elif isinstance(s, If):
            out.append(replace(s, then=substitute_stmts(s.then, sub), orelse=substitute_stmts(s.orelse, sub)))
        elif isinstance(s, Loop):
            out.append(replace(s, body=substitute_stmts(s.body, sub)))
        else:
            out.append(s)
    return tuple(out)


def map_stmts(stmts, fn, sfn=None) -> tuple:
    """``stmts`` with every expression (bounds, conditions, indices, values, shapes)
    rebuilt by ``kir.map_up(e, fn)``, inside loops and ifs too; ``sfn``, when given,
    maps each Store, Assign and AccAdd after that."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = replace(s, lo=map_up(s.lo, fn), hi=map_up(s.hi, fn), body=map_stmts(s.body, fn, sfn))
        elif isinstance(s, If):
            s = replace(s, cond=map_up(s.cond, fn), then=map_stmts(s.then, fn, sfn), orelse=map_stmts(s.orelse, fn, sfn))
        elif isinstance(s, (Assign, AccAdd)):
            s = replace(s, value=map_up(s.value, fn))
        elif isinstance(s, Store):
            s = replace(s, index=map_up(s.index, fn), value=map_up(s.value, fn))
        elif isinstance(s, Alloc):
            s = replace(s, shape=map_up(s.shape, fn))
        out.append(sfn(s) if sfn is not None and isinstance(s, (Store, Assign, AccAdd)) else s)
    return tuple(out)


def map_outer_loops(stmts, fn) -> tuple:
    """``stmts`` with each outermost loop ``s`` (ifs entered, loops not)
    replaced by the statements ``fn(s)`` (a sequence)."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            out.extend(fn(s))
        elif isinstance(s, If):
            out.append(replace(s, then=map_outer_loops(s.then, fn), orelse=map_outer_loops(s.orelse, fn)))
        else:
            out.append(s)
    return tuple(out)


def rewrite_top(ir, fn, again: bool = False):
    """``ir`` with its top-level statements rewritten at each position ``k`` in
    turn by ``fn(body, k)`` (the new statement list, or None to move on);
    ``again``: after a rewrite, ``fn`` is tried at ``k`` once more (a fused
    loop may take the next one too).  The driver of the top-level loop
    fusions (tilefuse.py, tilechain.py)."""
    body, changed, k = list(ir.body), False, 0
    while k < len(body):
        got = fn(body, k)
        if got is not None:
            body, changed = got, True
            if again:
                continue
        k += 1
    return replace(ir, body=body) if changed else ir


def out_buffer_ir(ir, leaves):
    """``(ir', buffer names, copied)``: ``ir`` with the array results at the
    positions ``leaves`` written into caller-given buffers (pooled
    allocations, arguments after the others); ``copied``: the positions (of
    ``leaves``) whose result is an input, now returned as is for the caller
    to copy into its buffer.  None when a result is neither (a packed
    output), or two positions share one array."""
    top = {s.name: s for s in ir.body if isinstance(s, Alloc)}
    names, copied, uncopy = [], [], set()
    for j, k in enumerate(leaves):
        r = ir.results[k]
        if not isinstance(r, str) or r in names or r in uncopy:
            return None
        if r in ir.copies:
            copied.append(j)
            uncopy.add(r)
        elif r in top and top[r].role == "output" and not top[r].pooled:
            names.append(r)
        else:
            return None
    swap = {nm: replace(top[nm], pooled=True) for nm in names}
    body = [swap.get(s.name, s) if isinstance(s, Alloc) else s for s in ir.body]
    allocs = [swap.get(a.name, a) for a in ir.allocs]
    ir2 = replace(ir, args=list(ir.args) + names, allocs=allocs, body=body, copies=set(ir.copies) - uncopy)
    return ir2, names, copied
