"""Program preparation and fusion for the backend (paper Sections 4.3, 5.4).

Input: a let-block ``let X1 = R1 in ... in OUT`` whose right-hand sides are
``gen[i0:n0] ... gen[ik:nk] s`` with ``s`` a scalar expression (constants,
``+``, ``*``, black-box calls, sums, Iverson brackets, accesses of variables
or projection chains of inputs), or aliases (a variable or projection chain).
Tensor SSA (Fig. 10) is a special case.

Fusion: tensor SSA names every gather, broadcast and product as a tensor;
materialising them would cost memory the user never asked for (an n x m
buffer for an n-output convolution).  A binding ``X = gen[g] s`` is
substituted into its consumers (``X[a] -> s[g := a]``) when that cannot add
work to the cost model's count (Fig. 6):

* ``s`` does no arithmetic (a gather, broadcast or constant: cost 0), or
* ``X`` has exactly one use, and isl proves the use's index map injective
  on the consumer's iteration domain (every element of ``X`` is computed at
  most once after substitution, as before).

A scaled copy ``X = gen[g] c·Y[g]`` (``c`` a scalar variable or constant,
``Y[g]`` an access) used only in one consumer ``gen[g'] … + t_1 + … + t_k``,
with ``g'`` the same extents as ``g`` and each ``X[a]`` a factor of one term
``t_j`` of the consumer's top-level sum, is substituted with ``c`` factored
out: ``… + c·(t_1' + … + t_k')`` (``t_j'`` with ``Y[a]`` for ``X[a]``).  One
multiplication per consumer point replaces one per producer point: no added
work, and no temporary (the heat adjoint's ``κ·dstate``, read at 5 points).

A cheap 1-D binding read only at constant shifts of its consumers'
innermost index (``X[j - 1]``, ``X[j]``, ``X[j + 1]``: a stencil of
temporaries, as the reverse step of an explicit scheme has) is substituted
too (``shifted.py``): the lowering's interior loop then evaluates ``s`` at
``j + c`` for each shift ``c``, and the loop-IR pass ``roll.py`` computes it
once per iteration, keeping the last values in rolling scalars, so the
kernel does the producer's work once per point, without its array.

A cheap pointwise binding that calls no function, read by up to three
consumers each at its own point (the index its nest's binders, over the
binding's box: ``value_and_grad``'s residuals, read by the value and the
gradient), is substituted into all of them (``own_point.py``): a few
operations per point again instead of a stored temporary.

After these rules, a consumer's reads of several temporaries at one
constant shift (the centre reads of two stencils' adjoints) become one read
of a temporary combining them, when that leaves two or more of them read at
their own point only (``shift_group.py``); the rules then run again.

Dead bindings are dropped.
"""

from __future__ import annotations

import weakref

from ..errors import UnsupportedError, describe
from ..ir import (
    Access,
    Add,
    Call,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    Proj,
    RealT,
    Sum,
    TensorT,
    Var,
    accesses,
    fresh_var,
    free_vars,
    gens,
    lets,
    subst,
)
from ..typecheck import type_of
from .domains import Scope, box_cons, injective
from .own_point import same_extent, own_point_uses
from .shift_group import group_shifts
from .shifted import shifted_uses


def is_alias(rhs: Expr) -> bool:
    while isinstance(rhs, Proj):
        rhs = rhs.arg
    return isinstance(rhs, Var)


_SCALAR_OK: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # this module's memo (issue #14 item 4)


def scalar_ok(e: Expr) -> bool:
    """Signature: scalar_ok : Expr -> bool (the backend's scalar grammar)."""
    ok = _SCALAR_OK.get(e)
    if ok is None:
        match e:
            case Const():
                ok = True
            case Var() | Proj():
                ok = is_alias(e) and isinstance(type_of(e), RealT)
            case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
                ok = scalar_ok(a) and scalar_ok(b)
            case Call(args=args):
                ok = all(scalar_ok(a) for a in args)
            case Sum(body=b) | Iverson(body=b):
                ok = isinstance(type_of(e), RealT) and scalar_ok(b)
            case Access():
                base, _ = accesses(e)
                ok = is_alias(base) and isinstance(type_of(e), RealT)
            case Let(var=v, value=e0, body=e1) if isinstance(v.type, TensorT):
                # a tensor let under a loop: gens of a scalar, a local array
                g, b = gens(e0)
                ok = bool(g) and isinstance(type_of(b), RealT) and scalar_ok(b) and scalar_ok(e1)
            case Let(var=v, value=e0, body=e1):
                ok = isinstance(v.type, RealT) and scalar_ok(e0) and scalar_ok(e1)
            case Gen() | Pair():
                ok = False
            case _:
                raise UnsupportedError(f"not a value expression: {e!r}")
        _SCALAR_OK[e] = ok
    return ok


