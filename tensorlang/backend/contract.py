"""Loop fusion and array contraction on the loop IR (paper Section 4.3; issue #13 item 2).

Tensor SSA and the adjoint name every intermediate, and each becomes one
loop nest writing one array.  When consecutive nests run over the same
points and each reads the others' arrays only at its own iteration's
element, they are one nest (*fusion*), and an array touched only inside it,
always at the current iteration's element, needs only that element: it
becomes a scalar local or a small per-iteration array (*contraction*).
The n-body gradient's n x n intermediates become a handful of scalars and
one 3-vector, so its temporary memory is O(n) instead of O(n²).

Fusing nests A and B (loop variables renamed to one) is legal when every
array that one writes and the other reads or writes is accessed, in both,
with the loop variable at one fixed index position: iteration v of the fused
loop touches only elements at coordinate v, so running A(v); B(v) for each v
reads and writes exactly the values that all of A then all of B did.
Contraction keeps an array's lifetime within one iteration: it needs every
access under the same chain of loops, each loop's variable at a fixed
position (the element of the iteration), and a zero-initialised array is
re-zeroed at the start of each iteration (the original had zeros in every
element an iteration had not written).  Only temporaries are contracted.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .blas import Gemm
from .loopir import AccAdd, Alloc, Assign, Break, If, Loop, Store, map_stmts

FUSABLE = ("gen", "scatter", "rel")
LOOKAHEAD = 8  # statements searched for a loop to fuse with (compile time stays linear)


# -- kernel-IR traversal -------------------------------------------------------------------------


def _rename(stmts, old: str, new: str) -> tuple:
    return map_stmts(stmts, lambda e: K.Name(new) if isinstance(e, K.Name) and e.name == old else None)


def _subst_expr(e, old: str, new: str):
    return K.substitute(e, {old: K.Name(new)})


def _accesses(stmts, out: dict, names: dict, loops=()) -> None:
    """array -> [(index, enclosing loops)]; names: scalar -> 'w'/'r' flags."""

    def expr(e, where):
        if isinstance(e, tuple):
            for x in e:
                expr(x, where)
            return
        if isinstance(e, K.Load):
            out.setdefault(e.array, []).append((e.index, where))
        if isinstance(e, K.Name):
            names.setdefault(e.name, set()).add("r")
        if isinstance(e, K.KExpr):
            for c in K.children(e):
                expr(c, where)

    for s in stmts:
        match s:
            case Loop(var=v, lo=lo, hi=hi, body=b):
                expr((lo, hi), loops)
                names.setdefault(v, set()).add("w")
                _accesses(b, out, names, loops + (s,))
            case If(cond=c, then=t, orelse=o):
                expr(c, loops)
                _accesses(t, out, names, loops)
                _accesses(o, out, names, loops)
            case Assign(target=t, value=v) | AccAdd(target=t, value=v):
                names.setdefault(t, set()).add("w")
                expr(v, loops)
            case Store(array=a, index=ix, value=v):
                out.setdefault(a, []).append((ix, loops))
                out.setdefault(("w", a), [])
                expr(ix, loops)
                expr(v, loops)
            case Alloc(shape=sh):
                expr(sh, loops)
            case Gemm(out=o):
                # whole arrays, at no loop's element: never fused or contracted across
                for a in s.arrays_read() + (o,):
                    out.setdefault(a, []).append(((), loops))
                out.setdefault(("w", o), [])


def _info(stmts):
    acc, names = {}, {}
    _accesses(stmts, acc, names)
    written = {k[1] for k in acc if isinstance(k, tuple)}
    arrays = {k: v for k, v in acc.items() if not isinstance(k, tuple)}
    return arrays, written, names


def _fixed_position(sites, var: str):
    """The one index position holding ``Name(var)`` in every access, or None."""
    pos = None
    for ix, _ in sites:
        hits = [p for p, a in enumerate(ix) if a == K.Name(var)]
        if len(hits) != 1 or (pos is not None and hits[0] != pos):
            return None
        pos = hits[0]
    return pos


# -- fusion --------------------------------------------------------------------------------------


def _fusable(a: Loop, b: Loop) -> bool:
    if a.kind not in FUSABLE or b.kind not in FUSABLE or a.step != b.step:
        return False
    if a.lo != _subst_expr(b.lo, b.var, a.var) or a.hi != _subst_expr(b.hi, b.var, a.var):
        return False
    b_body = _rename(b.body, b.var, a.var)
    ra, wa, na = _info(a.body)
    rb, wb, nb = _info(b_body)
    if any(isinstance(s, Break) for s in a.body + b_body):
        return False
    for arr in (wa & (set(rb) | wb)) | (wb & set(ra)):
        if _fixed_position(ra.get(arr, []) + rb.get(arr, []), a.var) is None:
            return False
    wa_n = {k for k, f in na.items() if "w" in f}
    wb_n = {k for k, f in nb.items() if "w" in f}
    return not (wa_n & set(nb)) and not (wb_n & set(na))


def fuse_loops(stmts) -> list:
    """Adjacent fusable loop nests (allocations between them move before) merged, recursively."""
    out: list = []
    stmts = list(stmts)
    k = 0
    while k < len(stmts):
        s = stmts[k]
        k += 1
        if not isinstance(s, Loop):
            out.append(s)
            continue
        moved = []
        while True:
            j = _partner(s, stmts, k)
            if j is None:
                break
            b = stmts[j]
            moved += [a for a in stmts[k:j] if isinstance(a, Alloc)]
            stmts = stmts[:k] + [a for a in stmts[k:j] if not isinstance(a, Alloc)] + stmts[j + 1:]
            kind = "scatter" if "scatter" in (s.kind, b.kind) else s.kind if s.kind == b.kind else "rel"
            s = replace(s, body=s.body + _rename(b.body, b.var, s.var), kind=kind, parallel=s.parallel and b.parallel)
        out += moved
        out.append(replace(s, body=tuple(fuse_loops(s.body))))
    return out


def _partner(s: Loop, stmts, k: int):
    """Index of the first loop after position k that fuses with ``s`` and
    commutes with every statement between them (allocations aside), or None."""
    between: list = []
    for j in range(k, min(len(stmts), k + LOOKAHEAD)):
        b = stmts[j]
        if isinstance(b, Alloc):
            continue
        if isinstance(b, Loop) and _fusable(s, b) and _commute(between, [b]):
            return j
        between.append(b)
    return None


def _commute(xs, ys) -> bool:
    """Do the statement lists touch disjoint data, apart from reading the same?"""
    if not xs:
        return True
    rx, wx, nx = _info(xs)
    ry, wy, ny = _info(ys)
    if wx & (set(ry) | wy) or wy & set(rx):
        return False
    wnx = {k for k, f in nx.items() if "w" in f}
    wny = {k for k, f in ny.items() if "w" in f}
    return not (wnx & set(ny)) and not (wny & set(nx))


# -- contraction ---------------------------------------------------------------------------------


def contract(body, allocs, keep, fresh):
    """``(body, contracted names)``: temporaries whose every access is at the
    current iteration's element of the loops around them, made local."""
    done = set()
    for a in allocs:
        arrays, _, _ = _info(body)  # afresh: each contraction rebuilds the statements
        if a.role != "temporary" or a.name in keep or a.name not in arrays:
            continue
        sites = arrays[a.name]
        common = sites[0][1]
        for _, loops in sites[1:]:
            n = 0
            while n < min(len(common), len(loops)) and common[n] is loops[n]:
                n += 1
            common = common[:n]
        chain, pos = [], []
        for lp in common:
            p = _fixed_position(sites, lp.var)
            if p is None:
                break
            chain.append(lp)
            pos.append(p)
        if not chain:
            continue
        body = _contract_one(body, a, chain, pos, fresh)
        done.add(a.name)
    return body, done


