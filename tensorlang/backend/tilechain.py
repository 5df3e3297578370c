"""A later tile loop runs inside an earlier one when each of its tiles reads
only what the earlier loop's tiles up to the same one wrote (paper Section
4.3; issue #13, "no materialized n x m intermediates", the deconvolution's
gradient/primal time).

The deconvolution's gradient is three top-level loops over tiles of 1024:
``T`` computes the residual ``r = 2(y - z)`` tile by tile into an n-sized
array (tilefuse.py fused the residual into the convolution's tile loop),
``L`` gathers ``dx[k] = Σ_j r[k - m + 1 + j]·c[j]`` tile by tile of ``k``,
and the ``dc`` reduction reads all of ``r``.  Unfused, ``L`` reads ``r`` back
from memory (32 MB at n = 4e6) after ``T`` wrote it; tile ``u`` of ``L``
reads ``r`` only at ``[1024 u - m + 1, 1024 u + 1024)``, which tiles ``u - 1``
and ``u`` of ``T`` wrote, so it can run right after tile ``u`` of ``T``,
while those values are in L1/L2 (loop fusion with non-negative dependence
distances)::

    for t in range(lo, max(hi_T, hi_L)):
        if t < hi_T: <T's body at t>
        if t < hi_L: <L's body at u = t>

Legality (each checked; otherwise the kernel is left as it is):

* ``T`` and ``L`` are top-level unit-step loops with the same lower bound,
  ``L`` the next top-level loop after ``T``; neither holds a statement the
  access analysis cannot see or a ``break``; their upper bounds read nothing
  either loop writes; neither variable is read after ``L``;
* ``L`` writes no name ``T`` reads or writes, and the only names ``T`` writes
  that ``L`` reads are arrays (never a scalar: ``L`` would see its value at
  the current tile, not the last), at least one (independent nests are
  hfuse.py's); neither loop is a lone ``acc += e``, whose lanes (codegen)
  an ``if`` around it would lose;
* isl, for each such array ``A``, each load of ``A`` in ``L`` and each store
  to ``A`` in ``T``: no iteration ``u`` of ``L`` reads an element that an
  iteration ``t > u`` of ``T`` writes.  So every value ``L`` reads is already
  the one ``T`` leaves (``T`` writes it no more after tile ``u``), and ``T``
  never reads what ``L`` writes.  Each access is taken at its point: the
  loops around it bound their variables, the conditions of the ``if``\\ s
  around it hold, and a scalar assigned an affine value before it in the
  same block stands for that value (``i6 = v8``, ``v8 = max(1024 u, m - i5 -
  1)``); an index that reads any other name is not proven, and a loop bound
  or a condition that does gives no fact (fewer facts: a larger set to
  prove empty);
* or ``L`` is the loop ending the special side of a version choice whose
  test reads only sizes (``if test: [pre…, L] else: G``, ``G`` general,
  size_classes.py: short_slabs.py's gathers over tiles of ``r``); then
  ``pre`` moves before the fused loop and ``G`` after it, each under the
  same test and general side, and ``L``'s part of the fused loop too, so a
  size class where the test fails prints ``T`` and ``G`` alone;
* the statements between ``T`` and ``L`` are allocations or assignments
  independent of ``T`` (they move before the fused loop: ``dx``'s
  allocation), or independent of ``L`` (they stay after it).

Every value is the unfused kernel's: the fused loop runs each of ``T``'s and
``L``'s iterations once, in their own order, with ``L``'s tile ``u`` after
every write to what it reads; no reduction changes order.  A pass of the
serial variant only (codegen ``_variant_passes``): the parallel variant
splits ``T`` and ``L`` into per-thread chunks of tiles (chunks.py), which a
dependence from tile ``u - 1`` to tile ``u`` forbids.  Built from loop-IR
nodes; reads and writes from rw.py, the proof by isl.
"""

from __future__ import annotations

from dataclasses import replace

from ..isl_bridge import isl

