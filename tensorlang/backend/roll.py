"""Rolling scalars for a stencil of temporaries (issue #13 item 2, #17).

After ``shifted.py`` substituted a cheap 1-D producer read at constant
shifts (``X[i - 1]``, ``X[i]``) into its consumer, the consumer's interior
loop evaluates the producer's expression ``E`` at ``i + c`` for each shift
``c``.  Iteration ``i`` needs ``E(i + c)`` for ``c`` in ``cmin..cmax``;
iteration ``i - 1`` already computed ``E(i - 1 + c + 1)``.  So, for an
innermost unit-step loop ``for i in range(lo, hi)`` with a straight-line
body (assignments, stores, accumulations; no ``if``, no inner loop):

* every sub-expression of the body (locals expanded) that is pure in ``i``
  -- reads only arrays the loop does not store, no accumulator, no value
  carried from an earlier iteration, no conditional expression -- is keyed
  by its form with ``i`` shifted to its first index's offset (typed
  kernel-IR nodes, affine indices in a normal form: never text);
* a key met at contiguous offsets ``cmin..cmax`` (two at least) is one
  *family*: the body computes ``w_cmax = E(i + cmax)`` (the original node,
  with its locals), reads ``w_c`` for the others, and ends with
  ``w_c = w_(c+1)``; before the loop, when it runs, ``w_c = E(lo + c)`` for
  ``c < cmax`` (every one of them evaluated by the original at ``i = lo``:
  the offsets are contiguous, so the original read them all);
* families are rolled largest first, then again inside what is left (the
  producer of a producer: ``E(i+1) = F(i+2) - F(i+1)``), and locals nobody
  reads any more are dropped.

The same expressions on the same inputs: every value, hence the result, is
bit-identical to the recomputing loop's.  In the parallel kernel a
``prange`` loop is rolled in contiguous chunks, each with its own prologue
(``_chunks``); a top-level reduction there is not rolled (it is split in
chunks of partial sums by codegen, which knows nothing of prologues).  A reduction loop with rolled values is no longer a
lone ``acc += e`` (codegen's partial-sum lanes): its sum is added in
iteration order, as written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from . import kir as K
from .loopir import AccAdd, Assign, If, KernelIR, Loop, Store

LANES = 4  # partial sums of an innermost reduction (codegen._lanes, and _lanes here)
MAX_SPAN = 4  # cmax - cmin + 1 at most
MAX_NODES = 400  # expanded size of a body expression considered
MAX_ROUNDS = 8
MAX_BODY = 4000  # kernel-IR nodes of a loop body searched

_FLOAT_OPS = (K.FSum, K.FMul, K.FDiv, K.FNeg, K.FPow, K.FCall)


def _names(e, out: set) -> set:
    if isinstance(e, K.Name):
        out.add(e.name)
    elif isinstance(e, K.Load):
        out.add(e.array)
    if isinstance(e, K.KExpr):
        for c in K.children(e):
            _names(c, out)
    return out


def _size(e) -> int:
    return 1 + sum(_size(c) for c in K.children(e))


# -- affine normal form of integer index expressions -----------------------------------------------


def _affine(e):
    """``(sorted ((name, coefficient), ...), constant)`` or None."""
    match e:
        case K.Int(value=v):
            return (), v
        case K.Name(name=n):
            return ((n, 1),), 0
        case K.IBin(op=op, lhs=a, rhs=b) if op in "+-":
            fa, fb = _affine(a), _affine(b)
            if fa is None or fb is None:
                return None
            s = -1 if op == "-" else 1
            acc = Counter(dict(fa[0]))
            for n, c in fb[0]:
                acc[n] += s * c
            return tuple(sorted((n, c) for n, c in acc.items() if c)), fa[1] + s * fb[1]
        case K.IBin(op="*", lhs=a, rhs=K.Int(value=k)) | K.IBin(op="*", lhs=K.Int(value=k), rhs=a):
            fa = _affine(a)
            if fa is None:
                return None
            return tuple((n, c * k) for n, c in fa[0] if c * k), fa[1] * k
    return None


def _build(form) -> K.KExpr:
    terms, const = form
    out = None
    for n, c in terms:
        t = K.Name(n) if c == 1 else K.IBin("*", K.Int(c), K.Name(n))
        out = t if out is None else K.IBin("+", out, t)
    if out is None:
        return K.Int(const)
    return out if const == 0 else K.IBin("+", out, K.Int(const))


def _shift(e, var: str, d: int):
    """``e`` with ``var`` read as ``var + d``, every Load index in normal form."""

    def fn(x):
        if isinstance(x, K.Load):
            idx = []
            for ix in x.index:
                f = _affine(ix)
                if f is None:
                    idx.append(_shift(ix, var, d))
                else:
                    terms = dict(f[0])
                    idx.append(_build((f[0], f[1] + d * terms.get(var, 0))))
            return replace(x, index=tuple(idx))
        if isinstance(x, K.Name) and x.name == var:
            return K.IBin("+", x, K.Int(d)) if d else x
        return None

    return K.map_down(e, fn)


def _first_offset(e, var: str):
    """The constant of the first index with ``var`` at coefficient 1 (depth first), or None."""
    if isinstance(e, K.Load):
        for ix in e.index:
            f = _affine(ix)
            if f is not None and dict(f[0]).get(var) == 1:
                return f[1]
    for c in K.children(e):
        got = _first_offset(c, var)
        if got is not None:
            return got
    return None


# -- one loop ----------------------------------------------------------------------------------------


def _straight(body) -> bool:
    return bool(body) and all(isinstance(s, (Assign, Store, AccAdd)) for s in body)


class _Body:
    """A loop body's locals expanded, and which names make an expression impure."""

    def __init__(self, loop: Loop, carried: set):
        self.var = loop.var
        self.stored = {s.array for s in loop.body if isinstance(s, Store)}
        self.bad = {s.target for s in loop.body if isinstance(s, AccAdd)} | carried
        self.defs: dict = {}
        self.memo: dict = {}
        self.keys: dict = {}
        for s in loop.body:
            if isinstance(s, Assign):
                self.defs[s.target] = self.expand(s.value)

    def expand(self, e):
        got = self.memo.get(e)
        if got is None:
            got = K.map_down(e, lambda x: self.defs.get(x.name) if isinstance(x, K.Name) else None)
            self.memo[e] = got
        return got

    def key(self, node):
        """``(key, offset)`` of a candidate node, else None."""
        if not isinstance(node, _FLOAT_OPS):
            return None
        if node not in self.keys:
            self.keys[node] = self._key(node)
        return self.keys[node]

    def _key(self, node):
        x = self.expand(node)
        if x is None or _size(x) > MAX_NODES:
            return None
        if any(isinstance(y, (K.Select, K.BoolOp)) for y in _walk(x)):
            return None  # evaluated lazily: not every load runs
        names = _names(x, set())
        if self.var not in names or names & (self.stored | self.bad) or names & set(self.defs):
            return None
        c = _first_offset(x, self.var)
        if c is None:
            return None
        return _shift(x, self.var, -c), c


