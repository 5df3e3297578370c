"""Horizontal fusion of loop nests (paper Section 4.3; issue #17, heat adjoint).

A program's let-block becomes one loop nest per binding.  Two nests over the
same iteration domain with no dependence between them (a reduction and a gen
reading the same arrays, as the heat step's adjoint ``dκ = Σ dstate·lap(s)``
and ``dstate' = Lᵀ(κ dstate)``) sweep the memory twice; fused, each element
is loaded once per sweep.  This pass merges such nests in a kernel's
statements not nested in a loop:

* two statements *match* when both are loops with equal bounds and step, or
  ifs with equal conditions (isl peels a domain's boundary into the same
  loops and guards for every statement over that domain);
* ``A`` (earlier) and ``B`` (later) fuse when neither writes a name the other
  reads or writes (arrays, locals, loop variables; the loop variables of the
  matched loops excepted), and ``A`` does not depend on or feed the
  statements between them, so ``A`` moves down to ``B``'s place;
* the fused loop runs ``A``'s body then ``B``'s (``B``'s loop variable
  renamed to ``A``'s); inner loops match the same way, in order, with the
  statements before each matched pair kept in front of it.

Fusing makes an inner reduction loop (``acc += e``) share its body with other
statements, which loses codegen's independent lanes; a fusion is kept only
when every such reduction then gets column partial sums (``colsum.py``),
which vectorize.  A serial pass (codegen ``serial_passes``), which the
parallel kernel runs in per-thread chunks where chunks.py can (else it keeps
a ``prange`` per gen nest and chunked reductions).  Built from loop-IR nodes;
the names statements read and write come from rw.py.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .colsum import candidates
from .loopir import AccAdd, Assign, If, KernelIR, Loop, Store
from .rw import FreshNames, dead_after, has_break, independent, names, reads_writes, rename


def _match(a, b) -> bool:
    if isinstance(a, Loop) and isinstance(b, Loop):
        return (a.lo, a.hi, a.step) == (b.lo, b.hi, b.step) and not has_break(a.body) and not has_break(b.body)
    if isinstance(a, If) and isinstance(b, If):
        return a.cond == b.cond
    return False


def _lanes(s) -> bool:
    """codegen prints this loop with independent lanes (``acc += e`` alone)."""
    return isinstance(s, Loop) and s.step == 1 and s.kind in ("sum", "rel") and len(s.body) == 1 \
        and isinstance(s.body[0], AccAdd)


def _fuse_pair(a, b, lost: list):
    """The fused statement of matching, independent ``a`` and ``b``, or None;
    ``lost``: the fused loops whose reduction had lanes before (``_lanes``)."""
    if isinstance(a, If):
        then = _fuse_lists(a.then, b.then, lost)
        orelse = _fuse_lists(a.orelse, b.orelse, lost)
        if then is None or orelse is None:
            return None
        return replace(a, then=then, orelse=orelse)
    if a.var != b.var:
        r, w = reads_writes(b.body)
        if a.var in r | w:
            return None
        body_b = rename(b.body, b.var, a.var)
    else:
        body_b = b.body
    kind = a.kind if a.kind == b.kind else "sum"
    body = _fuse_lists(a.body, body_b, lost)
    if body is None:
        return None
    f = replace(a, body=body, kind=kind, parallel=a.parallel and b.parallel)
    if (_lanes(a) or _lanes(b)) and not _lanes(f):
        lost.append(f)
    return f


def _fuse_lists(xs, ys, lost: list):
    """Two independent statement lists as one: their inner loops (and ifs)
    fused in order where they match one to one, else ``xs`` then ``ys``."""
    lx = [k for k, s in enumerate(xs) if isinstance(s, Loop)]
    ly = [k for k, s in enumerate(ys) if isinstance(s, Loop)]
    if not lx or len(lx) != len(ly) or not all(_match(xs[i], ys[j]) for i, j in zip(lx, ly)):
        return tuple(xs) + tuple(ys)
    for i, j in zip(lx, ly):
        b = ys[j]
        if isinstance(b, Loop) and not dead_after(b.var, ys[j + 1:]):
            return tuple(xs) + tuple(ys)
    out: list = []
    pi = pj = 0
    for i, j in zip(lx, ly):
        out += list(xs[pi:i]) + list(ys[pj:j])
        f = _fuse_pair(xs[i], ys[j], lost)
        if f is None:
            return None
        out.append(f)
        pi, pj = i + 1, j + 1
    return tuple(out + list(xs[pi:]) + list(ys[pj:]))


def _loop_vars(a, b) -> frozenset:
    """The loop variables of a matched pair of loops (one variable once fused);
    every other name written by one nest and touched by the other is a
    dependence (inner loops are renamed pairwise by ``_fuse_lists``, which
    checks its own pairs)."""
    return frozenset({a.var, b.var}) if isinstance(a, Loop) and isinstance(b, Loop) else frozenset()


def _reductions_keep_speed(s, lost: list) -> bool:
    """Every fused loop whose reduction had lanes (``lost``) gets column
    partial sums for all its accumulations in ``s`` (module doc)."""
    tops: list = []

    def top(x):
        if isinstance(x, Loop):
            tops.append(x)
        elif isinstance(x, If):
            for y in x.then + x.orelse:
                top(y)

    top(s)
    covered = set()
    for t in tops:
        for m, accs in candidates(t):
            if set(accs) >= {x.target for x in m.body if isinstance(x, AccAdd)}:
                covered.add(id(m))
    return all(id(m) in covered for m in lost)


def _fusable(a, b) -> bool:
    if not _match(a, b):
        return False
    # the loop variables are private to each nest (allocator names): a shared name is renamed
    return independent([a], [b], _loop_vars(a, b))


def _sink_assigns(body: list) -> list:
    """Scalar assignments moved down, each to just before the first
    statement that reads or writes its target or writes a name it reads
    (``dκ = acc`` after a reduction would keep the reduction from moving down
    to a matching nest)."""
    body = list(body)
    k = len(body) - 1
    while k >= 0:
        s = body[k]
        if isinstance(s, Assign):
            reads = names(s.value, set())
            p = k
            while p + 1 < len(body):
                r, w = reads_writes([body[p + 1]])
                if s.target in r | w or w & reads:
                    break
                p += 1
            if p != k:
                body.insert(p + 1, s)
                del body[k]
        k -= 1
    return body


def fuse_nests(ir: KernelIR) -> KernelIR:
    """Signature: fuse_nests : KernelIR -> KernelIR (module doc)."""
    body = _sink_assigns(ir.body)
    results = set(ir.results) | set(ir.copies)
    changed = False
    j = len(body) - 1
    while j > 0:
        b = body[j]
        done = False
        if isinstance(b, (Loop, If)):
            for i in range(j - 1, -1, -1):
                a = body[i]
                if not _fusable(a, b):
                    continue
                mid = body[i + 1:j]
                if not all(independent([a], [m]) for m in mid):
                    continue
                if isinstance(b, Loop) and isinstance(a, Loop) and a.var != b.var:
                    if not dead_after(b.var, body[j + 1:]) or b.var in results:
                        continue
                lost: list = []
                f = _fuse_pair(a, b, lost)
                if f is None or not _reductions_keep_speed(f, lost):
                    continue
                body[j] = f
                del body[i]
                changed = done = True
                j -= 1  # the fused statement moved to j - 1
                break
        if not done:
            j -= 1
    if not changed:
        return ir  # (sunk assignments kept only with a fusion)
    return replace(ir, body=list(_share(body, FreshNames(ir))))


# -- common sub-expressions of fused bodies ------------------------------------
#
# Two nests fused above may compute one value twice per point: adjoint_reuse.py
# leaves ``Lᵀλ`` in both ``dκ = Σ u·Lᵀλ`` and ``dY = … κ·Lᵀλ`` (one binding
# once, substituted into both consumers).  In a straight-line body, a float
# sub-expression that reads at least one array and occurs in statements p < q
# is computed once into a fresh local before p, when no statement from p up
# to its last use writes a name it reads (p's own write happens after its
# value is computed, but must not change the value q reads).

_ARITH = (K.FSum, K.FMul, K.FNeg, K.FDiv)


def _subtrees(e, out: list) -> list:
    """The arithmetic sub-expressions of ``e`` reading an array, largest first."""
    if isinstance(e, _ARITH):
        if _names_loads(e):
            out.append(e)
        for c in K.children(e):
            _subtrees(c, out)
    return out


def _names_loads(e) -> bool:
    if isinstance(e, K.Load):
        return True
    return isinstance(e, K.KExpr) and any(_names_loads(c) for c in K.children(e))


def _subst(e, old, new):
    return K.map_down(e, lambda x: new if x == old else None)


def _value(s):
    return s.value if isinstance(s, (Assign, AccAdd, Store)) else None


def _share_once(body: list, fresh):
    """``body`` with one common sub-expression shared, or None."""
    for p, sp in enumerate(body):
        if _value(sp) is None:
            continue
        for e in _subtrees(_value(sp), []):
            reads = names(e, set())
            last = None
            for q in range(p, len(body)):
                if q > p and _value(body[q]) is not None and _subtrees(_value(body[q]), []).count(e):
                    last = q
                if reads_writes([body[q]])[1] & reads or _value(body[q]) is None:
                    break
            if last is None:
                continue
            name = fresh("cse")
            out = list(body[:p]) + [Assign(name, e)]
            out += [replace(s, value=_subst(s.value, e, K.Name(name))) for s in body[p:last + 1]]
            return out + list(body[last + 1:])
    return None


def _share(stmts, fresh) -> tuple:
    """Statements with each straight-line body's common sub-expressions shared."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = replace(s, body=_share(s.body, fresh))
        elif isinstance(s, If):
            s = replace(s, then=_share(s.then, fresh), orelse=_share(s.orelse, fresh))
        out.append(s)
    while True:
        got = _share_once(out, fresh)
        if got is None:
            return tuple(out)
        out = got


__all__ = ["fuse_nests"]
