"""Step programs: a loop sweep in one Numba call (issue #17 item 3).

The checkpoint schedule (``loops.schedule``) becomes an int64 table of
instructions over state buffers, run by a loop (``fwd_prog`` / ``rev_prog``)
compiled next to a variant of the body's kernel (or its adjoint's) that
writes the state's leaves into buffers it is given: the state is
double-buffered (a leaf carried over unchanged shares its buffer, reference
counted when the table is compiled) and no step allocates or returns to
Python.  Used by
``loop_kernel.LoopProgram`` (the primal) and ``loop_autodiff`` (the reverse
sweep); the section comment below gives the table's format.
"""

from __future__ import annotations

import functools

import numpy as np

from ..ir import TensorT
from ..loops import Split, row_at
from .loopir import out_buffer_ir

# # A schedule (``loops.schedule``) is compiled once per (policy, T) into an
# int64 table of instructions over physical state buffers.  Each state leaf
# has a pool (one per distinct leaf type, an ``(P, *shape)`` array) and a
# logical state (a checkpoint slot, one of two scratch states, or the
# initial state) is a tuple of physical indices, one per leaf; ``-1 - i``
# names the initial state's leaf ``i`` (the caller's array, only read).
# A row is ``op, t, src_0 … src_{L-1}, dst_0 … dst_{L-1}``: ``FWD``: one
# step of the body from the leaves ``src`` into ``dst``; ``REV``: one
# adjoint step at the state ``src`` (``dst`` unused, -1).  Storing or
# restoring a state emits nothing: the slot takes the current state's
# indices (reference counted at table-compile time, so a buffer is written
# only when no logical state still holds it).  A leaf the body returns
# unchanged from another leaf (the wave equation's ``(u_prev, u) -> (u,
# u_next)``: ``alias``) is not copied either: the new state shares that
# buffer, so each step writes one new leaf and ``"all"`` stores each
# ``u_t`` once, not twice.  The body's kernel writes into the buffer it is
# given (:func:`out_buffer_ir`), so no step allocates.  The table is run by
# ``fwd_prog`` / ``rev_prog``, loops generated next to the body's and the
# adjoint's kernels: no Python per step.

IN = -1
FWD, REV = 0, 2
STEP_VERSION = "s12-steps-5"  # in the step modules' cache keys


def compile_schedule(sch, T: int, groups=(0,), alias=()):
    """``(forward table, reverse table, final, pools)`` of a
    ``loops.Schedule`` (comment above): the tables are ``(m, 2 + 2L)``
    int64 arrays, ``final`` the physical indices of ``s_T``'s leaves,
    ``pools`` the number of buffers of each group.  ``groups``: each
    leaf's pool; ``alias``: ``(j, i)`` pairs, result leaf ``j`` is the
    input's leaf ``i`` as is (same group)."""
    import heapq

    L = len(groups)
    alias = dict(alias)
    refs: dict = {}
    free: dict = {g: [] for g in groups}
    top: dict = {g: 0 for g in groups}

    def hold(m):
        for k, p in enumerate(m):
            if p >= 0:
                refs[groups[k], p] = refs.get((groups[k], p), 0) + 1

    def drop(m):
        for k, p in enumerate(m):
            if p >= 0:
                key = (groups[k], p)
                refs[key] -= 1
                if refs[key] == 0:
                    heapq.heappush(free[groups[k]], p)

    def fresh(g):
        if free[g]:
            return heapq.heappop(free[g])
        top[g] += 1
        return top[g] - 1

    def put(name, m):
        hold(m)  # before the old one goes: the two may share buffers
        old = maps.get(name)
        maps[name] = m
        if old is not None:
            drop(old)

    def leave(name):
        """``cur`` moves off ``name``: a restored slot after its last use is dropped."""
        if name == "r":
            drop(maps.pop("r"))

    # a slot's buffers are free after its last restore (``"r"`` holds them
    # for the step that reads them): a segment's checkpoint is reused once
    # the segment is reversed
    last = {a[1]: i for i, a in enumerate(sch.actions) if a[0] == "restore"}
    maps: dict = {"in": tuple(-1 - k for k in range(L))}
    fwd: list = []
    code, cur, final = fwd, "in", None
    for idx, a in enumerate(sch.actions):
        op = a[0]
        if op == "store":
            if cur != a[1]:
                put(a[1], maps[cur])
        elif op == "restore":
            if cur != a[1]:
                leave(cur)
                cur = a[1]
            if last[a[1]] == idx and a[1] in maps:
                maps["r"] = maps.pop(a[1])  # (its references move with it)
                cur = "r"
        elif op == "advance":
            for t in range(a[1], a[2]):
                dst = "y" if cur == "x" else "x"
                src = maps[cur]
                old = maps.pop(dst, None)
                if old is not None:
                    drop(old)  # first: the step may write into a buffer only dst held
                new = tuple(src[alias[k]] if k in alias else fresh(groups[k]) for k in range(L))
                hold(new)
                maps[dst] = new
                code.append([FWD, t, *src, *new])
                leave(cur)
                cur = dst
        elif op == "final":
            final = maps[cur]
            code = []
            rev = code
        else:
            code.append([REV, a[1], *maps[cur], *([-1] * L)])
    if final is None:
        raise AssertionError("internal: a schedule without its final action")
    tables = tuple(np.array(c, dtype=np.int64).reshape(-1, 2 + 2 * L) for c in (fwd, rev))
    pools = [top[g] for g in sorted(set(groups))]
    return tables[0], tables[1], final, pools