def _contract_one(body, a: Alloc, chain, pos, fresh):
    rest = [d for p, d in enumerate(a.shape) if p not in pos]
    local = fresh()
    scalar = not rest

    def idx(ix):
        return tuple(x for p, x in enumerate(ix) if p not in pos)

    def fn(e):
        if isinstance(e, K.Load) and e.array == a.name:
            return K.Name(local) if scalar else K.Load(local, idx(e.index), e.unsigned)
        return e

    def sfn(s):
        if isinstance(s, Store) and s.array == a.name:
            return Assign(local, s.value) if scalar else Store(local, idx(s.index), s.value)
        return s

    if scalar:
        init = (Assign(local, K.Float(0.0)),)
    elif a.zero:
        init = _zero_fill(local, rest, fresh)
    else:
        init = ()
    inner, outer = chain[-1], chain[0]

    def walk(stmts, inside_outer=False):
        out = []
        for s in stmts:
            if isinstance(s, Alloc) and s.name == a.name:
                continue  # the full array is never allocated
            if isinstance(s, Loop):
                b = walk(s.body, inside_outer or s is outer)
                if s is inner:
                    b = init + b
                s2 = replace(s, body=b)
                if (s is outer or inside_outer) and not scalar:
                    s2 = replace(s2, parallel=False)  # the local array is shared by the iterations
                if s is outer and not scalar:
                    out.append(Alloc(local, tuple(rest), False, "temporary", a.binding, False))
                out.append(s2)
            elif isinstance(s, If):
                out.append(replace(s, then=walk(s.then, inside_outer), orelse=walk(s.orelse, inside_outer)))
            else:
                out.append(s)
        return tuple(out)

    body = walk(tuple(body))
    return list(map_stmts(body, fn, sfn))


def _zero_fill(name, shape, fresh):
    ixs = [fresh() for _ in shape]
    st = (Store(name, tuple(K.Name(i) for i in ixs), K.Float(0.0)),)
    for i, n in reversed(list(zip(ixs, shape))):
        st = (Loop(i, K.Int(0), n, 1, st, "gen"),)
    return st


def fuse_and_contract(body, allocs, keep, fresh):
    """Signature: [stmt] -> ([stmt], {contracted array names})."""
    return contract(fuse_loops(body), allocs, keep, fresh)


__all__ = ["fuse_loops", "contract", "fuse_and_contract"]
