"""Each access of an array in a loop nest, at its point (paper Section 4.3:
the iteration domains of the lowering; issue #13, the loop passes that
move iterations: tilechain.py's tiles in a chain, chunks.py's per-thread
chunks).

A pass that reorders iterations asks isl whether two accesses can touch the
same element.  Each access's index is taken in the loop variables around
it, with the facts that hold there: the bounds of the loops around it
(each loop variable one isl dimension, a stepped loop's steps one more),
the conditions of the ``if``\\ s around it, and a scalar assigned an affine
value earlier in the same block standing for that value (jam.py's and
separate.py's ``i6 = v8``, ``v8 = max(1024 u, m - i5 - 1)``).  An index
that reads any other name is not taken (the walk fails: the pass proves
nothing); a bound or a condition that does gives no fact, and so a larger
set to prove empty.  Built from loop-IR nodes; texts for isl by astgen.py.
"""

from __future__ import annotations

from functools import lru_cache

from ..isl_bridge import isl

from . import kir as K
from .astgen import isl_text
from .loopir import AccAdd, Alloc, Assign, Break, If, Loop, Store, walk_stmts
from .rw import reads_writes
from .tilefuse import _accesses, _words

_NEG = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!="}


class _Walk:
    """The accesses of one array in one loop, each with its point's facts.

    ``env`` maps a name to the affine kernel-IR expression it holds there, in
    the free names: loop variables (renamed apart: ``<side><k>``, so that the
    reading and the writing loop's variables are distinct isl dimensions) and
    ``params``, names whose value is the same at every access (the kernel's
    size arguments, or what the loop reads and never assigns)."""

    def __init__(self, side: str, array: str, want: str, params: set, precise: bool):
        self.side, self.array, self.want, self.params = side, array, want, params
        self.precise = precise
        self.dims: list = []
        self.found: list = []  # (index texts, fact texts)
        self.where: list = []  # each found access's point: the dimensions around it, outermost first
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

    def _record(self, e, env, facts, at):
        if self.want == "write":
            return
        for ix in _accesses(e, self.array, []):
            got = [self._text(i, env) for i in ix]
            if None in got:
                self.ok = False
                return
            self.found.append((got, list(facts)))
            self.where.append(at)

    def _dim(self, at: tuple) -> str:
        """The dimension of position ``len(at)`` of a point: named by its place in the
        nest, not by the loop (sibling loops share it; no access has both around
        it), so one loop nest's facts have one text wherever the walk meets it
        (the facts' isl sets are parsed once: ``_facts``)."""
        d = f"{self.side}_{len(at)}"
        if d not in self.dims:
            self.dims.append(d)
        return d

    def stmts(self, stmts, env: dict, facts: list, at: tuple = ()) -> dict:
        env = dict(env)
        for s in stmts:
            if not self.ok:
                return env
            if isinstance(s, Loop):
                self._record((s.lo, s.hi), env, facts, at)
                inner = set(reads_writes(s.body)[1]) | {s.var}
                lo, hi = self._text(s.lo, env), self._text(s.hi, env)
                body_env = {k: v for k, v in env.items() if k not in inner}
                alias = self._dim(at)
                body_env[s.var] = K.Name(alias)
                inside = at + (alias,)
                more = []
                if lo is not None and hi is not None:
                    more = [f"{lo} <= {alias} < {hi}"]
                    if s.step != 1:  # lo, lo + step, ...: one more dimension counts the steps
                        k = self._dim(inside)
                        inside += (k,)
                        more.append(f"{k} >= 0 and {alias} = {lo} + {s.step} * {k}")
                self.stmts(s.body, body_env, facts + more, inside)
                env = {k: v for k, v in env.items() if k not in inner}
            elif isinstance(s, If):
                self._record(s.cond, env, facts, at)
                yes = self._fact(s.cond, env) if self.precise else None
                no = self._fact(s.cond, env, negate=True) if self.precise else None
                self.stmts(s.then, env, facts + ([yes] if yes else []), at)
                self.stmts(s.orelse, env, facts + ([no] if no else []), at)
                assigned = reads_writes(list(s.then) + list(s.orelse))[1]
                env = {k: v for k, v in env.items() if k not in assigned}
            elif isinstance(s, Assign):
                self._record(s.value, env, facts, at)
                v = K.substitute(s.value, env)
                env.pop(s.target, None)
                if self.precise and isl_text(v, set(self.dims) | self.params) is not None:
                    env[s.target] = v
            elif isinstance(s, AccAdd):
                self._record(s.value, env, facts, at)
                env.pop(s.target, None)
            elif isinstance(s, Store):
                self._record((s.index, s.value), env, facts, at)
                if self.want != "read" and s.array == self.array:
                    got = [self._text(i, env) for i in s.index]
                    if None in got:
                        self.ok = False
                        return env
                    self.found.append((got, list(facts)))
                    self.where.append(at)
            elif isinstance(s, Alloc):
                self._record(s.shape, env, facts, at)
            elif not isinstance(s, Break):
                self.ok = False
        return env


def accesses_of(loop: Loop, array: str, want: str, side: str, params: set, precise: bool = True):
    """``(the isl dimensions, [(index texts, facts)])``, the loop's own variable
    first (``loop`` may be an ``if`` around the loop: its condition a fact), or None when an access is not provable.  ``precise`` False: the
    loop bounds alone (no conditions, no assigned scalar standing for its
    value), whose sets isl decides in a fraction of the time: a pass asks
    that first and the precise question only when it fails (a jammed nest's
    conditions are nested min/max, up to 0.35 s of isl per question)."""
    w = _walk(loop, array, want, side, params, precise)
    return (w.dims, w.found) if w.ok else None


