"""Boundary pieces separated from interiors (paper Section 4.3; issue #13 item 3).

A stencil's adjoint reads shifted cotangents under brackets such as
``[0 ≤ i - 1 < n - 2]``: the bracket is a test in the loop body at every
point although it fails only on a thin boundary.  :func:`interior` picks,
among the affine atoms of a block's body that the block's own constraints
leave undecided, a largest consistent set (greedily, in program order) and
returns them as isl constraints.  The lowering then emits the body twice: in
the scope extended by these constraints, where isl decides every such atom
(the interior copy is branch-free), and in the plain scope, and isl
generates one loop nest over the two disjoint pieces ``D ∧ I`` and
``D ∧ ¬I`` (``to_loops`` with a body per statement), in the original
lexicographic order of points.  A block whose relation conjuncts are tested
per point (the image's mask ``M``) is separated too: the test stays in both
pieces, simplified against each (lower.py; where the masked value is safe to
compute everywhere it becomes a select, so the interior has no branch).

isl's "separate" makes one copy of the boundary body per piece of every
loop (seven copies for the image gradient's nest).  When the pieces make
more than ``ROW_PIECES`` copies and every row of the domain and of the
interior is an interval, :class:`Rows` emits fewer: per row meeting the
interior, one boundary loop each side of the branch-free interior loop, and
one boundary loop per row elsewhere (issue #14 item 6, cold compile latency:
the generated source, which Numba's compile time follows, shrinks with it).
"""

from __future__ import annotations

from ..isl_bridge import isl

from ..errors import UnsupportedError
from ..ir import And, Cmp, Iverson, Or, walk
from . import kir as K
from .astgen import expr_of
from .domains import Scope, affine_test, block_set, schedule_dims
from .loopir import If, Loop

MAX_ATOMS = 16  # more atoms than this: not a stencil boundary; no separation
MAX_PIECES = 12  # copies of the body isl may make before we keep one copy
ROW_PIECES = 3  # more copies than this: the row form instead (one interior, two boundary loops)


def _cmps(p, out: list) -> None:
    match p:
        case Cmp():
            out.append(p)
        case And(lhs=a, rhs=b) | Or(lhs=a, rhs=b):
            _cmps(a, out)
            _cmps(b, out)
        case _:
            pass  # relations and exists (a bound variable) are not interior facts


def atoms(body) -> list:
    """The affine comparison atoms of the brackets in ``body`` (first occurrence order)."""
    out: list = []
    for n in walk(body):
        if isinstance(n, Iverson):
            _cmps(n.pred, out)
    seen, uniq = set(), []
    for a in out:
        if a not in seen:
            seen.add(a)
            uniq.append(a)
    return uniq


def interior(inner: Scope, names: list, body) -> list:
    """isl constraints under which every chosen atom of ``body`` is decided
    (true), or [] when separation buys nothing."""
    found = atoms(body)
    if not found or len(found) > MAX_ATOMS:
        return []
    own = set(names)
    cons: list = []
    for a in found:
        syms = [s for s, _ in a.lhs.terms + a.rhs.terms]
        if not any(inner.symmap.get(s) in own for s in syms) or any(s not in inner.symmap for s in syms):
            continue  # not about this block's points, or about indices bound inside it
        try:
            if isinstance(affine_test(inner.child(cons=cons), a), K.Bool):
                continue  # already decided here (or by the atoms chosen before)
            text = inner.pred(a)
        except (UnsupportedError, isl.Error):
            continue
        if inner.child(cons=cons + [text]).feasible():
            cons.append(text)
    return cons


def pieces(scope: Scope, dims: list, cons: list, inside: list, order=None):
    """isl AST over ``S0`` (``cons ∧ inside``) and ``S1`` (``cons ∧ ¬inside``), or None if too many copies."""
    hdr = scope.header()
    both = " and ".join(scope.cons + cons) or "0 = 0"
    ins = " and ".join(inside)
    s0 = isl.Set(block_set(scope, dims, scope.cons + cons + inside).replace("S[", "S0[", 1))
    s1 = isl.Set(f"{hdr} -> {{ S1[{', '.join(dims)}] : {both} and not ({ins}) }}")
    dom = isl.UnionSet.from_set(s0).union(isl.UnionSet.from_set(s1))
    ident = ", ".join(dims)
    to = ", ".join(schedule_dims(dims, order))
    sched = isl.UnionMap(f"{hdr} -> {{ S0[{ident}] -> [{to}]; S1[{ident}] -> [{to}] }}").intersect_domain(dom)
    # "separate": isl splits each loop's range into pieces with one body each,
    # instead of one loop testing which piece a point is in
    tdims = ", ".join(f"c{k}" for k in range(len(schedule_dims(dims, order))))
    opts = isl.UnionMap(f"{hdr} -> {{ [{tdims}] -> separate[x] }}")
    build = isl.AstBuild.from_context(scope.context()).set_options(opts)
    node = build.node_from_schedule_map(sched)
    return None if _copies(node) > MAX_PIECES else node


def _copies(node) -> int:
    text = node.to_C_str()
    return text.count("S0(") + text.count("S1(")


