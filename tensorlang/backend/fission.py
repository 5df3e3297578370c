"""Vectorizable calls split out of reduction loops (paper Section 4.3; issue #13 item 6).

Fusion (hfuse.py, tensor-SSA fusion) puts an element's computation and its
consumers in one loop: the tanh MLP's row loop computes
``v = tanh(z[b, j] + c[j])`` and at once accumulates ``y[b] += v·w[j]``.
Without fastmath the accumulation is a carried dependence, so LLVM keeps the
whole loop scalar, and ``vmath.tanh`` (vectorizable on its own) runs one
element at a time.  The rewrite here splits such an innermost loop in two::

    for j in range(lo, hi): v = tanh(...); buf[j - lo] = v
    for j in range(lo, hi): v = buf[j - lo]; y[b] += v·w[j]

The first loop has no carried dependence and vectorizes; the second keeps
every accumulation in its original order (the result is bit-identical).

It applies, in the serial kernel, to an innermost step-1 loop whose body is
straight-line (assignments, stores, accumulations; no loop, if or break)
and holds a ``vmath.tanh`` call.  The first loop gets the backward slice of
the calls (the assignments they read, transitively); it is legal when the
slice's scalars are assigned once, before any read, and not read by their
own values (iteration-local), the slice reads nothing the rest of the body
writes, and the rest reads an array the slice stores only at the store's
own index.  The slice's scalars the rest reads go through row buffers
allocated before the top-level loop (the loop bounds must be invariant in
it); a run-time test keeps the original loop for rows longer than
``MAX_ROW`` (the buffers would leave the cache).
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import AccAdd, Alloc, Assign, If, KernelIR, Loop, Store, map_outer_loops, substitute_stmts
from .rw import names, reads_writes
from .scalars import VECTOR_TANH

MAX_ROW = 1 << 14  # float64 buffer entries per split scalar (128 KiB)


def _has_call(e) -> bool:
    if isinstance(e, K.FCall) and e.fn == VECTOR_TANH and not e.numpy:
        return True
    if isinstance(e, (tuple, list)):
        return any(_has_call(x) for x in e)
    if isinstance(e, K.KExpr):
        return any(_has_call(getattr(e, f)) for f in e.__dataclass_fields__)
    return False


def _dead_inits(body) -> tuple:
    """``body`` without constant assignments ``v = c`` overwritten before any read
    (the lowering's ``v = F(0.0)`` ahead of ``v = e``)."""
    out = []
    for k, s in enumerate(body):
        if isinstance(s, Assign) and isinstance(s.value, K.Float):
            for x in body[k + 1:]:
                if s.target in reads_writes([x], updates=False)[0] or (isinstance(x, AccAdd) and x.target == s.target):
                    break
                if isinstance(x, Assign) and x.target == s.target:
                    s = None
                    break
            if s is None:
                continue
        out.append(s)
    return tuple(out)


def _split(m: Loop):
    """``(slice, rest, scalars)`` for the innermost loop ``m`` (module doc), or None."""
    if m.step != 1 or m.parallel or not m.body:
        return None
    if not all(isinstance(s, (Assign, AccAdd, Store)) for s in m.body):
        return None
    m = replace(m, body=_dead_inits(m.body))
    calls = [k for k, s in enumerate(m.body) if _has_call(s.value)]
    if not calls or any(isinstance(m.body[k], AccAdd) for k in calls):
        return None
    # backward slice of the calls through scalar assignments
    need, sl = set(), set(calls)
    for k in calls:
        names(m.body[k].value, need)
        if isinstance(m.body[k], Store):
            names(m.body[k].index, need)
    for k in range(max(calls), -1, -1):
        s = m.body[k]
        if k not in sl and isinstance(s, Assign) and s.target in need:
            sl.add(k)
            names(s.value, need)
    first = [m.body[k] for k in sorted(sl)]
    rest = [s for k, s in enumerate(m.body) if k not in sl]
    if not rest:
        return None  # nothing to split from: the loop is already call-only
    # the slice's scalars: assigned once, not read by their own values or before
    targets = [s.target for s in first if isinstance(s, Assign)]
    if len(set(targets)) != len(targets):
        return None
    for k in sorted(sl):
        s = m.body[k]
        if isinstance(s, Assign):
            if s.target in names(s.value, set()):
                return None
            if any(s.target in reads_writes([x], updates=False)[0] or (isinstance(x, (Assign, AccAdd)) and x.target == s.target)
                   for x in m.body[:k]):
                return None
    if any(isinstance(s, (Assign, AccAdd)) and s.target in targets for s in rest):
        return None
    # the slice reads nothing the rest writes (scalars, accumulators, arrays)
    rest_writes = {s.target for s in rest if isinstance(s, (Assign, AccAdd))} | {s.array for s in rest if isinstance(s, Store)}
    if reads_writes(first, updates=False)[0] & rest_writes or m.var in rest_writes:
        return None
    # arrays the slice stores: read by the rest only at the store's index, and stored once
    stored = {}
    for s in first:
        if isinstance(s, Store):
            if s.array in stored:
                return None
            stored[s.array] = s.index
            if m.var not in names(s.index, set()):
                return None  # an element shared by every iteration: not iteration-private
    for arr, ix in stored.items():
        if not _reads_at(rest, arr, ix):
            return None
    used = reads_writes(rest, updates=False)[0]
    return first, rest, [t for t in targets if t in used]


def _reads_at(stmts, arr: str, ix: tuple) -> bool:
    """Every read of ``arr`` in ``stmts`` is ``arr[ix]`` (and no store to it)."""
    ok = [True]

    def go(e):
        if isinstance(e, K.Load) and e.array == arr and tuple(e.index) != tuple(ix):
            ok[0] = False
        if isinstance(e, (tuple, list)):
            for x in e:
                go(x)
        elif isinstance(e, K.KExpr):
            for f in e.__dataclass_fields__:
                go(getattr(e, f))

    for s in stmts:
        if isinstance(s, Store):
            if s.array == arr:
                return False
            go(s.index)
        go(s.value)
    return ok[0]


def _innermost(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            if any(isinstance(x, (Loop, If)) for x in s.body):
                yield from _innermost(s.body)
            else:
                yield s
        elif isinstance(s, If):
            yield from _innermost(s.then)
            yield from _innermost(s.orelse)


def split_calls(ir: KernelIR) -> KernelIR:
    """Signature: split_calls : KernelIR -> KernelIR (module doc); top-level
    loops are rewritten, every other statement kept."""
    used = {s.name for s in ir.allocs} | set(ir.args) | reads_writes(ir.body, updates=False)[1]
    count, changed = [0], [False]

    def fresh(base: str) -> str:
        while True:
            count[0] += 1
            nm = f"{base}_r{count[0]}"
            if nm not in used:
                used.add(nm)
                return nm

    def rewrite(top: Loop):
        written = reads_writes(top.body, updates=False)[1] | {top.var}
        pre, sub, tests = [], {}, []
        for m in _innermost([top]):
            if m is top or names((m.lo, m.hi), set()) & written:
                continue  # buffers are allocated before ``top``: its own loop, or bounds varying in it, keep
            got = _split(m)
            if got is None:
                continue
            first, rest, scalars = got
            ext = K.IBin("-", m.hi, m.lo)
            at = (K.IBin("-", K.Name(m.var), m.lo),)
            bufs = {t: fresh(t) for t in scalars}
            pre += [Alloc(b, (ext,), False, "temporary", t) for t, b in bufs.items()]
            a = tuple(first) + tuple(Store(b, at, K.Name(t)) for t, b in bufs.items())
            b_ = tuple(Assign(t, K.Load(b, at)) for t, b in bufs.items()) + tuple(rest)
            sub[id(m)] = (replace(m, body=a), replace(m, body=b_))
            tests.append(K.Cmp("<=", ext, K.Int(MAX_ROW)))
        if not sub:
            return (top,)
        changed[0] = True
        split = substitute_stmts([top], sub)[0]
        cond = tests[0] if len(tests) == 1 else K.BoolOp("and", tuple(tests))
        return (If(cond, tuple(pre) + (split,), (top,), general="orelse"),)  # top: right at every size (size_classes.py)

    body = map_outer_loops(ir.body, rewrite)
    return replace(ir, body=list(body)) if changed[0] else ir


__all__ = ["split_calls", "MAX_ROW"]
