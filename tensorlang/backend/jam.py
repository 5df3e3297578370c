"""Unroll-and-jam of accumulated slabs by two (paper Section 4.3, sums become
accumulations; issue #13: the deconvolution's primal against this machine's
limit).

interchange.py's accumulation ``for r: for h in slab: D[h] = D[h] + e(r, h)``
loads and stores the slab once per point of ``r``: two loads and a store per
multiply-add, which the store port bounds.  Jammed by ``JAM`` = 2::

    q = r_lo + (max(0, r_hi - r_lo) // 2) * 2
    for r in range(r_lo, q, 2):
        r1 = r + 1
        for h in slab: D[h] = D[h] + e(r, h) + e(r1, h)
    if q < r_hi: r = q; for h in slab: D[h] = D[h] + e(r, h)   # the nest's body, once

each ``D[h]`` is loaded and stored once per two points.  The sum is printed
left to right (``((D[h] + e(r, h)) + e(r1, h))``, codegen's ``FSum``), which
is exactly what the two iterations computed one after the other: the results
are bit for bit the nest's, at every size (tests/backend/test_jam.py).

Applies to the nests short_slabs.py matches (its ``slab_nest``: one unit-step
loop ``H`` in a unit-step loop ``R``, one store ``D[p…, h] = D[p…, h] + t₁ +
…``, no term reading ``D``), outside its gathers.  When ``H``'s bounds read
``r`` (the adjoint's full convolution, whose slab moves with the tap at the
array's ends) the pair's two slabs ``A`` (for ``r``) and ``B`` (for ``r + 1``)
are swept in five parts (``_jammed_moving``): A's points below their common
part, B's below it, the common part with both points' terms, A's above it,
B's above it.  Every element lies in one part, which adds its terms in tap
order.  When the slab's ends move by at most one element per tap (``_step``)
each edge part holds at most one point and is printed as a test, not a loop
(session 18: about 0.09 s less cold compile of the deconvolution gradient).
Session 14 measured jamming by 4 with moving edges at 0.7-1.7 s more cold
compile of the deconvolution gradient (docs/backend.md,
"Unroll-and-jam"); by 2 it is 0.1-0.2 s.  Measured (session 17, one
thread, same process, alternated): docs/backend.md, "Unroll-and-jam by two".
Built from loop-IR nodes; the names statements read and write come from rw.py.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import Assign, If, KernelIR, Loop, walk_stmts
from .rw import FreshNames, names, rename
from .short_slabs import slab_nest

JAM = 2  # points of r per sweep of the slab (module doc)


def _pairs(r, fresh, sweep) -> tuple:
    """``q = r_lo + whole pairs``, the loop over pairs ``(r, r1)`` whose body is ``sweep(r1)``,
    then the nest as it was from ``q``."""
    q, r1 = fresh("v"), fresh("i")
    whole = K.IBin("*", K.IBin("//", K.MinMax("max", (K.Int(0), K.IBin("-", r.hi, r.lo))), K.Int(JAM)), K.Int(JAM))
    body = (Assign(r1, K.IBin("+", K.Name(r.var), K.Int(1))),) + sweep(r1)
    # the nest as it was from q runs at most once (JAM = 2): a test, not a loop to compile
    last = If(K.Cmp("<", K.Name(q), r.hi), (Assign(r.var, K.Name(q)),) + tuple(r.body))
    return (Assign(q, K.IBin("+", r.lo, whole)), replace(r, hi=K.Name(q), step=JAM, body=body), last)


def _jammed(r, fresh) -> tuple:
    """A fixed slab: one sweep adds both points' terms."""
    h, st, terms = slab_nest(r, offset=True)
    load = K.Load(st.array, st.index, True)

    def sweep(r1):
        both = K.FSum((load,) + tuple(terms) + tuple(rename(t, r.var, r1) for t in terms))
        return (replace(h, body=(replace(st, value=both),)),)
    return _pairs(r, fresh, sweep)