from . import kir as K
from .astgen import isl_text
from .loopir import AccAdd, Alloc, Assign, Break, If, KernelIR, Loop, Store, walk_stmts
from .hfuse import _lanes
from .size_classes import _sizes
from .rw import dead_after, has_break, independent, names, reads_writes, rename
from .tilefuse import _PLAIN, _accesses, _params

_NEG = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!="}


# -- accesses at their points ------------------------------------------------------


class _Walk:
    """The accesses of one array in one loop, each with its point's facts.

    ``env`` maps a name to the affine kernel-IR expression it holds there, in
    the free names: loop variables (renamed apart: ``<side><k>``, so that the
    reading and the writing loop's variables are distinct isl dimensions) and
    the kernel's arguments (sizes, which no statement assigns)."""

    def __init__(self, side: str, array: str, want: str, params: set):
        self.side, self.array, self.want, self.params = side, array, want, params
        self.dims: list = []
        self.found: list = []  # (index texts, fact texts)
        self.ok = True

    def _text(self, e, env):
        e = K.substitute(e, env)
        return isl_text(e, set(self.dims) | self.params)

    def _fact(self, cond, env, negate=False):
        """isl text of a condition that holds, or None (no fact)."""
        if isinstance(cond, K.Cmp) and cond.op in _NEG:
            a, b = self._text(cond.lhs, env), self._text(cond.rhs, env)
            if a is None or b is None:
                return None
            op = _NEG[cond.op] if negate else cond.op
            return f"{a} {'=' if op == '==' else op} {b}" if op != "!=" else f"({a} < {b} or {a} > {b})"
        if isinstance(cond, K.BoolOp) and cond.op == "and" and not negate:
            parts = [self._fact(c, env) for c in cond.args]
            return " and ".join(f"({p})" for p in parts if p is not None) or None
        return None

    def _record(self, e, env, facts):
        if self.want != "read":
            return
        for ix in _accesses(e, self.array, []):
            got = [self._text(i, env) for i in ix]
            if None in got:
                self.ok = False
                return
            self.found.append((got, list(facts)))

    def stmts(self, stmts, env: dict, facts: list) -> dict:
        env = dict(env)
        for s in stmts:
            if not self.ok:
                return env
            if isinstance(s, Loop):
                self._record((s.lo, s.hi), env, facts)
                inner = {n for n in reads_writes(s.body)[1]} | {s.var}
                lo, hi = self._text(s.lo, env), self._text(s.hi, env)
                body_env = {k: v for k, v in env.items() if k not in inner}
                alias = f"{self.side}_{len(self.dims)}"
                self.dims.append(alias)
                body_env[s.var] = K.Name(alias)
                more = []
                if lo is not None and hi is not None:
                    more = [f"{lo} <= {alias} < {hi}"]
                    if s.step != 1:  # lo, lo + step, ...: one more dimension counts the steps
                        k = f"{self.side}_{len(self.dims)}"
                        self.dims.append(k)
                        more.append(f"{k} >= 0 and {alias} = {lo} + {s.step} * {k}")
                self.stmts(s.body, body_env, facts + more)
                env = {k: v for k, v in env.items() if k not in inner}
            elif isinstance(s, If):
                self._record(s.cond, env, facts)
                yes, no = self._fact(s.cond, env), self._fact(s.cond, env, negate=True)
                self.stmts(s.then, env, facts + ([yes] if yes else []))
                self.stmts(s.orelse, env, facts + ([no] if no else []))
                assigned = reads_writes(list(s.then) + list(s.orelse))[1]
                env = {k: v for k, v in env.items() if k not in assigned}
            elif isinstance(s, Assign):
                self._record(s.value, env, facts)
                v = K.substitute(s.value, env)
                env.pop(s.target, None)
                if isl_text(v, set(self.dims) | self.params) is not None:
                    env[s.target] = v
            elif isinstance(s, AccAdd):
                self._record(s.value, env, facts)
                env.pop(s.target, None)
            elif isinstance(s, Store):
                self._record((s.index, s.value), env, facts)
                if self.want == "write" and s.array == self.array:
                    got = [self._text(i, env) for i in s.index]
                    if None in got:
                        self.ok = False
                        return env
                    self.found.append((got, list(facts)))
            elif isinstance(s, Alloc):
                self._record(s.shape, env, facts)
            elif not isinstance(s, Break):
                self.ok = False
        return env