def _walk(e):
    yield e
    for c in K.children(e):
        yield from _walk(c)


def _values(s):
    return (s.value,) + (tuple(s.index) if isinstance(s, Store) else ())


def _roll_once(loop: Loop, carried: set, tag: str):
    """(new loop body, prologue statements, rolled names) for the largest family, or None."""
    b = _Body(loop, carried)
    found: dict = {}  # key -> {offset: first node}
    for s in loop.body:
        for v in _values(s):
            for node in _walk(v):
                kc = b.key(node)
                if kc is not None:
                    found.setdefault(kc[0], {}).setdefault(kc[1], node)
    best = None
    for key, offs in found.items():
        cs = sorted(offs)
        if len(cs) < 2 or cs[-1] - cs[0] + 1 != len(cs) or len(cs) > MAX_SPAN:
            continue
        size = _size(key)
        if best is None or size > best[0]:
            best = (size, key, cs, offs)
    if best is None:
        return None
    _, key, cs, offs = best
    cmin, cmax = cs[0], cs[-1]
    w = {c: f"{loop.var}_{tag}_{c - cmin}" for c in cs}
    lead = offs[cmax]

    def swap(x):
        kc = b.key(x)
        if kc is not None and kc[0] == key:
            return K.Name(w[kc[1]])
        return None

    body, placed = [], False
    for s in loop.body:
        hit = any(b.key(n) is not None and b.key(n)[0] == key and b.key(n)[1] == cmax
                  for v in _values(s) for n in _walk(v))
        if hit and not placed:
            body.append(Assign(w[cmax], lead))
            placed = True
        if isinstance(s, Store):
            body.append(replace(s, index=tuple(K.map_down(i, swap) for i in s.index), value=K.map_down(s.value, swap)))
        else:
            body.append(replace(s, value=K.map_down(s.value, swap)))
    body += [Assign(w[c], K.Name(w[c + 1])) for c in cs[:-1]]
    expanded = b.expand(lead)
    pre = [Assign(w[c], _subst_var(_shift(expanded, loop.var, c - cmax), loop.var, loop.lo)) for c in cs[:-1]]
    return tuple(body), pre, set(w.values())