def _jammed_moving(r, fresh) -> tuple:
    """A slab whose bounds read the tap: ``A = [a_lo, a_hi)`` for ``r``, ``B`` for
    ``r1`` (an empty one as ``[lo, lo)``), ``C = [max(a_lo, b_lo), min(a_hi, b_hi))``
    their common part.  Five sweeps partition ``A ∪ B``: A's points below C, B's
    below C, C with both points' terms, A's above C, B's above C.  Each element is
    in one of them, which adds its terms in tap order: bit for bit the nest's."""
    h, st, terms = slab_nest(r, moving=True, offset=True)
    load = K.Load(st.array, st.index, True)
    mx = lambda a, b: K.MinMax("max", (a, b))  # noqa: E731
    mn = lambda a, b: K.MinMax("min", (a, b))  # noqa: E731
    al, ah, bl, bh, cl, ch = (fresh("v") for _ in range(6))
    A, B = (K.Name(al), K.Name(ah)), (K.Name(bl), K.Name(bh))
    c_lo, c_hi = K.Name(cl), K.Name(ch)
    steps = [_step(e, r.var) for e in (h.lo, h.hi)]
    single = None not in steps and max(steps) <= 1  # each edge part: at most one point

    def sweep(r1):
        later = tuple(rename(t, r.var, r1) for t in terms)
        only_a = replace(st, value=K.FSum((load,) + tuple(terms)))
        only_b = replace(st, value=K.FSum((load,) + later))
        both = replace(st, value=K.FSum((load,) + tuple(terms) + later))
        bounds = (Assign(al, h.lo), Assign(ah, mx(A[0], h.hi)),
                  Assign(bl, rename(h.lo, r.var, r1)), Assign(bh, mx(B[0], rename(h.hi, r.var, r1))),
                  Assign(cl, mx(A[0], B[0])), Assign(ch, mn(A[1], B[1])))
        edges = ((A[0], mn(A[1], c_lo), only_a), (B[0], mn(B[1], c_lo), only_b),
                 (mx(c_hi, A[0]), A[1], only_a), (mx(c_hi, B[0]), B[1], only_b))
        # an edge part of a slab whose ends move by at most one per tap holds at most one point:
        # a test, not a loop that LLVM would vectorize (and Numba type and lower) for nothing
        part = _point if single else (lambda lo, hi, s: replace(h, lo=lo, hi=hi, body=(s,)))
        return bounds + tuple(part(lo, hi, s) for lo, hi, s in edges[:2]) + (replace(h, lo=c_lo, hi=c_hi, body=(both,)),) \
            + tuple(part(lo, hi, s) for lo, hi, s in edges[2:])

    def _point(lo, hi, s):
        return If(K.Cmp("<", lo, hi), (Assign(h.var, lo), s))

    return _pairs(r, fresh, sweep)


def _step(e, var: str):
    """A bound on ``|e(var + 1) - e(var)|`` for an integer expression ``e``, or None.
    A sub-expression that does not read ``var`` is the same at both taps (the pair's
    bounds are computed one after the other, nothing assigned between them)."""
    if var not in names(e, set()):
        return 0
    match e:
        case K.Name():
            return 1
        case K.IBin(op="+" | "-", lhs=a, rhs=b):
            la, lb = _step(a, var), _step(b, var)
            return None if la is None or lb is None else la + lb
        case K.IBin(op="*", lhs=K.Int(value=k), rhs=a) | K.IBin(op="*", lhs=a, rhs=K.Int(value=k)):
            la = _step(a, var)
            return None if la is None else abs(k) * la
        case K.MinMax(args=args):  # a max (min) of functions that move by at most L moves by at most L
            steps = [_step(a, var) for a in args]
            return None if None in steps else max(steps)
    return None


def _walk(stmts, fresh) -> tuple:
    out = []
    for s in stmts:
        if slab_nest(s, offset=True) is not None:
            out.extend(_jammed(s, fresh))
        elif slab_nest(s, moving=True, offset=True) is not None:
            out.extend(_jammed_moving(s, fresh))
        elif isinstance(s, Loop):
            out.append(replace(s, body=_walk(s.body, fresh)))
        elif isinstance(s, If) and s.cold:  # loops that run only where their speed cannot matter
            out.append(replace(s, then=_walk(s.then, fresh)))
        elif isinstance(s, If):
            out.append(replace(s, then=_walk(s.then, fresh), orelse=_walk(s.orelse, fresh)))
        else:
            out.append(s)
    return tuple(out)


def jam_slabs(ir: KernelIR) -> KernelIR:
    """Signature: jam_slabs : KernelIR -> KernelIR (module doc)."""
    if not any(slab_nest(s, moving=True, offset=True) is not None for s in walk_stmts(ir.body)):
        return ir
    return replace(ir, body=list(_walk(ir.body, FreshNames(ir))))


__all__ = ["JAM", "jam_slabs"]