@functools.lru_cache(maxsize=16)
def forward_table(T: int, groups=(0,), alias=()):
    """``(table, final, pools)`` of the primal: ``T`` steps from the initial
    state between scratch states (remembered: building it costs a few
    microseconds per step; callers never write into it)."""
    from ..loops import Schedule

    fwd, _, final, pools = compile_schedule(Schedule([("advance", 0, T), ("final",)], 0, T), T, groups, alias)
    return fwd, final, pools


def leaf_groups(leaves) -> tuple:
    """Each state leaf's pool: leaves of equal type (extents) share one."""
    keys: list = []
    out = []
    for _, t in leaves:
        k = _dims(t)
        if k not in keys:
            keys.append(k)
        out.append(keys.index(k))
    return tuple(out)


def make_pools(groups, s0l, counts, alloc=None) -> list:
    """One ``(count, *shape)`` float64 array per group (``alloc(g, shape)``: a kept one)."""
    first = {g: s0l[k] for k, g in reversed(list(enumerate(groups)))}
    alloc = alloc or (lambda g, shape: np.empty(shape))
    return [alloc(g, (max(1, c),) + first[g].shape) for g, c in enumerate(counts)]


def leaf_value(pools, groups, s0l, k: int, p: int, copy: bool = False):
    """Leaf ``k`` at physical index ``p`` (``-1 - i``: the initial state's leaf ``i``)."""
    x = pools[groups[k]][p] if p >= 0 else s0l[-1 - p]
    return x.copy() if copy or p < 0 else x


def state_leaves(t, path=()):
    """``[(path, TensorT)]``: the state's leaves (a tensor, or nested pairs of
    tensors), or None when one is a scalar (no step program)."""
    from ..ir import PairT

    if isinstance(t, PairT):
        a, b = state_leaves(t.fst, path + (0,)), state_leaves(t.snd, path + (1,))
        return None if a is None or b is None else a + b
    if isinstance(t, TensorT) and _rank(t) > 0:
        return [(path, t)]
    return None


def leaf(v, path):
    for k in path:
        v = v[k]
    return v


def build_value(t, arrays: list, path=()):
    """The (nested) state from its leaves' arrays, in ``state_leaves`` order."""
    from ..ir import PairT

    if isinstance(t, PairT):
        return (build_value(t.fst, arrays), build_value(t.snd, arrays))
    return arrays.pop(0)


def result_leaves(tree, leaves):
    """The result positions of the state's leaves in a kernel's output layout ``tree``, or None."""
    out = []
    for path, _ in leaves:
        node = tree
        for k in path:
            if node[0] != "pair":
                return None
            node = node[1 + k]
        if node[0] != "leaf":
            return None
        out.append(node[1])
    return out