def rhs_ok(rhs: Expr) -> bool:
    if is_alias(rhs):
        return True
    _, body = gens(rhs)
    return isinstance(type_of(body), RealT) and scalar_ok(body)


def split_program(expr: Expr):
    """``expr`` -> (bindings, output) with every output leaf a variable or alias.

    Raises UnsupportedError naming the first right-hand side outside the
    backend's grammar.
    """
    binds, out = lets(expr)
    binds = list(binds)

    def name_out(e):
        if isinstance(e, Pair):
            return Pair(name_out(e.fst), name_out(e.snd))
        if isinstance(e, Var):
            return e
        v = fresh_var("out", type_of(e))
        binds.append((v, e))
        return v

    out = name_out(out)
    for _, rhs in binds:
        if not rhs_ok(rhs):
            raise UnsupportedError(
                f"the backend cannot lower {describe(rhs)}: expected gen[...] of a scalar expression "
                "(constants, +, *, functions, sums, brackets, accesses)"
            )
    return binds, out


def out_vars(out) -> list:
    if isinstance(out, Pair):
        return out_vars(out.fst) + out_vars(out.snd)
    return [out]


def resolve_aliases(binds, out):
    """Substitute alias bindings (``X = Y``, ``X = π0 x``) into their uses."""
    res = []
    amap = {}
    for v, rhs in binds:
        rhs = subst(rhs, vals=amap) if amap else rhs
        if is_alias(rhs):
            amap[v] = rhs
        else:
            res.append((v, rhs))
    out = subst(out, vals=amap) if amap else out
    return res, out


# -- fusion --------------------------------------------------------------------


def zero_cost(e: Expr) -> bool:
    """No arithmetic: only constants, accesses, variables and brackets (Fig. 6 cost 0)."""
    match e:
        case Const() | Var() | Proj() | Access():
            return True
        case Iverson(body=b):
            return zero_cost(b)
        case Gen(body=b):
            return zero_cost(b)
        case _:
            return False


class _Uses:
    def __init__(self):
        # (index tuple, binder list, predicate list); each predicate is kept
        # with the number of binders enclosing it, so that a binder shadowed
        # below it does not capture its index (``_site_scope``)
        self.sites = []
        self.other = False  # a use that is not a full access
        self.nodes = []  # the access node of each site


def _collect(e: Expr, x: Var, rank: int, binders: list, preds: list, acc: _Uses) -> None:
    """Every occurrence of ``x`` in the tree ``e`` (occurrences, not DAG nodes)."""
    if x not in free_vars(e):
        return
    match e:
        case Var():
            acc.other = True
        case Access():
            base, idx = accesses(e)
            if base is x and len(idx) == rank:
                acc.sites.append((idx, list(binders), list(preds)))
                acc.nodes.append(e)
            else:
                acc.other = True
        case Gen(var=i, extent=n, body=b) | Sum(var=i, extent=n, body=b):
            _collect(b, x, rank, binders + [(i, n)], preds, acc)
        case Iverson(pred=p, body=b):
            _collect(b, x, rank, binders, preds + [(p, len(binders))], acc)
        case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
            _collect(a, x, rank, binders, preds, acc)
            _collect(b, x, rank, binders, preds, acc)
        case Call(args=args):
            for a in args:
                _collect(a, x, rank, binders, preds, acc)
        case Proj(arg=a):
            _collect(a, x, rank, binders, preds, acc)
        case Let(value=e0, body=e1):
            _collect(e0, x, rank, binders, preds, acc)
            _collect(e1, x, rank, binders, preds, acc)
        case _:
            acc.other = True


