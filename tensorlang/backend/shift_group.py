"""One temporary per shift: a consumer's reads of several temporaries at one
constant shift, combined (paper Sections 4.3, 5.4; issue #13 item 2: no
materialized intermediates).

The transpose of a stencil reads each cotangent at the stencil's shifts, so
a gradient that adds several stencils' adjoints reads several temporaries at
the same shift.  The image loss's gradient (masked blur data term plus a
Laplacian prior) after fusion is

    r = gen[i, i'] [M(i+1, i'+1)]·2(b - f)      # the data term's cotangent
    s = gen[i, i'] 0.2·L                         # the prior's
    t = gen[i, i'] s[i, i'] + [M(i+1, i'+1)]·0.125·r[i, i']    # the shared neighbour sum's
    du = gen[k, k'] … [B]·(-s[k-1, k'-1])·4 + [B ∧ M(k, k')]·0.5·r[k-1, k'-1] + (t at 4 shifts)

where ``B`` is ``(k-1, k'-1)`` in the box of ``r`` and ``s``: three
temporaries stored and swept again, ``r`` and ``s`` only for the centre.
Those two reads are one read of

    w = gen[i, i'] (-s[i, i'])·4 + [M(i+1, i'+1)]·0.5·r[i, i']

at the same shift: ``du = gen[k, k'] … + [B]·w[k-1, k'-1]``.  ``r`` and ``s``
are then read at their own point only (by ``t`` and ``w``), so the fusion
rules or contract.py keep them in registers, and the kernel stores two
temporaries instead of three and reads neither the mask nor ``r`` again.

The rewrite, for a consumer ``C = gen[j] body`` and a shift ``a ≠ 0``:

* the *members* are the terms of ``body`` (through ``+``, brackets and
  products by a constant) that are an access ``X_t[j + a]`` of a temporary
  ``X_t`` bound before ``C``, each under its brackets ``P_t(j)``; every ``X_t``
  is a gen over the same extents ``D``;
* ``w = gen[i:D] Σ_t c_t·[P_t(i - a)]·X_t[i]`` (each member's own constants
  and brackets, in its own order; a bracket isl proves true on ``D`` is left
  out), bound right after the last ``X_t``;
* the members leave ``body`` and ``[j + a ∈ D]·w[j + a]`` joins it.

It is exact when every member's brackets imply ``j + a ∈ D`` (isl proves it
on ``C``'s domain, a relation seen as its range facts: a sound
over-approximation), as the program's bounds require anyway: where ``j + a ∈
D`` the new term is the members' sum at the same point, and elsewhere every
member was zero.  It is applied only when it frees at least two temporaries
(each then read at its own point only, every other read of it being a
member), so one temporary replaces two or more: less memory traffic, never
more work (the members' operations move to ``w``'s nest, one addition
each).  Floating-point sums are reassociated (``w``'s terms are added before
the consumer's others), as any fusion of the backend may.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..isl_bridge import isl

from ..ir import (
    Access,
    Add,
    Aff,
    Cmp,
    Const,
    Expr,
    Gen,
    Iverson,
    Mul,
    Sum,
    TRUE,
    Var,
    access,
    accesses,
    children,
    conj,
    conjuncts,
    fresh_index,
    free_vars,
    fresh_var,
    gens,
    make_gens,
    subst,
    sym_aff,
)
from ..typecheck import type_of
from .domains import Scope, box_cons, has_rel
from .own_point import same_extent

MAX_LEAVES = 256  # terms looked at per consumer (a body is walked as a tree)


class _Member:
    """A term ``wrap(X[j + off])`` of a consumer's body at ``path`` (child
    positions from the body's root); ``wrap`` is the list of ``(kind, value,
    side)`` on the way down: ``("const", c, 0|1)`` a product by ``c`` on that
    side, ``("pred", p, 0)`` a bracket."""

    __slots__ = ("path", "wrap", "arr", "off")

    def __init__(self, path, wrap, arr, off):
        self.path, self.wrap, self.arr, self.off = path, wrap, arr, off

    def preds(self):
        return [v for kind, v, _ in self.wrap if kind == "pred"]


def translation(idx, binders):
    """``(a_0, ...)`` when the index is ``binder_k + a_k`` for every k, else None."""
    if len(idx) != len(binders):
        return None
    off = []
    for a, i in zip(idx, binders):
        if len(a.terms) != 1 or a.terms[0][0] is not i or a.terms[0][1] != 1:
            return None
        off.append(a.const)
    return tuple(off)


def _members(e, binders, path, wrap, out) -> bool:
    """Collect the translated accesses of variables among ``e``'s terms into
    ``out``; False once there are more than MAX_LEAVES."""
    if len(out) > MAX_LEAVES:
        return False
    match e:
        case Add(lhs=a, rhs=b):
            return _members(a, binders, path + (0,), wrap, out) and _members(b, binders, path + (1,), wrap, out)
        case Mul(lhs=Const(value=c), rhs=b):
            return _members(b, binders, path + (1,), wrap + [("const", c, 0)], out)
        case Mul(lhs=b, rhs=Const(value=c)):
            return _members(b, binders, path + (0,), wrap + [("const", c, 1)], out)
        case Iverson(pred=p, body=b):
            return _members(b, binders, path + (0,), wrap + [("pred", p, 0)], out)
        case Access():
            base, idx = accesses(e)
            off = translation(idx, binders) if isinstance(base, Var) else None
            if off is not None:
                out.append(_Member(path, wrap, base, off))
    return True


def _wrapped(wrap, inner):
    """``inner`` under ``wrap`` (outermost first), as the body had it."""
    for kind, v, side in reversed(wrap):
        if kind == "pred":
            inner = Iverson(v, inner)
        else:
            inner = Mul(Const(v), inner) if side == 0 else Mul(inner, Const(v))
    return inner


def _without(e, paths: set, path=()):
    """``e`` with the terms at ``paths`` removed (None: nothing is left)."""
    if path in paths:
        return None
    if not any(p[:len(path)] == path for p in paths):
        return e
    match e:
        case Add(lhs=a, rhs=b):
            x, y = _without(a, paths, path + (0,)), _without(b, paths, path + (1,))
            return y if x is None else x if y is None else Add(x, y)
        case Mul(lhs=Const() as c, rhs=b):
            x = _without(b, paths, path + (1,))
            return None if x is None else Mul(c, x)
        case Mul(lhs=b, rhs=Const() as c):
            x = _without(b, paths, path + (0,))
            return None if x is None else Mul(x, c)
        case Iverson(pred=p, body=b):
            x = _without(b, paths, path + (0,))
            return None if x is None else Iverson(p, x)
    raise AssertionError(f"no term at {path}")  # _members only descends through the cases above


def _reads_elsewhere(e, x, own, binders, found: list) -> None:
    """Count into ``found[0]`` the accesses of ``x`` in ``e`` that are not at
    the own point (``x[binders]``, ``own``: the nest ``binders`` is over ``x``'s
    extents; no binder inside); ``found[1]`` is set for any other use.  Only
    the sub-terms ``x`` is free in are visited (a body is a DAG walked as a tree)."""
    if x not in free_vars(e):
        return
    match e:
        case Access():
            base, idx = accesses(e)
            if base is x:
                if not (own and translation(idx, binders) == (0,) * len(binders)):
                    found[0] += 1
                return
        case Var():
            if e is x:
                found[1] = True
            return
        case Gen(body=b) | Sum(body=b):
            _reads_elsewhere(b, x, False, binders, found)
            return
    for c in children(e):
        for y in (c if isinstance(c, tuple) else (c,)):
            if isinstance(y, Expr):
                _reads_elsewhere(y, x, own, binders, found)


def _freed(x, binds, start: int, extents, members: int) -> bool:
    """Every read of ``x`` in ``binds[start:]`` is at its nest's own point
    (over ``x``'s extents), but for the ``members`` reads the rewrite removes."""
    found = [0, False]
    for _, rhs in binds[start:]:
        g, body = gens(rhs)
        own = len(g) == len(extents) and all(same_extent(n, m) for (_, n), m in zip(g, extents))
        _reads_elsewhere(body, x, own, [i for i, _ in g], found)
        if found[1] or found[0] > members:
            return False
    return found[0] == members


def _isl_set(base: Scope, binders, extents, preds, names, shift=None):
    """isl text of ``{S[names] : box(binders) ∧ preds}``; with ``shift``, of
    the points whose translate by ``shift`` is in ``extents``' box."""
    sc = base.child({i: nm for i, nm in zip(binders, names)})
    if shift is None:
        cons = box_cons(names, extents, sc) + [sc.pred(p) for p in preds]
    else:
        cons = [f"0 <= {nm} + {a} < {sc.aff(n)}" for nm, a, n in zip(names, shift, extents)]
    return f"{sc.header()} -> {{ S[{', '.join(names)}] : {' and '.join(sc.cons + cons) or '0 = 0'} }}"


def _covered(base: Scope, binders, cext, members, off, wext) -> bool:
    """Every member's brackets imply ``j + off`` in ``wext``'s box on ``C``'s domain."""
    names = [f"q{k}" for k in range(len(binders))]
    try:
        box = isl.Set(_isl_set(base, binders, wext, (), names, off))
        return all(isl.Set(_isl_set(base, binders, cext, m.preds(), names)).is_subset(box) for m in members)
    except (UnsupportedError, isl.Error):
        return False


class _Box:
    """Which affine brackets hold on the whole of one box (``binders`` over
    ``extents``), each asked once: a gradient's brackets repeat, and parsing
    a disjunction is what costs."""

    def __init__(self, base: Scope, binders, extents):
        self.base, self.binders, self.extents = base, binders, extents
        self.names = [f"q{k}" for k in range(len(binders))]
        self.dom = None
        self.memo: dict = {}

    def implies(self, p) -> bool:
        got = self.memo.get(p)
        if got is None:
            got = self.memo[p] = self._implies(p)
        return got

    def _implies(self, p) -> bool:
        if has_rel(p):
            return False
        try:
            if self.dom is None:
                self.dom = isl.Set(_isl_set(self.base, self.binders, self.extents, (), self.names))
            return self.dom.is_subset(isl.Set(_isl_set(self.base, self.binders, self.extents, (p,), self.names)))
        except (UnsupportedError, isl.Error):
            return False


def _w_term(box: _Box, m: _Member, back: dict):
    """Member ``m`` as a term of ``w`` at ``w``'s point (``box``: ``w``'s box)."""
    wrap = []
    for kind, v, side in m.wrap:
        if kind == "pred":
            kept = [c for c in conjuncts(subst(v, idx=back)) if not box.implies(c)]
            if not kept:
                continue
            v = conj(*kept)
        wrap.append((kind, v, side))
    return _wrapped(wrap, access(m.arr, box.binders))


def _rewrite_one(binds, keep, base: Scope):
    """``(bindings, w)`` after one combination, or None."""
    pos = {x: k for k, (x, _) in enumerate(binds)}
    for c, (cx, crhs) in enumerate(binds):
        g, body = gens(crhs)
        if not g:
            continue
        binders, cext = [i for i, _ in g], [n for _, n in g]
        found: list = []
        if not _members(body, binders, (), [], found):
            continue
        groups: dict = {}
        for m in found:
            k = pos.get(m.arr)
            if k is not None and k < c and m.arr not in keep and any(m.off):
                groups.setdefault(m.off, []).append(m)
        for off, members in groups.items():
            arrs = list(dict.fromkeys(m.arr for m in members))
            wg = gens(binds[pos[arrs[0]]][1])[0]
            wext = [n for _, n in wg]
            if len(arrs) < 2 or len(wext) != len(binders):
                continue
            if not all(len(e := gens(binds[pos[a]][1])[0]) == len(wext)
                       and all(same_extent(n, m) for (_, n), m in zip(e, wext)) for a in arrs):
                continue
            freed = [a for a in arrs
                     if _freed(a, binds, pos[a] + 1, wext, sum(1 for m in members if m.arr is a))]
            if len(freed) < 2:
                continue
            members = [m for m in members if m.arr in freed]
            if not _covered(base, binders, cext, members, off, wext):
                continue
            q = [fresh_index("q") for _ in binders]
            back = {j: sym_aff(i) - a for j, i, a in zip(binders, q, off)}
            wbox = _Box(base, q, wext)
            terms = [_w_term(wbox, m, back) for m in members]
            wbody = terms[0]
            for t in terms[1:]:
                wbody = Add(wbody, t)
            wrhs = make_gens(list(zip(q, wext)), wbody)
            w = fresh_var("sw", type_of(wrhs))
            at = [sym_aff(j) + a for j, a in zip(binders, off)]
            cbox = _Box(base, binders, cext)
            inside = conj(*[p for a, n in zip(at, wext) for p in (Cmp("<=", Aff((), 0), a), Cmp("<", a, n))
                            if not cbox.implies(p)])  # what C's box implies left out
            new = access(w, at) if inside is TRUE else Iverson(inside, access(w, at))
            rest = _without(body, {m.path for m in members})
            cbody = new if rest is None else Add(rest, new)
            out = list(binds)
            out[c] = (cx, make_gens(g, cbody))
            out.insert(max(pos[a] for a in freed) + 1, (w, wrhs))
            return out, w
    return None


def group_shifts(binds, keep, base: Scope):
    """Signature: group_shifts : [(Var, Expr)] -> ([(Var, Expr)], {Var}).

    The bindings (``fusion.py``'s grammar, after fusion) with every group of
    reads of temporaries at one shift that frees two or more of them read
    through one new temporary (module doc); ``keep``: the bindings that must
    stay (outputs), ``base``: the program's size scope; with the new
    temporaries."""
    binds, made = list(binds), set()
    for _ in range(len(binds)):
        got = _rewrite_one(binds, keep, base)
        if got is None:
            break
        binds, w = got
        made.add(w)
    return binds, made


__all__ = ["group_shifts", "translation"]
