"""The backend's loop IR: what isl's AST becomes before it is printed as Python.

Paper Section 4.3: affine predicates become narrowed loop bounds and sums
become accumulations.  The loop IR is deliberately small (loops, ifs,
assignments, array stores, accumulations, allocations) so tests can inspect
what a kernel does (loop nests, bounds, temporaries) without parsing source.
Index and value expressions are kept as Python source strings: they are
produced once (from isl AST expressions and from the scalar IR) and only
printed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Loop:
    """``for var in range(lo, hi, step)``; ``kind`` is 'gen', 'sum', 'rel' or 'exists'."""

    var: str
    lo: str
    hi: str  # exclusive
    step: int
    body: list
    kind: str
    parallel: bool = False


@dataclass
class If:
    cond: str
    then: list
    orelse: list = field(default_factory=list)


@dataclass
class Assign:
    """``target = value`` (a scalar local: index, accumulator or temporary)."""

    target: str
    value: str


@dataclass
class AccAdd:
    """``target += value`` (a sum's scalar accumulator)."""

    target: str
    value: str


@dataclass
class Store:
    """``array[index...] = value`` (a gen writes its own output element)."""

    array: str
    index: tuple
    value: str


@dataclass
class Break:
    pass


@dataclass
class Alloc:
    """A kernel-allocated array: an output or a let-bound temporary."""

    name: str
    shape: tuple  # Python source of each extent (in sizes)
    zero: bool  # zero-initialised (the domain does not cover the array)
    role: str  # 'output' or 'temporary'
    binding: str  # the let variable it holds
    pooled: bool = False  # a temporary passed in by the caller, reused across calls


@dataclass
class KernelIR:
    """One compiled program: arguments, allocations, statements, results."""

    args: list  # Python names in call order
    allocs: list  # [Alloc]
    body: list  # statements (allocations are emitted where they occur)
    results: list  # Python expressions returned, flattened
    helpers: set = field(default_factory=set)  # helper functions the body uses


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