def _walk(loop, array, want, side, params, precise=True) -> _Walk:
    w = _Walk(side, array, want, params, precise)
    w.stmts([loop], {}, [])
    return w


def tile_sizes(loop: Loop) -> list:
    """The candidate tile sizes of ``loop``: each ``c`` with ``c * var`` (``var``
    the loop's variable, ``c`` a positive literal) in its statements (a tile
    loop's inner bounds and offsets are ``K t + ...``), largest first; ``[1]``
    when there is none.  Candidates only: :func:`in_tiles` proves what a pass takes."""
    var, out = K.Name(loop.var), set()

    def look(e):
        if isinstance(e, K.IBin) and e.op == "*":
            for a, b in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
                if a == var and isinstance(b, K.Int) and b.value > 0:
                    out.add(b.value)
        if isinstance(e, K.KExpr):
            for c in K.children(e):
                look(c)
        elif isinstance(e, tuple):
            for c in e:
                look(c)

    for s in walk_stmts(loop.body):
        for f in ("lo", "hi", "cond", "value", "index", "shape"):
            look(getattr(s, f, None))
    # a tile loop's own size; 1 (every access at its iteration's point) for a loop with none
    return sorted(out - {1}, reverse=True) or [1]


def in_tiles(loop: Loop, array: str, want: str, params: set, k: int, low: bool, high: bool,
             below: int = 0, given=None) -> bool:
    """isl: every access of ``array`` (``want``: "read", "write" or "any") in iteration
    ``u`` of ``loop``, at its point, is one-dimensional and lies at or above
    ``k u - below k`` (``low``; ``below`` tiles back) and below ``k u + k`` (``high``);
    ``given``: a condition on ``params`` assumed to hold (the loop taken inside an ``if``).  One set per access,
    where comparing two accesses' sets pairwise costs their product (a jammed
    nest's pairwise questions took 5.9 s of isl, these 0.2 s)."""
    return _in_tiles(loop if given is None else If(given, (loop,)), array, want, frozenset(params), k, low, high,
                     below)


@lru_cache(maxsize=256)
def _in_tiles(loop, array: str, want: str, params: frozenset, k: int, low: bool, high: bool,
              below: int) -> bool:
    w = _walk(loop, array, want, "p", params)
    if not w.ok:
        return False
    # an accumulation's load and store: one question
    found = list(dict.fromkeys((tuple(ix), tuple(f), at) for (ix, f), at in zip(w.found, w.where)))
    if any(len(ix) != 1 for ix, _, _ in found):
        return False
    u = w.dims[0]
    for ix, facts, at in found:
        out = ([f"{ix[0]} < {k} * {u} - {below * k}"] if low else []) + ([f"{ix[0]} >= {k} * {u} + {k}"] if high else [])
        bad = " or ".join(f"({c})" for c in out)
        if not _never(", ".join(at), facts, bad):
            return False
    return True


@lru_cache(maxsize=4096)
def _never(space: str, facts: tuple, bad: str) -> bool:
    """isl: no point of ``facts`` satisfies ``bad``.  By text: a kernel's all-versions and
    size-class sources hold the same accesses at the same points, and with a jammed
    nest's facts the emptiness itself is most of a question (0.08 s)."""
    return _facts(space, facts).intersect(_set(space, (bad,))).is_empty()  # islpy aligns the parameters


def _set(space: str, cons: tuple):
    par = ", ".join(sorted(_words(" ".join(cons)) - set(space.split(", "))))
    return isl.Set(f"[{par}] -> {{ [{space}] : {' and '.join(f'({c})' for c in cons) or '0 = 0'} }}")


def _facts(space: str, facts: tuple):
    """The isl set of one point's facts: the accesses at one point (a store and
    its loads) and every question about one loop share it.  Built innermost
    fact first, each step cached (``_chain``): the accesses of one nest share
    their inner loops' facts, and a nest's facts are the same texts wherever a
    walk meets it (``_Walk._dim``: the nest fused into another loop, inside an
    ``if``), so only the facts of what is around it are new; a jammed nest's
    nested min/max cost most of a question."""
    return _chain(space, tuple(reversed(facts)))


@lru_cache(maxsize=2048)
def _chain(space: str, facts: tuple):
    if not facts:
        return _set(space, ())
    return _chain(space, facts[:-1]).intersect(_fact(space, facts[-1])).coalesce()


def _fact(space: str, fact: str):
    """One fact in ``space``: parsed in the shortest prefix of the point's
    dimensions holding every one it names (a loop's bound names only the
    loops around it), once for all the points below it, then given the
    remaining dimensions, unconstrained."""
    dims = space.split(", ")
    named = _words(fact)
    k = max((i for i, d in enumerate(dims) if d in named), default=0) + 1
    got = _prefix_fact(", ".join(dims[:k]), fact)
    return got if k == len(dims) else got.add_dims(isl.dim_type.set, len(dims) - k)


@lru_cache(maxsize=2048)
def _prefix_fact(space: str, fact: str):
    return _set(space, (fact,))


__all__ = ["accesses_of", "in_tiles", "tile_sizes"]