class Rows:
    """The row form of a separated block (issue #14 item 6, cold compile
    latency): isl's "separate" copies the boundary body once per piece of
    every loop (image gradient: 6 copies of ~30 lines in each kernel).  When
    every row of the domain ``D`` (its innermost dimension, the outer ones
    fixed) and of the interior ``D ∧ I`` is an interval, a row meeting the
    interior (statement ``R0``) is ``[lo, L)`` boundary, ``[L, U]``
    interior, ``(U, hi]`` boundary, and any other row (``R1``) is all
    boundary.  isl separates the *outer* loops into ranges of ``R0`` and
    ``R1`` rows (``outer``), and each row is::

        R0: for d in range(lo, L): S1      R1: for d in range(lo, hi + 1): S1
            for d in range(L, U + 1): S0   # branch-free
            for d in range(U + 1, hi + 1): S1

    points in the same lexicographic order as the pieces (sums add in the
    same order), bounds are isl's expressions of the outer indices,
    simplified in ``R0`` rows against the interior (a box's are constants,
    so column sums and horizontal fusion apply as before)."""

    def __init__(self, outer, r0: tuple, r1: tuple):
        self.outer, self.r0, self.r1 = outer, r0, r1

    def loops(self, dims: list, body: dict, kind: str) -> list:
        from .astgen import to_loops

        d, one = dims[-1], K.Int(1)
        lo, hi, L, U = self.r0
        s0, s1 = tuple(body["S0"]), tuple(body["S1"])
        row0 = [Loop(d, lo, L, 1, s1, kind), Loop(d, L, K.int_add(U, one), 1, s0, kind),
                Loop(d, K.int_add(U, one), K.int_add(hi, one), 1, s1, kind)]
        lo1, hi1 = self.r1
        row1 = [Loop(d, lo1, K.int_add(hi1, one), 1, s1, kind)]
        return to_loops(self.outer, dims[:-1], {"R0": row0, "R1": row1}, kind)


def rows(scope: Scope, dims: list, cons: list, inside: list, copies: int):
    """The :class:`Rows` form of ``D = cons`` and ``D ∧ inside``, or None
    when a row of either may not be an interval or the form has no fewer
    copies of the body than ``copies``."""
    outer, d = dims[:-1], dims[-1]
    hdr = "[" + ", ".join(scope.params + outer) + "]"
    body = " and ".join(scope.cons + cons) or "0 = 0"
    drow = isl.Set(f"{hdr} -> {{ [{d}] : {body} }}").coalesce()
    irow = isl.Set(f"{hdr} -> {{ [{d}] : {body} and {' and '.join(inside)} }}").coalesce()
    for s in (drow, irow):
        # convex in the outer indices and d together: every row is an interval
        if s.is_empty() or not isl.Set.from_basic_set(s.polyhedral_hull()).is_subset(s):
            return None
    bd, bi = isl.AstBuild.from_context(drow.params()), isl.AstBuild.from_context(irow.params())
    r0 = tuple(expr_of(bi.expr_from_pw_aff(pa), {}) for pa in
               (drow.dim_min(0), drow.dim_max(0), irow.dim_min(0), irow.dim_max(0)))
    r1 = tuple(expr_of(bd.expr_from_pw_aff(pa), {}) for pa in (drow.dim_min(0), drow.dim_max(0)))
    # the outer loops: rows meeting the interior (R0), the others (R1)
    shdr, ident = scope.header(), ", ".join(outer)
    full = isl.Set(block_set(scope, dims, scope.cons + cons))
    dproj = full.project_out(isl.dim_type.set, len(dims) - 1, 1)
    iproj = (full & isl.Set(block_set(scope, dims, inside))).project_out(isl.dim_type.set, len(dims) - 1, 1)
    dom = isl.UnionSet.from_set(iproj.set_tuple_name("R0")).union(isl.UnionSet.from_set((dproj - iproj).set_tuple_name("R1")))
    sched = isl.UnionMap(f"{shdr} -> {{ R0[{ident}] -> [{ident}]; R1[{ident}] -> [{ident}] }}").intersect_domain(dom)
    tdims = ", ".join(f"c{k}" for k in range(len(outer)))
    opts = isl.UnionMap(f"{shdr} -> {{ [{tdims}] -> separate[x] }}")
    node = isl.AstBuild.from_context(scope.context()).set_options(opts).node_from_schedule_map(sched)
    text = node.to_C_str()
    if 3 * text.count("R0(") + text.count("R1(") >= copies:
        return None
    return Rows(node, r0, r1)


def separation(scope: Scope, inner: Scope, dims: list, cons: list, body, order=None):
    """``(isl AST over S0/S1 or Rows, interior constraints)`` for a block whose body
    ``body`` (None: unknown) has undecided affine atoms, else ``(None, None)``."""
    if body is None:
        return None, None
    inside = interior(inner, dims, body)
    node = pieces(scope, dims, cons, inside, order) if inside else None
    if node is not None and order is None and len(dims) >= 2 and _copies(node) > ROW_PIECES:
        node = rows(scope, dims, cons, inside, _copies(node)) or node
    return node, (inside if node is not None else None)


__all__ = ["atoms", "interior", "pieces", "rows", "Rows", "separation"]