def _dims(t) -> list:
    out = []
    while isinstance(t, TensorT):
        out.append([[[s.name, c] for s, c in t.extent.terms], t.extent.const])
        t = t.elem
    return out


def _call(spec, names: dict, t_size, outs, prefix: str = "z", rows=()):
    """``(parameters, call arguments)`` of a step kernel's call from a step
    program: ``<prefix><k>`` for the arguments passed in (``spec``: the
    kernel's own, without the output buffers), ``names`` replacing input
    leaves by ``(name, path)``, ``t + 1`` for ``t_size``, then the output
    buffers ``outs``; a row input (``rows``) is passed as ``(whole input,
    row at t = 0)`` (``kernel_args``) and its row at ``t`` given to the kernel."""
    nsz = len(spec["sizes"])
    params = [f"{prefix}{k}" for k in range(nsz + len(spec["inputs"]) + len(spec.get("temporaries", [])))]
    args = list(params)
    for k, nm in enumerate(spec["sizes"]):
        if nm == t_size:
            args[k] = "t + 1"  # loops.t_value
    for k, (nm, path, _) in enumerate(spec["inputs"]):
        if (nm, tuple(path)) in names:
            args[nsz + k] = names[(nm, tuple(path))]
        elif nm in rows:
            args[nsz + k] = row_expr(params[nsz + k], rows[nm])
    return params, args + list(outs)


class StepKernel:
    """A compiled part's float64 kernel writing the state's leaves into
    caller-given buffers, in its own cache entry together with the loop that
    runs an instruction table (``fwd_prog`` or ``rev_prog``)."""

    def __init__(self, module, key: str, base: dict, spec2: dict):
        self.module, self.key, self.base = module, key, base  # base: the kernel's own spec (no buffers)
        # the state leaves the kernel writes into buffers, and those it returns as inputs (copied)
        self.pooled, self.copied = spec2["loop_pooled_leaves"], spec2["loop_copied_leaves"]
        # (j, i): result leaf j is the state's leaf i as is (the tables alias it: no copy)
        self.alias = tuple((int(j), int(i)) for j, i in spec2.get("loop_alias_leaves", []))
        self.groups = tuple(spec2.get("loop_groups", ()))  # each state leaf's pool (leaf_groups)
        self.par = hasattr(module, "fwd_prog_par") or hasattr(module, "rev_prog_par")

    def run(self, name: str, threads, *args):
        """Run the step program ``name``: its parallel variant on ``threads``
        (an int > 1, capped at Numba's pool; the kernels' gen loops
        ``prange``, reductions in per-thread chunks: a given thread count
        always gives the same result) when the kernel has one, else serial."""
        if threads is None or threads <= 1 or not self.par:
            return getattr(self.module, name)(*args)
        import numba

        k = max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))
        old = numba.get_num_threads()
        numba.set_num_threads(k)
        try:
            return getattr(self.module, name + "_par")(*args, np.int64(k))
        finally:
            numba.set_num_threads(old)

    @classmethod
    def build(cls, kernel, positions, leaves, make_src, imports: str = "", state=None):
        """``make_src(buffer positions, copied positions, aliased, par)``
        gives the program's source; ``aliased``: ``{j: i}``, the copied
        result leaves that are the state's (named ``state``) leaf ``i`` as
        is, shared by the tables rather than copied; ``par``: the variant
        calling ``kernel_parallel`` (its gen loops ``prange``), defined when
        the kernel has one."""
        import hashlib

        from . import cache as _cache
        from .codegen import has_parallel, source

        var = kernel.variant("float64")
        spec = var.spec
        if (var.key is None or spec["relations"] or spec.get("dense_relations") or spec.get("sparse_values")
                or spec.get("sparse_outputs") or spec.get("relation_orders")):
            return None
        key = hashlib.sha256(f"{var.key}|{STEP_VERSION}|{positions}|{imports}|{state}|{make_src(None, None, None, False)}".encode())
        key = key.hexdigest()[:40]
        got = _cache.load(key)
        if got is not None:
            return None if got[1].get("loop_pooled_leaves") is None else cls(got[0], key, spec, got[1])
        ir, _ = kernel.lowered()
        made = out_buffer_ir(ir, positions)
        spec2 = dict(spec)
        if made is None:  # remembered: this kernel has no step form
            spec2["loop_pooled_leaves"] = None
            _cache.store(key, source(ir, "float64"), spec2)
            return None
        ir2, names, copied = made
        # a copied result is an input returned as is: which state leaf, if any
        nsz = len(spec["sizes"])
        paths = {tuple(p): i for i, (p, _) in enumerate(leaves)}
        aliased = {}
        for j in copied:
            m = ir.args.index(ir.results[positions[j]]) - nsz
            nm, path, _ = spec["inputs"][m] if 0 <= m < len(spec["inputs"]) else (None, (), 0)
            if state is not None and nm == state and tuple(path) in paths:
                aliased[j] = paths[tuple(path)]
        spec2["loop_alias_leaves"] = sorted(aliased.items())
        spec2["loop_groups"] = list(leaf_groups(leaves))
        pooled = [j for j in range(len(positions)) if j not in copied]
        spec2["temporaries"] = list(spec.get("temporaries", [])) + [[nm, _dims(leaves[j][1])] for nm, j in zip(names, pooled)]
        spec2["loop_pooled_leaves"], spec2["loop_copied_leaves"] = pooled, list(copied)
        text = (source(ir2, "float64") + imports + "\n# -- step program (tensorlang.backend.step_programs) --\n"
                "@numba.njit(**_OPTS)\n" + make_src(pooled, copied, aliased, False))
        if has_parallel(ir2):
            text += "\n@numba.njit(**_OPTS)\n" + make_src(pooled, copied, aliased, True)
        return cls(_cache.store(key, text, spec2), key, spec, spec2)


