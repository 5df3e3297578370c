"""Signed cotangent leaves: a reverse step's negated copy becomes a sign
(issue #17 item 3, issues #13/#17's gradient/primal goal on the wave
equation; session 12).  No new paper rule: the body's adjoint is the
paper's Dᵀ (Section 6.3, Figures 15-16, where the transpose of a negation is
a negation); this module only changes where that negation is applied.

The wave equation's transposed step ``(a, b) -> (-b, a + 2b + c² L b)``
writes ``-b`` as a whole array every reverse step, which the next step only
reads.  Here the body adjoint's program (typed IR, before it is compiled) is
searched for state-cotangent leaves that are ``±`` another cotangent leaf
element by element over the leaf's whole extent (``gen[k:n] gen[l:n]
-dout[k, l]`` with ``dout = π1 loop_dstate``, or the leaf itself).  Such a
leaf is returned as that input leaf as is (a copy the step program shares,
``step_programs.reverse_program``, no array write) and its sign is carried
by the program: every read of a leaf that may carry a sign reads
``sign · leaf`` with the sign a scalar argument of the kernel (1 or -1, set
per step).  Only ``±1``: ``-x`` and ``(-1)·x`` are the same float, and a
product or sum with a factor ``±1`` rounds as the unsigned one does, so the
gradients are those of the unsigned program (tests/loops/test_step_signs.py).
"""

from __future__ import annotations

from ..ir import (Const, Let, Mul, Pair, PairT, Proj, REAL, TensorT, Var, access, accesses, fresh_index, fresh_var,
                  gens, input_vars, lets, make_gens)
from ..ir.indices import sym_aff
from ..ir.scope import subst

# False: the adjoint as derived (every leaf written), for A/B timing only
ENABLED = True


def _extents(t) -> list:
    out = []
    while isinstance(t, TensorT):
        out.append(t.extent)
        t = t.elem
    return out


def _path_of(e, env: dict, ds: Var):
    """The leaf path of ``π…(ds)`` that ``e`` names (through let-bound names), or None."""
    path = []
    while True:
        if isinstance(e, Var):
            if e is ds:
                return tuple(reversed(path))
            if e not in env:
                return None
            e = env[e]
        elif isinstance(e, Proj):
            path.append(e.index)
            e = e.arg
        else:
            return None


def _resolve(e, env: dict):
    while isinstance(e, Var) and e in env:
        e = env[e]
    return e


def copy_of(e, env: dict, ds: Var, leaf_type):
    """``(path, sign)`` when ``e`` (of type ``leaf_type``) is ``sign ·`` the
    cotangent leaf ``π_path(ds)`` at every element (sign ±1), else None."""
    p = _path_of(e, env, ds)
    if p is not None:
        return p, 1
    e = _resolve(e, env)
    binds, body = gens(e)
    ext = _extents(leaf_type)
    if len(binds) != len(ext) or any(n is not m for (_, n), m in zip(binds, ext)):
        return None  # not the whole leaf: the rest of the array would be another value
    sign = 1
    if isinstance(body, Mul):
        if isinstance(body.lhs, Const) and body.lhs.value == -1:
            body, sign = body.rhs, -1
        elif isinstance(body.rhs, Const) and body.rhs.value == -1:
            body, sign = body.lhs, -1
        else:
            return None
    base, idx = accesses(body)
    if len(idx) != len(binds) or any(a is not sym_aff(v) for a, (v, _) in zip(idx, binds)):
        return None
    p = _path_of(base, env, ds)
    return None if p is None else (p, sign)


def _leaf_expr(e, path, env):
    """The sub-expression of the (nested pair) ``e`` at ``path``, literal pairs only."""
    for k in path:
        e = _resolve(e, env)
        if not isinstance(e, Pair):
            return None
        e = e.snd if k else e.fst
    return e


def _replace(e, path, new):
    if not path:
        return new
    if path[0] == 0:
        return Pair(_replace(e.fst, path[1:], new), e.snd)
    return Pair(e.fst, _replace(e.snd, path[1:], new))


def _proj(v, path):
    for k in path:
        v = Proj(k, v)
    return v


def _signed_value(t, path, ds, signs):
    """``ds`` rebuilt from its leaves, a signed leaf as ``gen … sign · leaf[…]``."""
    if isinstance(t, PairT):
        return Pair(_signed_value(t.fst, path + (0,), ds, signs), _signed_value(t.snd, path + (1,), ds, signs))
    leaf = _proj(ds, path)
    if path not in signs:
        return leaf
    binds = [(fresh_index("k"), n) for n in _extents(t)]
    return make_gens(binds, Mul(signs[path], access(leaf, [sym_aff(v) for v, _ in binds])))


def signed_program(prog, ds: Var, leaves, nwrt: int, avoid=()):
    """``(prog', aliases, sign names)`` or None: ``prog`` (a body adjoint,
    result ``E_state`` or ``(E_state, (E_x1, …))`` with ``nwrt`` parts) with
    each state-cotangent leaf ``j`` that is ``±`` leaf ``i`` returned as
    leaf ``i`` itself; ``aliases``: ``[(j, i, sign)]``; ``sign names``:
    ``{k: name}``, the scalar input by which each read of leaf ``k`` is
    multiplied (the leaves some ``j`` names).  ``leaves``: the state's
    ``[(path, TensorT)]`` (``step_programs.state_leaves``); ``avoid``:
    names the sign inputs must not take (the loop program's)."""
    binds, res = lets(prog)
    env = {v: e for v, e in binds}
    state = res if nwrt == 1 else _resolve(res, env)
    if nwrt > 1:
        if not isinstance(state, Pair):
            return None
        state = state.fst
    paths = {p: i for i, (p, _) in enumerate(leaves)}
    found = []
    for j, (p, t) in enumerate(leaves):
        e = _leaf_expr(state, p, env)
        got = None if e is None else copy_of(e, env, ds, t)
        if got is None or got[0] not in paths:
            continue
        i = paths[got[0]]
        if leaves[i][1] is not t:  # a shared buffer: the same shape
            continue
        found.append((j, i, got[1]))
    if not found:
        return None
    taken = {v.name for v in input_vars(prog)} | set(avoid)
    names = {}
    for j, _, _ in found:
        nm = f"loop_dsign{j}"
        while nm in taken:
            nm = "_" + nm
        taken.add(nm)
        names[j] = nm
    signs = {leaves[j][0]: Var(names[j], 0, REAL) for j in names}
    # every read of ds goes through the signed leaves; the aliased results read ds itself
    sds = fresh_var("loop_dsigned", ds.type)
    body = subst(prog, {ds: sds})
    sb, sres = lets(body)
    if nwrt == 1:
        new_state = sres
    else:
        new_state = _resolve(sres, dict(sb)).fst
    for j, i, _ in found:
        new_state = _replace(_literal_pairs(new_state, leaves[j][0], dict(sb)), leaves[j][0], _proj(ds, leaves[i][0]))
    if nwrt == 1:
        out = new_state
    else:
        top = _resolve(sres, dict(sb))
        out = Pair(new_state, top.snd)
    rebuilt = out
    for v, e in reversed(sb):
        rebuilt = Let(v, e, rebuilt)
    return Let(sds, _signed_value(ds.type, (), ds, signs), rebuilt), found, names


def _literal_pairs(e, path, env):
    """``e`` with the pairs along ``path`` made literal (let-bound names resolved)."""
    if not path:
        return e
    e = _resolve(e, env)
    if path[0] == 0:
        return Pair(_literal_pairs(e.fst, path[1:], env), e.snd)
    return Pair(e.fst, _literal_pairs(e.snd, path[1:], env))