def _replace(e: Expr, x: Var, g: list, body: Expr, memo: dict) -> Expr:
    """``e`` with each full access ``x[a...]`` replaced by ``body[g := a]``."""
    if x not in free_vars(e):
        return e
    got = memo.get(e)
    if got is not None:
        return got
    match e:
        case Access():
            base, idx = accesses(e)
            if base is not x or len(idx) != len(g):
                raise UnsupportedError(f"cannot fuse a partial use {describe(e)}")
            out = subst(body, idx={i: a for i, a in zip(g, idx)})
        case Var():
            out = body if not g else None
            if out is None:
                raise UnsupportedError(f"cannot fuse the tensor use {describe(e)}")
        case Gen(var=i, extent=n, body=b):
            out = Gen(i, n, _replace(b, x, g, body, memo))
        case Sum(var=i, extent=n, body=b):
            out = Sum(i, n, _replace(b, x, g, body, memo))
        case Iverson(pred=p, body=b):
            out = Iverson(p, _replace(b, x, g, body, memo))
        case Add(lhs=a, rhs=b):
            out = Add(_replace(a, x, g, body, memo), _replace(b, x, g, body, memo))
        case Mul(lhs=a, rhs=b):
            out = Mul(_replace(a, x, g, body, memo), _replace(b, x, g, body, memo))
        case Call(fn=f, args=args):
            out = Call(f, tuple(_replace(a, x, g, body, memo) for a in args))
        case Let(var=v, value=e0, body=e1):
            out = Let(v, _replace(e0, x, g, body, memo), _replace(e1, x, g, body, memo))
        case _:
            raise UnsupportedError(f"cannot fuse into {describe(e)}")
    memo[e] = out
    return out


def _site_scope(site, base: Scope):
    """The isl scope of a use site: one symbol per enclosing binder, the
    binders' boxes and the brackets around the use.  An index bound twice
    (a shadowing binder) names the innermost binder in the access, but a
    bracket between the two binders still speaks of the outer one."""
    _, binders, preds = site
    names = [f"f{k}" for k in range(len(binders))]

    def scope_at(depth):
        return base.child({i: nm for (i, _), nm in zip(binders[:depth], names)})

    sc = scope_at(len(binders))
    cons = box_cons(names, [n for _, n in binders], sc) + [scope_at(d).pred(p) for p, d in preds]
    return sc, names, cons


def _injective_site(site, base: Scope) -> bool:
    try:
        sc, names, cons = _site_scope(site, base)
        return injective(sc, names, cons, [sc.aff(a) for a in site[0]])
    except UnsupportedError:
        return False


def _in_bounds_site(site, extents, base: Scope) -> bool:
    """Fusing an out-of-range use would hide the error the lowering must report."""
    try:
        sc, names, cons = _site_scope(site, base)
        inner = sc.child(params=names, cons=cons)
        return all(inner.holds(f"0 <= {inner.aff(a)} < {inner.aff(n)}") for a, n in zip(site[0], extents))
    except UnsupportedError:
        return False


def _same(xs, ys) -> bool:
    return len(xs) == len(ys) and all(a is b for a, b in zip(xs, ys))


def _one_use(acc: _Uses) -> bool:
    """One use, or several occurrences of one access node in one context
    (``t[i] + t[i]``): substitution yields one shared node, which the
    lowering computes once per point (common sub-expressions of a scope)."""
    first = acc.nodes[0]
    _, b0, p0 = acc.sites[0]
    return all(
        n is first and _same([v for v, _ in b], [v for v, _ in b0])
        and _same([q for q, _ in p], [q for q, _ in p0]) and [d for _, d in p] == [d for _, d in p0]
        for n, (_, b, p) in zip(acc.nodes, acc.sites)
    )


def _terms(e: Expr) -> list:
    if isinstance(e, Add):
        return _terms(e.lhs) + _terms(e.rhs)
    return [e]


def _scale_of(body: Expr):
    """``(c, Y[g])`` of a scaled copy's body ``c·Y[g]`` or ``Y[g]·c``, else None."""
    if not isinstance(body, Mul):
        return None
    for c, y in ((body.lhs, body.rhs), (body.rhs, body.lhs)):
        if isinstance(y, Access) and zero_cost(y) and (isinstance(c, Const) or (
                isinstance(c, Var) and isinstance(c.type, RealT))):
            return c, y
    return None


def _strip(t: Expr, x: Var, g: list, y: Expr):
    """The term ``t`` with its one factor ``x[a]`` read as ``y[g := a]``, or
    None when ``x`` is not a factor of ``t`` exactly once."""
    match t:
        case Access():
            base, idx = accesses(t)
            if base is x and len(idx) == len(g):
                return subst(y, idx={i: a for i, a in zip(g, idx)})
            return None
        case Mul(lhs=a, rhs=b):
            ina, inb = x in free_vars(a), x in free_vars(b)
            if ina and not inb:
                s = _strip(a, x, g, y)
                return None if s is None else Mul(s, b)
            if inb and not ina:
                s = _strip(b, x, g, y)
                return None if s is None else Mul(a, s)
            return None
        case Iverson(pred=p, body=b):
            s = _strip(b, x, g, y)
            return None if s is None else Iverson(p, s)
    return None


