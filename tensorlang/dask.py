"""Batch-sharded losses and gradients on Dask (issue #19; paper Section 2.3).

A loss that is a sum over a batch, ``l = sum[k:B] t(k)``, where the term
``t(k)`` reads only the k-th slice of each batched input, splits over any
partition of the batch: the loss of the whole batch is the sum of the losses
of the chunks, the gradient of a shared input (the kernel ``w`` of the
paper's batched kernel fit, Section 2.3) is the sum of the chunks'
gradients, and the gradient of a batched input is the chunks' gradients
side by side (the adjoint of a sum copies the cotangent to every term,
rules 6.44 and 6.49).  So the per-chunk
program is the loss itself, run with ``B`` set to the chunk's row count:

    vg = tensorlang.dask.value_and_grad(loss, wrt=[x, w], batch=b)
    value, (gx, gw) = vg(x=X, z=Z, w=W)    # X, Z: dask.array, chunked along b

:func:`shard_plan` proves the decomposition on the IR before anything runs
(``B`` occurs only as the extent of the batch sum and as the leading extent
of the batched inputs; the batch index only selects a batched input's own
row) and refuses everything else with a TensorLangError that says why.

Execution: one Dask task per chunk runs ``tl.value_and_grad`` of the loss
(built and compiled once per worker process, keyed by the interned program;
see ``_PROGRAMS``); a tree reduction sums the values and shared gradients;
batched gradients stay on the cluster as a ``dask.array`` chunked like the
input.  The call runs on the current ``dask.distributed`` Client when there
is one, else on Dask's local scheduler.  A chunk that fails fails the call
with an error naming it; no partial result is returned.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import numpy as np

try:  # the top-level package (imports are absolute; this module is tensorlang.dask)
    import dask
    import dask.array as da
except ImportError as exc:  # an optional dependency, not one of our modules
    raise ImportError("tensorlang.dask needs Dask: pip install 'tensorlang[dask]'") from exc

from . import functions as F
from .errors import InputError, TensorLangError, UnsupportedError, describe
from .ir import (
    Access,
    Add,
    Aff,
    Call,
    Const,
    Exists,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Node,
    SizeVar,
    Sum,
    TensorT,
    Type,
    Var,
    accesses,
    children,
    input_vars,
    relations_of,
    size_vars,
    sym_aff,
    walk,
)
from .typecheck import check_program

__all__ = ["value_and_grad", "grad", "shard_plan", "ShardPlan", "cache_info"]


# --------------------------------------------------------------------------
# The sharding proof (on the IR)


@dataclass(frozen=True)
class ShardPlan:
    """How a loss splits over its batch: proven by :func:`shard_plan`."""

    loss: Expr
    batch: SizeVar
    batched: tuple  # batched input Vars (leading extent B), by name
    shared: tuple  # the other inputs


def _batch_var(batch, loss: Expr) -> SizeVar:
    sv = None
    if isinstance(batch, str):
        sv = SizeVar(batch)
    elif isinstance(batch, SizeVar):
        sv = batch
    elif isinstance(batch, Aff) and batch.const == 0 and len(batch.terms) == 1:
        s, c = batch.terms[0]
        if c == 1 and isinstance(s, SizeVar):
            sv = s
    if sv is None:
        raise TensorLangError(f"batch must be a size of the program (tl.size('B')), got {batch!r}")
    if sv not in size_vars(loss):
        raise TensorLangError(f"the batch size {sv.name} does not occur in the loss {describe(loss)}")
    return sv


def shard_plan(loss: Expr, batch, wrt=()) -> ShardPlan:
    """Prove that ``loss`` is a sum over ``batch`` of terms reading only their
    own batch slice; return the plan or raise a TensorLangError saying why not."""
    check_program(loss)
    sv = _batch_var(batch, loss)
    B = sym_aff(sv)
    ins = {v.name: v for v in input_vars(loss)}
    for x in wrt:
        if isinstance(x, Var) and x.uid == 0:
            ins.setdefault(x.name, x)
    batched, shared = [], []
    for v in sorted(ins.values(), key=lambda v: v.name):
        if sv not in size_vars(v.type):
            shared.append(v)
        elif isinstance(v.type, TensorT) and v.type.extent is B and sv not in size_vars(v.type.elem):
            batched.append(v)
        else:
            raise TensorLangError(
                f"cannot shard over {sv.name}: input {v.name} has type {v.type}; a batched input must have "
                f"{sv.name} as its leading extent and nowhere else"
            )
    if not batched:
        raise TensorLangError(f"cannot shard over {sv.name}: no input has {sv.name} as its leading extent")
    for r in relations_of(loss):
        if any(sv in a.size_vars() for a in r.extents):
            raise UnsupportedError(f"cannot shard over {sv.name}: the relation {r.name} ranges over the batch")
    checker = _Checker(sv, frozenset(batched))
    checker.outer(loss)
    if not checker.found:
        raise TensorLangError(f"cannot shard over {sv.name}: the loss has no sum over {sv.name}")
    return ShardPlan(loss, sv, tuple(batched), tuple(shared))


class _Checker:
    """Walks the loss: an *outer* part, linear in the batch sums, and the
    per-example *terms* under ``sum[k:B]``.

    In a term, ``active`` holds the index variables that denote the term's
    own example k.  A *batched value* (a batched input, ``gen[k':B] e`` or a
    let-bound one) may be read only at an active index, which makes its
    gen's variable active inside (``(gen[k':B] e)[k] = e[k'/k]``); no other
    index may mention an active variable and nothing else may mention B.
    Then every term has the same value for a chunk as for the whole batch.
    """

    def __init__(self, sv: SizeVar, batched: frozenset):
        self.sv, self.B, self.batched = sv, sym_aff(sv), set(batched)
        self.found = False
        self._seen: set = set()

    def _why(self, what: str):
        raise TensorLangError(f"cannot shard the loss over {self.sv.name}: {what}")

    def _independent(self, n: Node) -> bool:
        """Same value for every chunk: no B, hence no batched input (their types hold B)."""
        return self.sv not in size_vars(n)

    def _batch_gen(self, e) -> bool:
        return isinstance(e, Gen) and e.extent is self.B

    def outer(self, e: Expr) -> None:
        """``e`` must equal the sum over the batch of terms: linear in batch sums."""
        match e:
            case Sum(var=k, extent=n, body=b) if n is self.B:
                self.found = True
                self.term(b, frozenset((k,)))
            case Sum(extent=n, body=b) if self.sv not in n.size_vars():
                self.outer(b)  # sum[i:n] sum[k:B] t = sum[k:B] sum[i:n] t
            case Add(lhs=a, rhs=b):
                self.outer(a)
                self.outer(b)
            case Mul(lhs=a, rhs=b) if self._independent(a):
                self.outer(b)
            case Mul(lhs=a, rhs=b) if self._independent(b):
                self.outer(a)
            case Let(var=v, value=e0, body=b) if self._independent(e0):
                self.outer(b)
            case Let(var=v, value=e0, body=b) if self._batch_gen(e0):
                self.term(e0.body, frozenset((e0.var,)))
                self.batched.add(v)
                self.outer(b)
            case Iverson(pred=p, body=b) if self._independent(p):
                self.outer(b)
            case Const(value=0):
                pass
            case _ if self._independent(e):
                self._why(
                    f"the term {describe(e)} does not depend on the batch; every chunk would add it once. "
                    "Add it to the result yourself, outside the sharded loss"
                )
            case Mul():
                self._why(f"{describe(e)} multiplies two factors that depend on the batch; it is not a sum over it")
            case Call():
                self._why(f"{describe(e)} applies {e.fn} to a batch-dependent value; only sums over the batch shard")
            case Let() | Iverson():
                self._why(f"{describe(e)} binds or guards with a batch-dependent value outside the sum over the batch")
            case Sum():
                self._why(f"{describe(e)} sums over {e.extent}, which mentions {self.sv.name} but is not {self.sv.name}")
            case _:
                self._why(f"{describe(e)} is not a sum over {self.sv.name} of per-example terms")

    def _aff(self, a: Aff, active: frozenset, where: Node) -> None:
        if self.sv in a.size_vars():
            self._why(f"{self.sv.name} occurs in {a} in {describe(where)}, inside a per-example term")
        used = active & a.index_vars()
        if used:
            self._why(
                f"the batch index {next(iter(used))} occurs in {a} in {describe(where)}; it may only select "
                "a batched value's own row, as in x[k, ...]"
            )

    def term(self, n, active: frozenset) -> None:
        """Check ``n``, part of a per-example term (see the class doc)."""
        if isinstance(n, tuple):
            for x in n:
                self.term(x, active)
            return
        if not isinstance(n, Node):
            return
        key = (id(n), active)
        if key in self._seen:  # programs are DAGs: visit each shared node once
            return
        self._seen.add(key)
        match n:
            case Access():
                base, idxs = accesses(n)
                if (isinstance(base, Var) and base in self.batched) or self._batch_gen(base):
                    if not any(idxs[0] is sym_aff(k) for k in active):
                        what = base.name if isinstance(base, Var) else describe(base)
                        self._why(
                            f"{describe(n)} reads row {idxs[0]} of the batched value {what}; each "
                            "per-example term may read only its own row"
                        )
                    if isinstance(base, Gen):
                        self.term(base.body, active | {base.var})
                    idxs = idxs[1:]
                else:
                    self.term(base, active)
                for a in idxs:
                    self._aff(a, active, n)
            case Var():
                if n in self.batched:
                    self._why(f"the batched value {n.name} is used whole inside a per-example term")
                if not self._independent(n.type):
                    self._why(f"the variable {n.name} has type {n.type}, which mentions {self.sv.name}")
            case Let(var=v, value=e0, body=b) if self._batch_gen(e0):
                self.term(e0.body, active | {e0.var})
                self.batched.add(v)
                self.term(b, active)
            case Gen() if self._batch_gen(n):
                self._why(f"{describe(n)} builds a batched value that is not read at the example's own row")
            case Aff():
                self._aff(n, active, n)
            case Gen(var=i, extent=a, body=b) | Sum(var=i, extent=a, body=b) | Exists(var=i, extent=a, body=b):
                self._aff(a, active, n)
                self.term(b, active - {i})
            case Type():
                if not self._independent(n):
                    self._why(f"the type {n} inside a per-example term mentions {self.sv.name}")
            case _:
                for c in children(n):
                    self.term(c, active)


# --------------------------------------------------------------------------
# Worker side: one built (and compiled) value-and-gradient per program and process

_PROGRAMS: dict = {}  # (loss, wrt, mode) -> tl.value_and_grad callable
_STATS = {"builds": 0, "chunks": 0}
_LOCK = threading.Lock()


def cache_info() -> dict:
    """This process's cache: programs built and chunks run (``client.run(cache_info)``)."""
    return {"programs": len(_PROGRAMS), **_STATS}


def _program(spec):
    key = (spec.loss, spec.wrt, spec.mode)  # interned: an unpickled program is the same object
    vg = _PROGRAMS.get(key)
    if vg is None:
        with _LOCK:
            vg = _PROGRAMS.get(key)
            if vg is None:
                for fd in spec.functions:  # user-registered scalar functions travel with the program
                    if fd.name not in F.registered():
                        F.register(fd)
                from .autodiff import value_and_grad as _vg

                vg = _vg(spec.loss, list(spec.wrt), mode=spec.mode)
                _PROGRAMS[key] = vg
                _STATS["builds"] += 1
    return vg


class _Spec:
    """What a chunk task needs; pickles small (IR nodes re-intern on arrival).

    A plain class on purpose: Dask looks inside tuples and dataclasses for
    collections, and the IR nodes are dataclasses it must not walk.
    """

    def __init__(self, loss, wrt, mode, batched, trailing, functions):
        self.loss = loss
        self.wrt = wrt  # tuple of input Vars, as given
        self.mode = mode
        self.batched = batched  # names, in the order the chunk arrays are passed
        self.trailing = trailing  # per batched input: its shape after the batch axis
        self.functions = functions  # FunctionDefs of the scalar functions the loss calls


def _chunk(spec: _Spec, index: int, start: int, stop: int, shared: dict, *arrays):
    """Value and gradients of one chunk (rows start:stop of the batch)."""
    where = f"chunk {index} (batch rows {start}:{stop})"
    kw = dict(shared)
    for name, trailing, a in zip(spec.batched, spec.trailing, arrays):
        a = np.asarray(a)
        if a.shape != (stop - start, *trailing):
            raise InputError(f"{where} of input {name} has shape {a.shape}; expected {(stop - start, *trailing)}")
        kw[name] = a
    try:
        value, grads = _program(spec)(**kw)
    except TensorLangError as exc:  # the same kind of error, naming the chunk
        try:
            named = type(exc)(f"{where}: {exc}")
        except TypeError:  # a subclass with another constructor
            named = TensorLangError(f"{where}: {type(exc).__name__}: {exc}")
        raise named from None
    with _LOCK:
        _STATS["chunks"] += 1
    # tl.value_and_grad gives one wrt's gradient bare, even for a one-element list
    return float(value), ((grads,) if len(spec.wrt) == 1 else tuple(grads))


def _split(spec: _Spec, res):
    """(value, shared gradients, dtypes of the batched gradients) of one chunk's result."""
    value, grads = res
    shared = tuple(g for x, g in zip(spec.wrt, grads) if x.name not in spec.batched)
    dtypes = tuple(np.asarray(g).dtype.str for x, g in zip(spec.wrt, grads) if x.name in spec.batched)
    return value, shared, dtypes


def _pick(res, pos: int):
    return res[1][pos]


def _add(a, b):
    if isinstance(a, tuple):
        return tuple(_add(x, y) for x, y in zip(a, b))
    return a + b


def _combine(*parts):
    """One node of the tree reduction over chunk summaries (:func:`_split`):
    sum values and shared gradients."""
    value, shared, dtypes = parts[0]
    for v, s, d in parts[1:]:
        value, shared = value + v, _add(shared, s)
        dtypes = tuple(np.result_type(x, y).str for x, y in zip(dtypes, d))
    return value, shared, dtypes


# --------------------------------------------------------------------------
# Client side


def _current_client():
    try:
        from distributed import default_client
    except ImportError:  # dask without distributed: the local scheduler
        return None
    try:
        return default_client()
    except ValueError:  # no Client in this process
        return None


def _functions_of(loss: Expr) -> tuple:
    reg = F.registered()
    names = sorted({n.fn for n in walk(loss) if isinstance(n, Call)})
    return tuple(reg[name] for name in names if name in reg)


def _batched_array(name: str, x, ndim: int):
    if not isinstance(x, da.Array):
        x = np.asarray(x)
        x = da.from_array(x, chunks=x.shape)
    if x.ndim != ndim:
        raise InputError(f"batched input {name} has {x.ndim} axes; its type has {ndim}")
    for axis, cs in enumerate(x.chunks):
        for j, c in enumerate(cs):
            if np.isnan(c):
                raise InputError(
                    f"chunk {j} of batched input {name} has an unknown size (NaN) along axis {axis}; "
                    f"call {name}.compute_chunk_sizes() first"
                )
    if any(len(cs) > 1 for cs in x.chunks[1:]):  # one chunk along every axis but the batch
        x = x.rechunk({a: -1 for a in range(1, x.ndim)})
    return x


class _Sharded:
    def __init__(self, loss: Expr, wrt, batch, mode: str, split_every: int):
        from .autodiff import value_and_grad as _vg

        self.single = not isinstance(wrt, (list, tuple))
        self.xs = [wrt] if self.single else list(wrt)
        if split_every < 2:
            raise TensorLangError(f"split_every must be at least 2, got {split_every}")
        self.plan = shard_plan(loss, batch, self.xs)
        self.split_every = split_every
        self.mode = mode
        # Derive here (tl.value_and_grad also checks wrt and the loss): a
        # program the derivative refuses fails now, not in every worker; the
        # local scheduler then reuses it.
        local = _vg(loss, self.xs, mode=mode)
        self.key = (loss, tuple(self.xs), mode)
        _PROGRAMS.setdefault(self.key, local)

    def __call__(self, **inputs):
        from .evaluator import prepare_inputs

        plan, sv = self.plan, self.plan.batch
        if sv.name in inputs:
            raise InputError(f"do not pass the batch size {sv.name}: each chunk's is its row count")
        missing = [v.name for v in plan.batched if v.name not in inputs]
        if missing:
            raise InputError(f"missing batched input(s) {missing}")
        batched = {v.name: _batched_array(v.name, inputs[v.name], len(_shape(v.type))) for v in plan.batched}
        total = {n: x.shape[0] for n, x in batched.items()}
        if len(set(total.values())) > 1:
            raise InputError(f"the batched inputs disagree on the batch size {sv.name}: {total}")
        # the batch partition: that of the first batched input given as a dask array
        ref = next((v.name for v in plan.batched if isinstance(inputs[v.name], da.Array)), plan.batched[0].name)
        rows = batched[ref].chunks[0]
        batched = {n: (x if x.chunks[0] == rows else x.rechunk({0: rows})) for n, x in batched.items()}
        shared = {k: (v.compute() if isinstance(v, da.Array) else v) for k, v in inputs.items() if k not in batched}
        # Check names, trailing shapes and sizes on one probe row (a broadcast view, no copy).
        probe = {n: np.broadcast_to(np.zeros((), x.dtype), (1, *x.shape[1:])) for n, x in batched.items()}
        prepare_inputs(plan.loss, {**shared, **probe}, exact=False)

        names = tuple(v.name for v in plan.batched)
        spec = _Spec(plan.loss, tuple(self.xs), self.mode, names,
                     tuple(batched[n].shape[1:] for n in names), _functions_of(plan.loss))
        tok = uuid.uuid4().hex[:12]
        shared_d = dask.delayed(shared, pure=False, name=f"tensorlang-shared-{tok}")
        blocks = {n: batched[n].to_delayed().reshape(-1) for n in names}
        starts = np.concatenate([[0], np.cumsum(rows)]).astype(int)
        tasks = []  # (chunk index, delayed result) for non-empty chunks
        for j, r in enumerate(rows):
            if r == 0:
                continue
            d = dask.delayed(_chunk, pure=False)(
                spec, j, int(starts[j]), int(starts[j + 1]), shared_d, *[blocks[n][j] for n in names],
                dask_key_name=(f"tensorlang-chunk-{tok}", j),
            )
            tasks.append((j, d))
        if not tasks:  # B = 0: a valid sum of no terms; nothing to shard, so computed here
            return self._empty(shared, batched)
        # Each chunk's (value, shared gradients) summary is taken where the chunk
        # ran, so the tree reduction moves a few small arrays between workers,
        # never the chunk's batched gradient (n floats per signal).
        level = [dask.delayed(_split, pure=False)(spec, d, dask_key_name=(f"tensorlang-split-{tok}", j))
                 for j, d in tasks]
        depth = 0
        while len(level) > 1 or depth == 0:
            level = [
                dask.delayed(_combine, pure=False)(*level[i:i + self.split_every],
                                                   dask_key_name=(f"tensorlang-sum-{tok}-{depth}", i))
                for i in range(0, len(level), self.split_every)
            ]
            depth += 1
        client = _current_client()
        if client is not None:
            *done, top = client.persist([d for _, d in tasks] + level)
            value, shared_g, dtypes = client.compute(top).result()  # raises if any chunk failed
        else:
            *done, top = dask.persist(*[d for _, d in tasks], *level)
            value, shared_g, dtypes = top.compute()
        return value, self._gradients(spec, rows, dict(zip([j for j, _ in tasks], done)), shared_g, dtypes)

    def _empty(self, shared, batched):
        """An empty batch: the value (0) and gradients from the local callable on the
        empty arrays, a batched input's gradient as a dask array chunked like it.
        (Refused before session 12, though tl.value_and_grad computes it.)"""
        value, grads = _PROGRAMS[self.key](**shared, **{n: np.asarray(x.compute()) for n, x in batched.items()})
        grads = [grads] if self.single else list(grads)
        out = [da.from_array(g, chunks=batched[x.name].chunks) if x.name in batched else g
               for x, g in zip(self.xs, grads)]
        return value, (out[0] if self.single else tuple(out))

    def _gradients(self, spec, rows, done, shared_g, dtypes):
        out, s_it, b_it = [], iter(shared_g), iter(dtypes)
        for pos, x in enumerate(self.xs):
            if x.name not in spec.batched:
                out.append(next(s_it))
                continue
            dtype = np.dtype(next(b_it))
            trailing = spec.trailing[spec.batched.index(x.name)]
            parts = [
                da.from_delayed(dask.delayed(_pick, pure=True)(done[j], pos), shape=(r, *trailing), dtype=dtype)
                if j in done else da.zeros((0, *trailing), dtype=dtype)
                for j, r in enumerate(rows)
            ]
            out.append(da.concatenate(parts, axis=0) if len(parts) > 1 else parts[0])
        return out[0] if self.single else tuple(out)


def _shape(t: Type) -> tuple:
    out = []
    while isinstance(t, TensorT):
        out.append(t.extent)
        t = t.elem
    return tuple(out)


def value_and_grad(loss: Expr, wrt, *, batch, mode: str = "sparse", split_every: int = 8):
    """``value_and_grad(loss, wrt, batch=B)(**inputs) -> (value, grads)`` on Dask.

    Batched inputs (leading extent ``B``) are ``dask.array``s chunked along
    ``B`` (NumPy arrays are taken as one chunk); the others are NumPy arrays.
    The value is a float, a shared input's gradient a NumPy array, a batched
    input's gradient a ``dask.array`` chunked like the input (computed and
    held by the cluster).  ``grads`` is a tuple when ``wrt`` is a list.
    """
    return _Sharded(loss, wrt, batch, mode, split_every)


def grad(loss: Expr, wrt, *, batch, mode: str = "sparse", split_every: int = 8):
    """``grad(loss, wrt, batch=B)(**inputs) -> grads`` on Dask (see :func:`value_and_grad`)."""
    vg = _Sharded(loss, wrt, batch, mode, split_every)

    def g(**inputs):
        return vg(**inputs)[1]

    g.plan = vg.plan
    return g