def _accesses_of(loop: Loop, array: str, want: str, side: str, params: set):
    """``(the isl dimensions, [(index texts, facts)])``, the loop's own variable
    first, or None when an access is not provable."""
    w = _Walk(side, array, want, params)
    w.stmts([loop], {}, [])
    return (w.dims, w.found) if w.ok else None


def _no_later_write(t_loop: Loop, l_loop: Loop, array: str, params: set) -> bool:
    """isl: no iteration ``u`` of ``l_loop`` reads an element of ``array`` that an
    iteration ``t > u`` of ``t_loop`` writes."""
    reads = _accesses_of(l_loop, array, "read", "rd", params)
    writes = _accesses_of(t_loop, array, "write", "wr", params)
    if reads is None or writes is None:
        return False
    (rdims, rs), (wdims, ws) = reads, writes
    dims = rdims + wdims
    for rix, rf in rs:
        for wix, wf in ws:
            if len(rix) != len(wix):
                return False
            eqs = [f"{a} = {b}" for a, b in zip(rix, wix)]
            cons = rf + wf + eqs + [f"{wdims[0]} > {rdims[0]}"]
            par = _params(cons, set(dims))
            text = f"[{par}] -> {{ [{', '.join(dims)}] : {' and '.join(f'({c})' for c in cons)} }}"
            if not isl.Set(text).is_empty():
                return False
    return True


# -- the pattern -------------------------------------------------------------------


def _fusable(t_loop, l_loop, ir: KernelIR, rest) -> bool:
    for lp in (t_loop, l_loop):
        if not (isinstance(lp, Loop) and lp.step == 1 and not lp.parallel and lp.body) or _lanes(lp):
            return False  # a lone ``acc += e`` loop would lose codegen's lanes inside an ``if``
        if has_break(lp.body) or any(not isinstance(s, _PLAIN) for s in walk_stmts(lp.body)):
            return False
    if t_loop.lo != l_loop.lo or t_loop.var == l_loop.var:
        return False
    rt, wt = reads_writes([t_loop])
    rl, wl = reads_writes([l_loop])
    if wl & (rt | wt):
        return False
    if names((t_loop.lo, t_loop.hi, l_loop.hi), set()) & (wt | wl):
        return False
    arrays = {a.name for a in ir.allocs} | set(ir.args)
    shared = wt & rl
    if shared - arrays:
        return False  # a scalar T leaves for L
    if not shared:
        return False  # nothing to reuse: independent nests are hfuse.py's, which keeps lanes
    # the arguments no statement assigns: the same value at every access
    params = set(ir.args) - {s.target for s in walk_stmts(ir.body) if isinstance(s, (Assign, AccAdd))}
    if names((t_loop.lo, t_loop.hi, l_loop.lo, l_loop.hi), set()) - params:
        return False
    if not all(_no_later_write(t_loop, l_loop, a, params) for a in sorted(shared)):
        return False
    return dead_after(t_loop.var, rest) and dead_after(l_loop.var, rest) \
        and t_loop.var not in ir.results and l_loop.var not in ir.results


def _version(s, sizes: set):
    """``(pre, loop)`` when ``s`` is a version choice ``if test: [pre…, loop] else: …``
    whose test reads only sizes and whose general side is the else side
    (size_classes.py; short_slabs.py's gathers over tiles of ``r``), else None."""
    if not (isinstance(s, If) and s.general == "orelse" and s.then and isinstance(s.then[-1], Loop)):
        return None
    if isinstance(s.cond, K.Bool) or names(s.cond, set()) - sizes:
        return None
    return s.then[:-1], s.then[-1]