def _usable(part) -> bool:
    return part is not None and part not in ("identity",) and part.var is None and \
        hasattr(part.fn, "variant") and not part.fn.python


def _select(groups, ind: str) -> list:
    """The current state's leaves ``a<k>``: column ``2 + k`` of the table
    row, a buffer of leaf k's pool or (``-1 - i``) the initial state's leaf
    ``i`` of the same group."""
    lines = []
    for k, g in enumerate(groups):
        same = [i for i, h in enumerate(groups) if h == g]
        lines += [f"{ind}p = code[q, {2 + k}]", f"{ind}if p >= 0:", f"{ind}    a{k} = pool{g}[p]"]
        for i in same[:-1]:
            lines += [f"{ind}elif p == {-1 - i}:", f"{ind}    a{k} = s{i}"]
        lines += [f"{ind}else:", f"{ind}    a{k} = s{same[-1]}"]
    return lines


def _dst(groups, k: int) -> str:
    """Leaf ``k``'s output buffer of a FWD row."""
    return f"pool{groups[k]}[code[q, {2 + len(groups) + k}]]"


def _pools(groups) -> str:
    return "".join(f"pool{g}, " for g in sorted(set(groups)))


def forward_program(part, sp: Split):
    """The body's step kernel with ``fwd_prog(code, s…, pool…, z…)`` (the
    table's FWD instructions; one ``s`` per state leaf, one ``pool`` per
    group, ``leaf_groups``), or None where it does not apply (a scalar leaf
    in the state, relations)."""
    leaves = state_leaves(sp.state.type)
    if leaves is None or not _usable(part):
        return None
    spec = part.fn.variant("float64").spec
    pos = result_leaves(spec["outputs"], leaves)
    L = len(leaves)
    if pos is None:
        return None
    groups = leaf_groups(leaves)

    def make_src(pooled, copied, aliased, par):
        names = {(sp.state.name, p): f"a{k}" for k, (p, _) in enumerate(leaves)}
        zs, call = _call(spec, names, t_name(sp), [_dst(groups, k) for k in (pooled or [])] + (["nthreads"] if par else []),
                         rows=row_sources(sp, None))
        lines = [f"def fwd_prog{'_par' if par else ''}(code, {''.join(f's{k}, ' for k in range(L))}"
                 f"{_pools(groups)}{', '.join(zs)}{', nthreads' if par else ''}):",
                 "    for q in range(code.shape[0]):",
                 "        t = code[q, 1]"]
        lines += _select(groups, "        ")
        kern = "kernel_parallel" if par else "kernel_serial"
        lines += [f"        res = {kern}({', '.join(call)})"]
        # a leaf returned from an input other than the state's same leaf is copied (an aliased one is shared)
        lines += [line for k in (copied or []) if k not in (aliased or {}) for line in (
            f"        b = {_dst(groups, k)}", f"        b[...] = res[{pos[k]}]")]
        lines.append("    return 0")
        return "\n".join(lines) + "\n"

    return StepKernel.build(part.fn, pos, leaves, make_src, state=sp.state.name)


