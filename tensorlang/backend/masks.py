"""Relation masks as selects: branch-free masked loops (issue #13 item 3).

A bracket whose test reads a relation's data, ``[M(i, j)]·e`` (the image's
observed pixels), is a branch in the loop body, and LLVM does not vectorise
a loop with one.  When ``e`` can be computed at every point (its reads are
proven in bounds there without the test), the kernel computes it and
selects ``e`` or 0 by the mask instead: ``(e if M[i, j] else 0.0)``, which
LLVM turns into a blend.  The value where the test fails is 0 as the
bracket says, even if the unused ``e`` is inf or nan there.  The extra work
(``e`` where the mask is off) is straight-line arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import TensorLangError
from ..ir import Let, Rel, SparseVar, Sum, walk
from . import kir as K
from .loopir import AccAdd, Assign, Store


def unguarded(lw, lower, e):
    """``lower()`` (statements, value) when ``e``, guarded by a relation
    test (a data mask such as the image's ``[M(i, j)]``), may be computed
    at every point instead: its accesses are proven in bounds at every
    size without the test's facts (no call-time check, no positive-size
    assumption), and it lowers to straight-line assignments.
    The caller then selects it or 0 (the bracket's value where the test
    fails, even if the unused value is inf or nan) and the loop has no
    branch: LLVM vectorises it.  Else None, with nothing recorded."""
    if any(isinstance(n, (Rel, SparseVar, Sum, Let)) for n in walk(e)):
        return None
    facts = lw.scope0.facts
    saved = (dict(lw.cse), facts["needs_positive"], list(facts["checks"]))
    try:
        st, code = lower()
    except TensorLangError:
        st = None
    # an access proven only at some sizes (a call-time check) or only for
    # positive sizes is not safe at every point: keep the branch
    if st is None or not all(isinstance(x, (Assign, Store, AccAdd)) for x in st) \
            or facts["needs_positive"] != saved[1] or len(facts["checks"]) != len(saved[2]):
        lw.cse = saved[0]
        facts["needs_positive"], facts["checks"] = saved[1], saved[2]
        return None
    return st, code


def selectable(stmts, kind) -> bool:
    """Straight-line code ending in the block's one write: a gen's Store
    (each element written once, zero where the test fails) or a sum's
    accumulation."""
    last = stmts[-1] if stmts else None
    want = Store if kind == "gen" else AccAdd
    return isinstance(last, want) and all(isinstance(x, Assign) for x in stmts[:-1])


def select(stmts, test) -> list:
    last = stmts[-1]
    return list(stmts[:-1]) + [replace(last, value=K.Select(test, last.value, K.Float(0.0)))]


__all__ = ["select", "selectable", "unguarded"]