def _chained(lp: Loop) -> bool:
    """``lp`` is a fused loop of this pass: ``for t in [lo, max(h…))`` whose every
    statement runs under ``t < h`` (directly, or inside a version's test) for an
    ``h`` of its bound."""
    if not (isinstance(lp.hi, K.MinMax) and lp.hi.fn == "max"):
        return False
    t = K.Name(lp.var)

    def guarded(s):
        if isinstance(s, If) and s.general and not s.orelse and len(s.then) == 1:
            s = s.then[0]
        return isinstance(s, If) and not s.orelse and isinstance(s.cond, K.Cmp) and s.cond.op == "<" \
            and s.cond.lhs == t and s.cond.rhs in lp.hi.args

    return all(guarded(s) for s in lp.body)


def _fuse_at(body: list, k: int, ir: KernelIR):
    """``body`` with the loop ``body[k]`` and a later top-level loop (or the loop
    of a later version choice, ``_version``) fused, or None: the first such
    loop that fuses, the statements between moving before the fused loop or
    after it (module doc)."""
    t_loop = body[k]
    if not isinstance(t_loop, Loop):
        return None
    sizes = set(_sizes(ir))
    for j in range(k + 1, len(body)):
        got = _fuse_with(body, k, j, ir, sizes)
        if got is not None:
            return got
    return None


def _fuse_with(body: list, k: int, j: int, ir: KernelIR, sizes: set):
    t_loop = body[k]
    version = _version(body[j], sizes)
    if version is None and not isinstance(body[j], Loop):
        return None
    pre, l_loop = version if version is not None else ((), body[j])
    if not all(independent([p], [t_loop]) for p in pre):
        return None
    hoisted, stay = [], []
    for i in range(k + 1, j):
        s = body[i]
        if isinstance(s, (Assign, Alloc)) and independent([s], [t_loop]) \
                and all(independent([s], [body[h]]) for h in stay):
            hoisted.append(s)
        elif independent([s], [body[j]]):
            stay.append(i)
        else:
            return None
    if not _fusable(t_loop, l_loop, ir, body[j + 1:]):
        return None
    t = K.Name(t_loop.var)
    l_part = If(K.Cmp("<", t, l_loop.hi), rename(l_loop.body, l_loop.var, t_loop.var))
    before, after = [], []
    if version is not None:
        # the choice's three parts keep its test and general side, so a size class
        # decides all three alike: where the test fails, only the else side is printed
        vs = body[j]
        before = [If(vs.cond, tuple(pre), (), general="orelse")] if pre else []
        l_part = If(vs.cond, (l_part,), (), general="orelse")
        after = [If(vs.cond, (), vs.orelse, general="orelse")] if vs.orelse else []
    if _chained(t_loop):  # a loop this pass made: its parts are guarded already, the bound a max
        t_part, his = t_loop.body, t_loop.hi.args
    else:
        t_part, his = (If(K.Cmp("<", t, t_loop.hi), t_loop.body),), (t_loop.hi,)
    fused = Loop(t_loop.var, t_loop.lo, K.MinMax("max", his + (l_loop.hi,)), 1, t_part + (l_part,), t_loop.kind)
    return body[:k] + hoisted + before + [fused] + after + [body[i] for i in stay] + body[j + 1:]


def chain_tiles(ir: KernelIR) -> KernelIR:
    """Signature: chain_tiles : KernelIR -> KernelIR (module doc)."""
    if sum(isinstance(s, Loop) for s in ir.body) < 2:
        return ir
    body = list(ir.body)
    changed = False
    k = 0
    while k < len(body):
        got = _fuse_at(body, k, ir)
        if got is not None:
            body, changed = got, True
            continue  # the fused loop may take the next one too
        k += 1
    return replace(ir, body=body) if changed else ir


__all__ = ["chain_tiles"]
