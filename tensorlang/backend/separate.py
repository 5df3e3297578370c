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
"""

from __future__ import annotations

import islpy as isl

from ..errors import UnsupportedError
from ..ir import And, Cmp, Iverson, Or, walk
from . import kir as K
from .domains import Scope, affine_test, block_set, schedule_dims

MAX_ATOMS = 16  # more atoms than this: not a stencil boundary; no separation
MAX_PIECES = 12  # copies of the body isl may make before we keep one copy


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
    build = isl.AstBuild.from_context(isl.Set(scope.context_text())).set_options(opts)
    node = build.node_from_schedule_map(sched)
    text = node.to_C_str()
    if text.count("S0(") + text.count("S1(") > MAX_PIECES:
        return None
    return node


def separation(scope: Scope, inner: Scope, dims: list, cons: list, body, order=None):
    """``(isl AST over S0/S1, interior constraints)`` for a block whose body
    ``body`` (None: unknown) has undecided affine atoms, else ``(None, None)``."""
    if body is None:
        return None, None
    inside = interior(inner, dims, body)
    node = pieces(scope, dims, cons, inside, order) if inside else None
    return node, (inside if node is not None else None)


__all__ = ["atoms", "interior", "pieces", "separation"]