def reverse_program(part, fwd: StepKernel, sp: Split, wrt: list, dstate: str, signs=((), {})):
    """The body adjoint's step kernel (the state's cotangent leaves written
    into buffers) with ``rev_prog(code, s…, pool…, dp…, ids, sgs, accs…, zf…,
    za…)`` running FWD and REV instructions (the body's steps through
    ``fwd``'s module), or None.  ``wrt``: the adjoint's inputs in output
    order, the state first; the inputs' cotangents accumulate in the order
    ``t = T-1 … 0`` (``acc + step``; a row input's into row ``t`` of its
    whole input's accumulator), the state's is carried in the cotangent
    pools (comment below).  ``signs``: ``(aliases, sign names)`` of
    ``step_signs.signed_program`` when ``part`` is the signed adjoint."""
    leaves = state_leaves(sp.state.type)
    if fwd is None or leaves is None or not _usable(part):
        return None
    L = len(leaves)
    spec = part.fn.variant("float64").spec
    outs, tree = [], spec["outputs"]  # (E_state, (E_x1, …)): the state's a (nested) pair, the others leaves
    for j in range(len(wrt)):
        node = tree if j == len(wrt) - 1 else tree[1]
        if j == 0:
            pos = result_leaves(node, leaves)
            if pos is None:
                return None
        elif node[0] != "leaf":
            return None
        else:
            outs.append(node[1])
        if j < len(wrt) - 1:
            tree = tree[2]
    accs = [f"acc{j}" for j in range(1, len(wrt))]
    rowset = row_sources(sp, None)
    # a row's accumulator is indexed by its row at t: the offset from the body
    # kernel's argument for the row (zf), which every body kernel reads
    nszf = len(fwd.base["sizes"])
    fparam = {nm: f"f{nszf + k}" for k, (nm, _, _) in enumerate(fwd.base["inputs"])}
    if any(w.name in rowset and w.name not in fparam for w in wrt[1:]):
        return None
    fnames = {(sp.state.name, p): f"a{k}" for k, (p, _) in enumerate(leaves)}
    anames = {**fnames, **{(dstate, p): f"d{k}" for k, (p, _) in enumerate(leaves)}}
    found, sign_names = signs
    anames.update({(nm, ()): f"g{k}" for k, nm in sign_names.items()})
    csign = {j: c for j, _, c in found}  # an aliased leaf's sign over its source's
    fpos = result_leaves(fwd.base["outputs"], leaves)
    groups = leaf_groups(leaves)
    faliased = dict(fwd.alias)

    def acc_row(j):
        nm = wrt[j + 1].name
        if nm not in rowset:
            return ""
        p = fparam[nm]
        return f"[{p}[1] + t]" if rowset[nm][1] == 1 else f"[{p}[1] - t]"

    def make_src(pooled, copied, aliased, par):
        aliased = aliased or {}
        fpar = par and fwd.par
        zf, fcall = _call(fwd.base, fnames, t_name(sp), [_dst(groups, k) for k in fwd.pooled] + (["nthreads"] if fpar else []),
                          prefix="f", rows=rowset)
        za, acall = _call(spec, anames, t_name(sp), [f"dp{groups[k]}[n{k}]" for k in (pooled or [])]
                          + (["nthreads"] if par else []), rows=rowset)
        head = "".join(f"s{k}, " for k in range(L)) + _pools(groups) + "".join(f"dp{g}, " for g in sorted(set(groups)))
        lines = [f"def rev_prog{'_par' if par else ''}(code, {head}ids, sgs, {''.join(a + ', ' for a in accs)}"
                 f"{', '.join(zf + za)}{', nthreads' if par else ''}):"]
        lines += [f"    i{k} = ids[{k}]" for k in range(L)] + [f"    g{k} = sgs[{k}]" for k in range(L)]
        lines += ["    for q in range(code.shape[0]):",
                  "        op = code[q, 0]",
                  "        t = code[q, 1]"]
        lines += _select(groups, "        ")
        lines += [f"        if op == {FWD}:", f"            fres = _body_step{'_par' if fpar else ''}({', '.join(fcall)})"]
        lines += [line for k in fwd.copied if k not in faliased
                  for line in (f"            b = {_dst(groups, k)}", f"            b[...] = fres[{fpos[k]}]")]
        lines += ["        else:"]
        lines += [f"            d{k} = dp{groups[k]}[i{k}]" for k in range(L)]
        # a written leaf's buffer: the first of its group's pool that no
        # current leaf holds (the kernel reads them) nor another written leaf
        fresh = [k for k in range(L) if k not in aliased]
        for x, k in enumerate(fresh):
            held = [f"n{k} == i{m}" for m in range(L) if groups[m] == groups[k]]
            held += [f"n{k} == n{m}" for m in fresh[:x] if groups[m] == groups[k]]
            lines += [f"            n{k} = 0", f"            while {' or '.join(held)}:", f"                n{k} += 1"]
        lines += [f"            res = {'kernel_parallel' if par else 'kernel_serial'}({', '.join(acall)})"]
        # in place for arrays (the caller's private accumulators): acc + step, as added before
        # a row input's cotangent (loops.row_inputs) goes into row t of the whole input's: one row per step
        lines += [f"            {a}{acc_row(j)} += res[{outs[j]}]" for j, a in enumerate(accs)]
        lines += [line for k in (copied or []) if k not in aliased
                  for line in (f"            b = dp{groups[k]}[n{k}]", f"            b[...] = res[{pos[k]}]")]
        # the new leaves: an aliased one is its source's buffer with the sign times its source's
        new = [(f"i{aliased[k]}", f"{float(csign.get(k, 1))} * g{aliased[k]}") if k in aliased else (f"n{k}", "1.0")
               for k in range(L)]
        lines += [f"            {', '.join(f'i{k}' for k in range(L))}, = {', '.join(i for i, _ in new)},",
                  f"            {', '.join(f'g{k}' for k in range(L))}, = {', '.join(g for _, g in new)},"]
        lines += [f"    ids[{k}] = i{k}" for k in range(L)] + [f"    sgs[{k}] = g{k}" for k in range(L)]
        lines.append("    return (" + "".join(a + ", " for a in accs) + ")")
        return "\n".join(lines) + "\n"

    imports = ("\nfrom tensorlang.backend import cache as _loop_cache\n"
               f"_body_entry = _loop_cache.load({fwd.key!r})\n"
               "if _body_entry is None:\n"
               "    raise ImportError('the loop body step kernel is not in the cache')\n"
               "_body_step = _body_entry[0].kernel_serial\n"
               + ("_body_step_par = _body_entry[0].kernel_parallel\n" if fwd.par else ""))
    return StepKernel.build(part.fn, pos, leaves, make_src, imports, state=dstate)