def _factored(x: Var, rhs: Expr, binds: list, k: int):
    """``binds`` with the scaled copy ``x = rhs`` (bindings[k]) substituted into
    its one consumer, its scale factored out (module doc), or None."""
    g, body = gens(rhs)
    got = _scale_of(body) if g else None
    if got is None:
        return None
    c, y = got
    users = [j for j in range(k + 1, len(binds)) if x in free_vars(binds[j][1])]
    if len(users) != 1:
        return None
    j = users[0]
    v, crhs = binds[j]
    cg, cbody = gens(crhs)
    if len(cg) != len(g) or not all(same_extent(a, b) for (_, a), (_, b) in zip(cg, g)):
        return None  # one multiplication per consumer point must not exceed one per producer point
    mine, rest = [], []
    for t in _terms(cbody):
        (mine if x in free_vars(t) else rest).append(t)
    stripped = [_strip(t, x, [i for i, _ in g], y) for t in mine]
    if not stripped or any(s is None for s in stripped):
        return None
    inner = stripped[0]
    for s in stripped[1:]:
        inner = Add(inner, s)
    out = Mul(c, inner)
    for t in reversed(rest):
        out = Add(t, out)
    for i, n in reversed(cg):
        out = Gen(i, n, out)
    return binds[:j] + [(v, out)] + binds[j + 1:]


def fuse(binds, outs, base: Scope, reuse: bool = True, shifts: bool = True, groups: bool = True):
    """Signature: fuse : [(Var, Expr)] -> [(Var, Expr)] (see module doc);
    ``reuse=False``: without ``adjoint_reuse`` (tests compare the two);
    ``shifts=False``: without the shifted-stencil rule (``shifted_uses``);
    ``groups=False``: without shift_group.py's combined reads."""
    binds = list(binds)
    keep = set(outs)
    # the shifted rule after the others: a consumer gen that the others then
    # substitute into a sum (``sum[j] G[j]``) is the sum it is (shifted.py)
    for stage in ((False, True) if shifts else (False,)):
        binds = _fuse_stage(binds, keep, base, stage)
    binds = _reuse(binds, base) if reuse else binds
    if not groups:
        return binds
    grouped, made = group_shifts(binds, keep, base)
    # the temporaries a group freed are read at their own point only now: the rules
    # again, keeping each combined temporary (its one use would otherwise take it back)
    return _fuse_stage(grouped, keep | made, base, shifts) if made else binds


def _fuse_stage(binds, keep, base: Scope, shifts: bool):
    changed = True
    while changed:
        changed = False
        for k, (x, rhs) in enumerate(binds):
            if x in keep:
                continue
            g, body = gens(rhs)
            acc = _Uses()
            consumers = 0
            for _, later in binds[k + 1:]:
                before = len(acc.sites)
                _collect(later, x, len(g), [], [], acc)
                consumers += len(acc.sites) > before
            if not acc.sites and not acc.other:
                del binds[k]  # dead
                changed = True
                break
            if acc.other or not all(_in_bounds_site(s, [n for _, n in g], base) for s in acc.sites):
                continue
            ok = (zero_cost(body) or (bool(g) and _one_use(acc) and _injective_site(acc.sites[0], base))
                  or (shifts and shifted_uses(g, body, acc, x, [r for _, r in binds[k + 1:]]))
                  or (shifts and own_point_uses(g, body, acc, consumers)))
            if not ok:
                scaled = _factored(x, rhs, binds, k)
                if scaled is not None:
                    binds = scaled  # x is dead now: dropped on the next pass
                    changed = True
                    break
                continue
            gv = [i for i, _ in g]
            memo: dict = {}
            binds = binds[:k] + [(y, _replace(r, x, gv, body, memo)) for y, r in binds[k + 1:]]
            changed = True
            break
    return binds


def _reuse(binds, base: Scope):
    """``adjoint_reuse``: ``<λ, L u>`` as ``<Lᵀλ, u>``, its ``w = Lᵀλ``
    substituted into both consumers (read at their own point only): the
    serial kernel's fused nest computes it once (``hfuse.py``), and no
    temporary is kept."""
    from .adjoint_reuse import reuse_transpose

    binds, made = reuse_transpose(binds, base)
    for w in made:
        k = next(k for k, (x, _) in enumerate(binds) if x is w)
        g, body = gens(binds[k][1])
        memo: dict = {}
        binds = binds[:k] + [(y, _replace(r, w, [i for i, _ in g], body, memo)) for y, r in binds[k + 1:]]
    return binds


__all__ = ["split_program", "resolve_aliases", "fuse", "out_vars", "rhs_ok", "zero_cost"]