def _subst_var(e, var: str, repl):
    return K.substitute(e, {var: repl})


def _dead(body, keep: set) -> tuple:
    """Drop assignments to locals no later statement (nor anything outside) reads."""
    body = list(body)
    while True:
        used = Counter()
        for s in body:
            for v in _values(s):
                for n in _names(v, set()):
                    used[n] += 1
        drop = [k for k, s in enumerate(body)
                if isinstance(s, Assign) and not used[s.target] and s.target not in keep]
        if not drop:
            return tuple(body)
        for k in reversed(drop):
            del body[k]


def roll_loop(loop: Loop, outside: set) -> list:
    """The statements replacing ``loop`` (module doc); ``[loop]`` when nothing rolls.
    ``outside``: names read anywhere outside the loop (locals kept for them)."""
    if loop.step != 1 or loop.kind not in ("gen", "sum") or not _straight(loop.body):
        return [loop]
    if sum(_size(v) for s in loop.body for v in _values(s)) > MAX_BODY:
        return [loop]  # compile time stays linear in a long unrolled body
    targets = [s.target for s in loop.body if isinstance(s, Assign)]
    if len(targets) != len(set(targets)) or loop.var in targets:
        return [loop]
    seen: set = set()
    for s in loop.body:  # a local read before its assignment carries a value: not rolled
        if any(n in targets and n not in seen for v in _values(s) for n in _names(v, set())):
            return [loop]
        if isinstance(s, Assign):
            seen.add(s.target)
    carried: set = set()
    pres: list = []
    cur = loop
    for k in range(MAX_ROUNDS):
        got = _roll_once(cur, carried, f"w{k}")
        if got is None:
            break
        body, pre, made = got
        carried |= made
        pres += pre
        cur = replace(cur, body=_dead(body, outside))
    if not pres:
        return [loop]
    read = set()
    for s in cur.body:
        for v in _values(s):
            _names(v, read)
    pres = [s for s in pres if s.target in read]
    init = [Assign(s.target, K.Float(0.0)) for s in pres]
    guard = If(K.Cmp("<", loop.lo, loop.hi), tuple(pres))
    return init + [guard] + _lanes(cur, carried)


def _lanes(loop: Loop, rolled: set) -> list:
    """A rolled reduction ``for i: ...; acc += e`` in codegen's lane order
    (``codegen._lanes``: lane ``k`` adds the iterations ``lo + 4m + k``, the
    remainder goes to ``acc``, then ``acc += (a1 + a2) + a3``), the body
    repeated for ``i .. i + 3`` with the rolled values carried through: the
    additions are the unrolled loop's, in its order, and the four chains of
    additions overlap as they did."""
    accs = [s for s in loop.body if isinstance(s, AccAdd)]
    if loop.kind != "sum" or len(accs) != 1 or loop.body[-1 - _rotations(loop.body, rolled)] is not accs[0] or any(
            isinstance(s, Store) for s in loop.body):
        return [loop]
    acc, v = accs[0].target, loop.var
    lo_n, hi_n = f"{v}_l", f"{v}_h"
    out = [Assign(lo_n, loop.lo),
           Assign(hi_n, K.IBin("+", K.Name(lo_n), K.IBin("*", K.IBin("//", K.MinMax("max", (
               K.Int(0), K.IBin("-", loop.hi, K.Name(lo_n)))), K.Int(LANES)), K.Int(LANES))))]
    out += [Assign(f"{acc}_a{k}", K.Float(0.0)) for k in range(1, LANES)]
    body = []
    for k in range(LANES):
        for s in loop.body:
            s = _shift_stmt(s, v, k)
            if isinstance(s, AccAdd) and k:
                s = AccAdd(f"{acc}_a{k}", s.value)
            body.append(s)
    out.append(replace(loop, lo=K.Name(lo_n), hi=K.Name(hi_n), step=LANES, body=tuple(body)))
    out.append(replace(loop, lo=K.Name(hi_n)))
    rest = K.Name(f"{acc}_a1")
    for k in range(2, LANES):
        rest = K.FSum((rest, K.Name(f"{acc}_a{k}")))
    out.append(AccAdd(acc, rest))
    return out