# # The reverse sweep carries the state's cotangent in pools (one per leaf
# group, two buffers per leaf of the group) with, per leaf ``k``, its
# buffer ``i<k>`` and its sign ``g<k>``: the leaf's value is ``g<k> ·
# dp[i<k>]``.  A leaf the adjoint returns as ``±`` another cotangent leaf
# (``step_signs``: the wave's ``a <- -b``) takes that leaf's buffer and the
# product of the signs, with no array write; a written leaf takes a buffer
# no current leaf holds.  Each step reads at most L buffers and writes at
# most L others, so 2 per leaf suffice.


def cotangent_pools(groups, dsl: list):
    """``(pools, ids, signs)``: the reverse sweep's cotangent pools holding
    the leaves ``dsl`` (copied in; each leaf at its rank in its group), the
    leaves' buffers and signs (int64 and float64 arrays, updated by ``rev_prog``)."""
    rank, pools, ids = {}, {}, []
    for k, g in enumerate(groups):
        ids.append(rank.get(g, 0))
        rank[g] = ids[-1] + 1
    for g in sorted(set(groups)):
        first = next(k for k, h in enumerate(groups) if h == g)
        pools[g] = np.empty((2 * rank[g],) + np.shape(dsl[first]))
    for k, g in enumerate(groups):
        pools[g][ids[k]] = dsl[k]
    return [pools[g] for g in sorted(pools)], np.array(ids, dtype=np.int64), np.ones(len(groups))


