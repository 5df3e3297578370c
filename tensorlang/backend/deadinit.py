"""Constant assignments overwritten before they are read (issue #14 item 6).

Lowering and the loop passes leave scalar initialisations that the next
definition of the same local replaces before anything reads it (the n-body
gradient's ``v8 = F(0.0)`` then ``v8 = (0.5 / v1) * ...``; a BLAS branch's
``v1 = F(0.0)`` then ``v1 = F(nan)``).  LLVM drops them, but only after Numba
has typed and lowered every line: on a cold first call each printed line
costs a few milliseconds of compile time.  ``drop_dead_inits`` removes an
``Assign(v, constant)`` when, in the same statement list, a later
unconditional ``Assign`` to ``v`` comes first among the statements that
mention ``v`` (read it, write it, or nest anything that does: rw.py's
analysis) and no ``break`` comes between.  Only constants are dropped: nothing they compute can be
missed.  Built from loop-IR nodes.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import Assign, If, KernelIR, Loop
from .rw import OPAQUE, has_break, names, reads_writes

_CONST = (K.Int, K.Float, K.Bool)


def _dead(stmts, k: int) -> bool:
    """Is ``stmts[k]`` (an ``Assign`` of a constant) overwritten before any read?"""
    v = stmts[k].target
    for s in stmts[k + 1:]:
        if isinstance(s, Assign) and s.target == v:
            return v not in names(s.value, set())
        r, w = reads_writes([s])
        if has_break([s]) or v in r or v in w or OPAQUE in r or OPAQUE in w:
            return False
    return False


def _block(stmts) -> tuple:
    out = []
    for k, s in enumerate(stmts):
        if isinstance(s, Assign) and isinstance(s.value, _CONST) and _dead(stmts, k):
            continue
        if isinstance(s, Loop):
            s = replace(s, body=_block(s.body))
        elif isinstance(s, If):
            s = replace(s, then=_block(s.then), orelse=_block(s.orelse))
        out.append(s)
    return tuple(out)


def drop_dead_inits(ir: KernelIR) -> KernelIR:
    """``ir`` without the constant assignments overwritten before a read (module doc)."""
    body = _block(ir.body)
    return ir if body == tuple(ir.body) else replace(ir, body=list(body))


__all__ = ["drop_dead_inits"]