def _rotations(body, rolled: set) -> int:
    """How many of the body's last statements are rolling rotations (``w_c = w_(c+1)``)."""
    k = 0
    for s in reversed(body):
        if isinstance(s, Assign) and isinstance(s.value, K.Name) and s.target in rolled:
            k += 1
        else:
            break
    return k


def _shift_stmt(s, var: str, d: int):
    if not d:
        return s
    if isinstance(s, Store):
        return replace(s, index=tuple(_shift(i, var, d) for i in s.index), value=_shift(s.value, var, d))
    return replace(s, value=_shift(s.value, var, d))


def _stmt_names(stmts, out: Counter) -> Counter:
    for s in stmts:
        match s:
            case Loop(lo=lo, hi=hi, body=b):
                for n in _names(lo, set()) | _names(hi, set()):
                    out[n] += 1
                _stmt_names(b, out)
            case If(cond=c, then=t, orelse=o):
                for n in _names(c, set()):
                    out[n] += 1
                _stmt_names(t, out)
                _stmt_names(o, out)
            case Assign() | AccAdd() | Store():
                for v in _values(s):
                    for n in _names(v, set()):
                        out[n] += 1
            case _:
                for f in K.field_names(type(s)) if hasattr(s, "__dataclass_fields__") else ():
                    x = getattr(s, f)
                    if isinstance(x, K.KExpr):
                        for n in _names(x, set()):
                            out[n] += 1
    return out


def _chunks(loop: Loop, outside: set) -> list:
    """A ``prange`` loop rolled in ``T`` contiguous chunks (``T`` the parallel
    kernel's thread count), each with its own prologue: iterations of a
    chunk depend on each other through the rolling scalars, the chunks do not."""
    from .parallel_split import THREADS_ARG

    v = loop.var
    T, c, lo, cnt, l, h = (f"{v}_T", f"{v}_c", f"{v}_lo", f"{v}_N", f"{v}_l", f"{v}_h")
    inner = replace(loop, lo=K.Name(l), hi=K.Name(h), parallel=False)
    rolled = roll_loop(inner, outside)
    if rolled == [inner]:
        return [loop]
    part = lambda k: K.IBin("+", K.Name(lo), K.IBin("//", K.IBin("*", K.Name(cnt), k), K.Name(T)))
    body = (Assign(l, part(K.Name(c))), Assign(h, part(K.IBin("+", K.Name(c), K.Int(1))))) + tuple(rolled)
    return [Assign(T, K.MinMax("max", (K.Int(1), K.Name(THREADS_ARG)))),
            Assign(lo, loop.lo),
            Assign(cnt, K.MinMax("max", (K.Int(0), K.IBin("-", loop.hi, K.Name(lo))))),
            Loop(c, K.Int(0), K.Name(T), 1, body, "gen", parallel=True)]


def roll_loops(ir: KernelIR, par: bool = False) -> KernelIR:
    """Signature: roll_loops : KernelIR -> KernelIR (module doc).  ``par``: the
    parallel kernel's statements: a ``prange`` loop is rolled chunk by chunk
    (``_chunks``), a top-level reduction not at all (codegen splits it in
    chunks of its own, ``parallel_split.reductions``)."""
    total = _stmt_names(ir.body, Counter())
    for r in ir.results:
        for n in _names(r, set()) if isinstance(r, K.KExpr) else {r}:
            total[n] += 1

    def go(stmts) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, Loop) and _straight(s.body) and not (par and s.kind != "gen"):
                inner = _stmt_names(s.body, Counter())
                outside = {n for n, c in total.items() if c > inner.get(n, 0)}
                out.extend(_chunks(s, outside) if par and s.parallel else roll_loop(s, outside))
            elif isinstance(s, Loop):
                out.append(replace(s, body=go(s.body)))
            elif isinstance(s, If):
                out.append(replace(s, then=go(s.then), orelse=go(s.orelse)))
            else:
                out.append(s)
        return tuple(out)

    return replace(ir, body=list(go(ir.body)))


__all__ = ["roll_loops", "roll_loop"]