def cotangent_leaves(groups, pools, ids, signs) -> list:
    """The leaves' values after ``rev_prog``: ``sign · buffer``, each its own array."""
    out, seen = [], set()
    for k, g in enumerate(groups):
        buf = pools[g][ids[k]]
        if signs[k] != 1.0 or (g, ids[k]) in seen:
            buf = buf * signs[k]  # (a new array: -x exactly)
        seen.add((g, ids[k]))
        out.append(buf)
    return out


def kernel_args(spec, values: dict, sizes: dict, t_size, rows=None):
    """The float64 kernel's arguments (``api.Kernel._run``'s order), or None
    where a step program does not apply (float32, sizes a proof needs positive).
    ``rows``: ``row_sources(sp, sizes)``: a row input's argument is
    ``(whole input, its row at t = 0)``, the step program takes its row at ``t``."""
    rows = rows or {}
    if spec.get("needs_positive_sizes") and any(sizes.get(n, 1) < 1 for n in spec["sizes"] if n != t_size):
        return None
    vals = {k: values[rows[k][0] if k in rows else k] for k, _, _ in spec["inputs"]}
    if precision_of(vals) != "float64":
        return None
    args = [np.int64(1 if n == t_size else sizes[n]) for n in spec["sizes"]]  # t_size: set per step
    for name, path, rank in spec["inputs"]:
        v = vals[name]
        for k in path:
            v = v[k]
        if name in rows:
            args.append((np.ascontiguousarray(v, dtype=np.float64), np.int64(rows[name][2])))
        else:
            args.append(np.ascontiguousarray(v, dtype=np.float64) if rank else np.float64(v))
    for name, dims in spec.get("temporaries", []):
        shape = tuple(max(0, const + sum(c * sizes[s] for s, c in terms)) for terms, const in dims)
        args.append(np.empty(shape, dtype=np.float64))
    return args


def row_sources(sp: Split, sizes) -> dict:
    """``{row input's name: (whole input's name, ±1, its row at t = 0)}``
    (``loops.row_inputs``; the row at ``t`` is ``±t + c``; ``sizes=None``:
    the coefficients only, for the programs' source)."""
    t = sp.loop.ivar
    return {row.name: (f.name, idx.coeff(t), None if sizes is None else row_at(idx, t, 0, sizes))
            for row, f, idx in sp.rows}


def row_expr(param: str, src) -> str:
    """A row input's row at ``t`` in a step program: ``param`` is the pair
    ``(whole input, row at t = 0)``."""
    return f"{param}[0][{param}[1] + t]" if src[1] == 1 else f"{param}[0][{param}[1] - t]"


def t_name(sp: Split):
    return None if sp.t_size is None else sp.t_size.name


def _rank(t) -> int:
    r = 0
    while isinstance(t, TensorT):
        r, t = r + 1, t.elem
    return r


def precision_of(vals: dict) -> str:
    """'float32' when every array-like value is float32 (as ``api.precision``)."""
    kinds = []
    stack = list(vals.values())
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        elif not isinstance(v, (bool, int, float)):
            kinds.append(np.asarray(v).dtype)
    return "float32" if kinds and all(k == np.float32 for k in kinds) else "float64"
