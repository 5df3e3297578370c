"""Derivatives and compiled execution of loop programs (issue #17 items 1-3;
the paper's Section 6 applied per part, as JAX differentiates ``scan``).

A program whose one loop is at top level is cut by ``loops.split`` into
``pre`` (the initial state), ``body`` (one step: the state and ``t`` are
inputs) and ``post`` (consumes the final state).  Each part is loop-free,
so the existing passes differentiate it and the backend compiles it:

* forward mode (``jvp``): the body's total derivative ``D⟦body⟧`` (Fig. 13)
  with respect to the state and the loop-invariant inputs; the loop carries
  ``(state, tangent)``;
* reverse mode (``grad``, ``value_and_grad``, ``vjp``): the body's adjoint
  ``D^T⟦body⟧`` (Figs. 14-16) with respect to the state and the inputs; the
  reverse sweep runs it for ``t = T-1 … 0`` on states restored or recomputed
  by the checkpoint schedule (``loops.schedule``), and the inputs'
  cotangents accumulate across steps; both sweeps run as Numba step
  programs over the schedule's instruction table where they apply
  (backend/loop_kernel.py), else as validated calls per step;
* ``compile``: the three kernels, the body called ``T`` times with ``T`` a
  runtime value (kernel size and compile time do not depend on ``T``).

The body's loop-invariant terms (``loops.hoist_invariants``) are computed
once; their cotangents accumulate over the steps like an input's and are
pulled back through the terms' adjoints once, after the reverse sweep.

An input read only as ``f[±t + c, …]`` (``f[t]``, ``f[t + 1]``,
``f[T - 1 - t]``) is passed to the body as its rows (``loops.row_inputs``):
the body's adjoint returns an ``[n]`` cotangent per row, added into that
row of ``f``'s ``[T][n]`` cotangent, so one gradient costs ``O(Tn)`` for
it, not ``O(T²n)``; jvp gives the body the tangent's rows.

The cost of the reverse sweep is certified per policy by
:func:`tensorlang.loop_cost.adjoint_cost`: ``cost(pre^T) + cost(inv^T) + T·(cost(body^T) + A) +
R·cost(body) + cost(post^T)`` with ``R`` the schedule's recomputed steps and
``A`` the additions of one step's input cotangents into their accumulators,
and the peak number of stored states.
"""

from __future__ import annotations

import threading

import numpy as np

from .errors import InputError, TensorLangError
from .ir import REAL, Var, input_vars
from .isl_bridge import sizes_may_be_zero
from .backend.loop_kernel import LoopPart, LoopProgram, Part as _Part
from .loops import normalize_checkpoint, row_at, schedule, t_value
from .typecheck import type_of, wrt_inputs as _wrt
from .loop_values import _check_given, _in_precision, _tadd, _tzeros, _unpack


# --------------------------------------------------------------------------
# Reverse mode


class _Reverse:
    """``vjp`` of a loop program w.r.t. ``xs`` (inputs), for a cotangent of its output."""

    def __init__(self, lp: LoopProgram, xs: list, cot_name: str):
        self.lp, self.xs = lp, xs
        sp = lp.sp
        names = {v.name for v in input_vars(lp.expr)} | {sp.state.name, sp.final.name}

        def fresh(base):
            while base in names:
                base = "_" + base
            names.add(base)
            return base

        self.cot = cot_name
        self._cot_type, self._given = {cot_name: type_of(lp.expr)}, {}  # the cotangent's check (``_check_given``)
        self.dstate = fresh("loop_dstate")
        # the values the sweeps compute (loop_kernel.Part's ``internal``): never refused for NaN/inf
        internal = set(lp.internal) | {self.dstate}

        def vjp_part(prog, wrt, cot):
            wrt = [w for w in wrt if w in set(input_vars(prog)) or w is prog]
            if not wrt:
                return None, []
            if isinstance(prog, Var):  # the identity: the cotangent itself
                return "identity", wrt
            return _Part(adjoint(prog, wrt, cotangent=cot, mode=lp.mode), lp.mode, lp.compile_fn, internal), wrt

        if isinstance(lp.post, LoopPart):  # the next loops (loops.chain): their own reverse sweeps, run first
            pxs = [sp.final] + [x for x in xs if x in set(input_vars(sp.post))]
            self.post_vjp = (_Reverse(lp.post.program, pxs, cot_name), pxs)
        else:
            self.post_vjp = vjp_part(sp.post, [sp.final] + xs, cot_name)
        # hoisted loop-invariant terms that depend on xs: the body's adjoint
        # accumulates their cotangents over the steps, pulled back once after
        hs = [(v, e) for v, e in sp.hoisted if set(input_vars(e)) & set(xs)] if lp.body is not None else []
        self.hoisted = [v for v, _ in hs]
        # a row input (loops.row_inputs: f[±t + c] at step t) stands for f in the body: an [n] cotangent per step
        self.row_of = {row.name: (f, idx) for row, f, idx in sp.rows if f in xs}
        bxs = [row for row, f, _ in sp.rows if f in xs] + xs
        self.body_vjp = vjp_part(sp.body, [sp.state] + bxs + self.hoisted, self.dstate) if lp.body is not None else (None, [])
        self.inv_vjp = [(v, fresh("d" + v.name)) for v, _ in hs]
        internal |= {c for _, c in self.inv_vjp}
        self.inv_vjp = [(v, c, vjp_part(e, xs, c)) for (v, c), (_, e) in zip(self.inv_vjp, hs)]
        self.pre_vjp = vjp_part(sp.pre, xs, self.dstate)
        # the per-thread workspaces (``_buffers``); made here, not on first use,
        # so two threads' first calls cannot replace each other's
        self._pool = threading.local()
        self._signs: dict = {}  # the signed adjoint's sign inputs (``_signed_part``)

    def _reverse_program(self):
        """The body adjoint's step kernel with ``rev_prog`` (backend/loop_kernel.py), or None."""
        if not hasattr(self, "_rprog"):
            from .backend.loop_kernel import reverse_program

            part, wrt = self.body_vjp
            ok = part not in (None, "identity") and wrt[0] is self.lp.sp.state
            fwd = self.lp.step_program() if ok else None
            self._rprog = None
            if fwd is not None:
                spart, signs = self._signed_part(part, len(wrt))
                self._rprog = reverse_program(spart, fwd, self.lp.sp, wrt, self.dstate, signs)
                if self._rprog is None and spart is not part:  # (the signed kernel has no step form)
                    spart, signs = part, ((), {})
                    self._rprog = reverse_program(part, fwd, self.lp.sp, wrt, self.dstate)
                self._rpart, self._signs = spart, signs[1]  # (the reverse step's kernel: for the tests)
        return self._rprog

    def _signed_part(self, part, nwrt):
        """``(part, signs)``: the body's adjoint with its state-cotangent
        leaves that are ``±`` another leaf returned as that leaf and their
        signs carried by the step program (``backend/step_signs.py``; the
        wave's ``a <- -b`` written no more), or ``part`` as is."""
        from .backend import step_signs
        from .backend.loop_kernel import state_leaves

        leaves = state_leaves(self.lp.sp.state.type)
        ds = next((v for v in input_vars(part.prog) if v.name == self.dstate), None)
        avoid = {v.name for v in input_vars(self.lp.expr)} | set(self.lp.internal)
        got = (step_signs.signed_program(part.prog, ds, leaves, nwrt, avoid)
               if step_signs.ENABLED and ds is not None else None)
        if got is None:
            return part, ((), {})
        prog, found, names = got
        from . import bounds

        bounds.inherit(prog, part.prog)
        internal = set(self.lp.internal) | {self.dstate} | set(names.values())
        return _Part(prog, self.lp.mode, self.lp.compile_fn, internal), (found, names)

    def _buffers(self, k: int, shape):
        """Pool ``k`` of the state's leaf buffers (checkpoints and scratch
        states, ``step_programs.make_pools``): one float64 array, kept per thread for the next call of the same shape
        (fresh memory costs page faults comparable to the sweep's arithmetic)."""
        pool = getattr(self._pool, "bufs", None)
        if pool is None:
            pool = self._pool.bufs = {}
        got = pool.get(k)
        if got is None or got.shape != shape:
            pool[k] = None  # the old buffer goes first
            got = np.empty(shape)
            if got.nbytes <= KEEP_BUFFER_BYTES:
                pool[k] = got
        return got

    @staticmethod
    def _run(part_wrt, values, sizes, cot_name, cot):
        part, wrt = part_wrt
        if part is None:
            return {}
        if part == "identity":
            return {wrt[0].name: cot}
        values[cot_name] = cot
        return dict(zip((w.name for w in wrt), _unpack(part(values, sizes), len(wrt))))

    def _sweeps(self, values, sizes, s0, policy, T, finish, acc):
        """(value, the initial state's cotangent) with both sweeps in Numba
        (``fwd_prog`` up to the final state, ``rev_prog`` after it, over the
        schedule's table), or None where the step programs do not apply."""
        from .backend import loop_kernel as LK

        lp, sp = self.lp, self.lp.sp
        got = lp.table_args(values, sizes, s0) if T >= LK.DRIVER_MIN_STEPS else None
        rp = self._reverse_program() if got is not None else None
        if rp is None:
            return None
        s0l, fargs = got
        leaves = LK.state_leaves(sp.state.type)
        ph = LK.build_value(sp.state.type, list(s0l))  # placeholders: the programs pass their own leaves
        signs = {nm: 1.0 for nm in self._signs.values()}  # placeholders: the program passes each leaf's
        rargs = LK.kernel_args(rp.base, {**values, sp.state.name: ph, self.dstate: ph, **signs}, sizes,
                               LK.t_name(sp), LK.row_sources(sp, sizes))
        if rargs is None:
            return None
        fp = lp.step_program()
        fcode, rcode, final, npool = _tables(policy, T, fp.groups, fp.alias)
        bufs = LK.make_pools(fp.groups, s0l, npool, self._buffers)
        fp.run("fwd_prog", lp.threads, fcode, *s0l, *bufs, *fargs)
        # (the buffers are reused: the value must not be one)
        value, ds = finish(LK.build_value(sp.state.type, [LK.leaf_value(bufs, fp.groups, s0l, k, p, copy=True)
                                                          for k, p in enumerate(final)]))
        # carried and overwritten: private copies, in the cotangent pools (step_programs.cotangent_pools)
        dpools, ids, sgs = LK.cotangent_pools(fp.groups, [np.asarray(LK.leaf(ds, p), dtype=np.float64)
                                                          for p, _ in leaves])
        xs_ = rdrv_xs(self)
        # the running sums go in, so every policy adds in the same order (t = T-1 … 0)
        xs_ = [self.row_of[x.name][0] if x.name in self.row_of else x for x in xs_]
        # private copies; a row's accumulator is its whole input's, one array for all of f's rows
        mine: dict = {}
        for x in xs_:
            if x.name not in mine:
                a = _tzeros(x.type, sizes) if acc[x.name] is None else acc[x.name]
                mine[x.name] = np.array(a, dtype=np.float64) if np.ndim(a) else np.float64(a)
        accs = [mine[x.name] for x in xs_]
        out = rp.run("rev_prog", lp.threads, rcode, *s0l, *bufs, *dpools, ids, sgs, *accs, *fargs, *rargs)
        for x, a in zip(xs_, out):
            acc[x.name] = float(a) if np.ndim(a) == 0 else a
        return value, LK.build_value(sp.state.type, LK.cotangent_leaves(fp.groups, dpools, ids, sgs))

    def _steps(self, values, sizes, s0, sch, finish, add, acc):
        """(value, the initial state's cotangent): the schedule's actions one
        by one from Python, each step a validated call."""
        lp, sp = self.lp, self.lp.sp
        slots: dict = {}
        cur, ds, value = s0, None, None
        owned: set = set()  # the row inputs' accumulators, private copies written in place
        for a in sch.actions:
            op = a[0]
            if op == "advance":
                cur = lp.advance(values, sizes, cur, a[1], a[2])
            elif op == "store":
                slots[a[1]] = cur  # kernels return fresh arrays: no copy needed
            elif op == "restore":
                cur = slots[a[1]]
            elif op == "final":
                value, ds = finish(cur)
            else:  # reverse step t at state cur
                t = a[1]
                values[sp.state.name] = cur
                lp.set_rows(values, sizes, t)
                sz = sizes if sp.t_size is None else {**sizes, sp.t_size.name: t_value(t)}
                got = self._run(self.body_vjp, values, sz, self.dstate, ds)
                for rname, (f, idx) in self.row_of.items():  # its row of f's cotangent (loops.row_inputs)
                    r = got.pop(rname, None)
                    if r is None:
                        continue
                    if f.name not in owned:
                        a = acc[f.name]
                        acc[f.name] = _tzeros(f.type, sizes) if a is None else np.array(a, dtype=np.float64)
                        owned.add(f.name)
                    acc[f.name][row_at(idx, sp.loop.ivar, t, sizes)] += r
                nds = got.pop(sp.state.name, None)
                add(got)
                ds = nds if nds is not None else _tzeros(sp.state.type, sizes)
        return value, ds

    def __call__(self, inputs: dict, cot, policy=None):
        """(value, cotangents of xs) for the output cotangent ``cot``."""
        lp, sp = self.lp, self.lp.sp
        sizes = lp.sizes(inputs)
        _check_given({self.cot: cot}, self._cot_type, sizes, memo=self._given)
        T = lp.steps(sizes)
        values = dict(inputs)
        acc = {x.name: None for x in self.xs + self.hoisted}

        def add(d):
            for k, v in d.items():
                if k in acc:
                    acc[k] = v if acc[k] is None else _tadd(acc[k], v)

        def finish(sT):
            """The finishing part at the final state: (value, the state's cotangent)."""
            values[sp.final.name] = sT
            if isinstance(lp.post, LoopPart):  # the next loops' sweeps: value and cotangents in one call
                nested, pxs = self.post_vjp
                value, gs = nested(lp.post.kwargs(values, sizes), cot, policy)
                got = {x.name: g for x, g in zip(pxs, gs)}
            else:
                value = lp.post(values, sizes)
                got = self._run(self.post_vjp, values, sizes, self.cot, cot)
            ds = got.pop(sp.final.name, None)
            add(got)
            return value, (_tzeros(sp.state.type, sizes) if ds is None else ds)

        s0 = lp.pre(values, sizes)
        lp.invariants(values, sizes, T)
        policy = None if policy is None else normalize_checkpoint(policy)  # None: each loop its own
        mine = sp.checkpoint if policy is None else policy
        if T == 0:
            value, ds = finish(s0)
        else:
            got = self._sweeps(values, sizes, s0, mine, T, finish, acc)
            if got is None:
                value, ds = self._steps(values, sizes, s0, schedule(mine, T), finish, add, acc)
            else:
                value, ds = got
        for v, c, part in self.inv_vjp:  # the hoisted terms' cotangents, pulled back once
            if acc[v.name] is not None:
                add(self._run(part, values, sizes, c, acc[v.name]))
        add(self._run(self.pre_vjp, values, sizes, self.dstate, ds))
        out = []
        for x in self.xs:
            g = acc[x.name]
            out.append(_tzeros(x.type, sizes) if g is None else g)
        return value, out


def adjoint(prog, wrt, *, cotangent: str, mode: str = "sparse"):
    """``simplify(D^T⟦normalize(prog)⟧)`` of a loop-free part (as ``autodiff.adjoint``,
    which imports this module for loop programs, so it is not imported back);
    ``mode="naive"``: the dense transposition, unsimplified."""
    from . import bounds
    from .backend.derived_cache import Entry
    from .driver import route

    seed = Var(cotangent, 0, type_of(prog))
    dt = "naive_adjoint" if mode == "naive" else "adjoint"  # the stage list's routes (tensorlang.driver)
    # a warm process reads the part's adjoint from the derived-program cache (issue 14 item 6)
    out = Entry("loop part adjoint", prog, list(wrt), {"mode": mode, "cotangent": cotangent}, (seed,)).derive(
        lambda: route("adjoint naive" if mode == "naive" else "adjoint").run(prog, **{dt: {"wrt": list(wrt),
                                                                                           "seed": seed}}))
    bounds.inherit(out, prog)
    return out


def derivative(prog, wrt):
    """``simplify(D⟦prog⟧)`` of a loop-free part; tangents are named ``d<name>``."""
    from . import bounds
    from .backend.derived_cache import Entry
    from .driver import route
    from .passes.total_derivative import tangent_inputs

    sigma = tangent_inputs(prog, list(wrt))
    out = Entry("loop part derivative", prog, list(wrt), {}, tuple(sigma.values())).derive(
        lambda: route("derivative").run(prog, derivative={"sigma": sigma}))
    bounds.inherit(out, prog)
    return out


def _program(expr, stage, mode, threads=None, internal=()):
    from .driver import compile as tl_compile  # each part through the route "compile"

    return LoopProgram(expr, stage, mode, tl_compile, threads, internal)


# Checkpoint buffers up to this size stay allocated between calls (heat,
# 256², T = 1000, "all": 0.21 s per gradient kept, 0.25 s allocated per
# call); larger ones are allocated per call and freed after it.
KEEP_BUFFER_BYTES = 1 << 30

_TABLES: dict = {}


def _tables(policy, T: int, groups=(0,), alias=()):
    """``(forward table, reverse table, s_T's buffers, pool sizes)``:
    ``loop_kernel.compile_schedule`` of a policy's schedule at ``T`` steps
    (``groups``, ``alias``: the body's step kernel's),
    remembered (a few entries; the schedule's action list itself is not
    kept: building it took 1 ms per gradient at T = 1000, 1% of heat's)."""
    from .backend.loop_kernel import compile_schedule

    key = (policy, T, tuple(groups), tuple(alias))
    got = _TABLES.get(key)
    if got is None:
        if len(_TABLES) > 32:
            _TABLES.clear()
        sch = schedule(policy, T)
        got = _TABLES[key] = compile_schedule(sch, T, groups, alias)
    return got


def rdrv_xs(rev: _Reverse) -> list:
    """The inputs whose cotangents the body's adjoint returns after the state's."""
    return rev.body_vjp[1][1:]


def _zero_size_guard(fn, rebuild, sizes_of):
    """``fn``, except at a call where some size is 0: the loop's parts were
    derived with their predicates decided for sizes >= 1, so such a call runs
    the callable ``rebuild()`` makes inside ``isl_bridge.sizes_may_be_zero``
    (built once; as ``derived_program._Program`` does for loop-free programs)."""
    alt = []

    def call(**inputs):
        if not any(v < 1 for v in sizes_of(inputs).values()):
            return fn(**inputs)
        with sizes_may_be_zero():
            if not alt:
                alt.append(rebuild())
            return alt[0](**inputs)

    call.loop_program = fn.loop_program
    return call


def _lp_sizes(lp, skip=()):
    """The sizes a call's inputs give the loop program (no copies; the call
    validates them), remembered per input signature (``backend/dispatch.py``:
    dtypes, shapes and int values decide the sizes), so that
    ``prepare_inputs`` runs once per signature, not on every call; inputs
    without a signature (lists, sparse matrices, ...) take it every call."""
    from .backend.dispatch import remember, signature
    from .evaluator import prepare_inputs

    plans: dict = {}

    def sizes(inputs):
        sig = signature(inputs)
        got = plans.get(sig) if sig is not None else None
        if got is not None:
            return got
        try:
            _, got, _, _ = prepare_inputs(lp.expr, {k: v for k, v in inputs.items() if k not in skip},
                                          exact=False, compressed=True)
        except TensorLangError:
            return {}  # the call itself reports the input error (not remembered: it is raised every time)
        if sig is not None:
            remember(plans, sig, got)
        return got

    return sizes


def grad(loss, wrt, *, mode: str = "sparse", checkpoint=None, threads=None):
    g = _grad(loss, wrt, mode=mode, checkpoint=checkpoint, threads=threads)
    rev = g.loop_program
    return _zero_size_guard(g, lambda: _grad(loss, wrt, mode=mode, checkpoint=checkpoint, threads=threads),
                            _lp_sizes(rev.lp, (rev.cot,)))


def _grad(loss, wrt, *, mode: str = "sparse", checkpoint=None, threads=None):
    if type_of(loss) is not REAL:
        raise TensorLangError(
            f"grad needs a scalar loss, but the program has type {type_of(loss)}; use tl.vjp for non-scalar outputs"
        )
    xs, single = _wrt(wrt, loss, reverse=True)
    rev = _Reverse(_program(loss, "grad", mode, threads), xs, _cot_name(loss))

    def g(**inputs):
        _, gs = rev(inputs, 1.0, checkpoint)
        return _in_precision(gs[0] if single else tuple(gs), loss, inputs)

    g.loop_program = rev
    return g


def value_and_grad(loss, wrt, *, mode: str = "sparse", checkpoint=None, threads=None):
    vg = _value_and_grad(loss, wrt, mode=mode, checkpoint=checkpoint, threads=threads)
    rev = vg.loop_program
    return _zero_size_guard(vg, lambda: _value_and_grad(loss, wrt, mode=mode, checkpoint=checkpoint, threads=threads),
                            _lp_sizes(rev.lp, (rev.cot,)))


def _value_and_grad(loss, wrt, *, mode: str = "sparse", checkpoint=None, threads=None):
    g = _grad(loss, wrt, mode=mode, checkpoint=checkpoint, threads=threads)
    rev = g.loop_program
    single = not isinstance(wrt, (list, tuple))

    def vg(**inputs):
        v, gs = rev(inputs, 1.0, checkpoint)
        return _in_precision((v, (gs[0] if single else tuple(gs))), loss, inputs)

    vg.loop_program = rev
    return vg


def vjp(expr, wrt, *, mode: str = "sparse", cotangent: str = "dy", checkpoint=None, threads=None):
    f = _vjp(expr, wrt, mode=mode, cotangent=cotangent, checkpoint=checkpoint, threads=threads)
    return _zero_size_guard(f, lambda: _vjp(expr, wrt, mode=mode, cotangent=cotangent, checkpoint=checkpoint,
                                            threads=threads), _lp_sizes(f.loop_program.lp, (cotangent,)))


def _vjp(expr, wrt, *, mode: str = "sparse", cotangent: str = "dy", checkpoint=None, threads=None):
    xs, single = _wrt(wrt, expr, reverse=True)
    if cotangent in {v.name for v in input_vars(expr)}:
        raise TensorLangError(f"the cotangent name {cotangent!r} is already an input of the program; pass cotangent=...")
    rev = _Reverse(_program(expr, "vjp", mode, threads), xs, cotangent)

    def f(**inputs):
        if cotangent not in inputs:
            raise InputError(f"missing input(s) [{cotangent!r}] (the output cotangent)")
        kw = dict(inputs)
        cot = kw.pop(cotangent)
        _, gs = rev(kw, cot, checkpoint)
        return _in_precision(gs[0] if single else tuple(gs), expr, inputs, {cotangent: type_of(expr)})

    f.loop_program = rev
    return f


def _cot_name(expr) -> str:
    names = {v.name for v in input_vars(expr)}
    name = "dy"
    while name in names:
        name = "_" + name
    return name


# --------------------------------------------------------------------------
# Forward mode


def jvp(expr, wrt, *, mode: str = "sparse", _internal=()):
    """``jvp(expr, wrt)(**inputs, dx=...) -> (value, tangent)``: the loop carries (state, tangent).
    ``_internal``: inputs that are an earlier loop's values (loops.chain), never refused for NaN/inf."""
    f = _jvp(expr, wrt, mode=mode, internal=_internal)
    xs, _ = _wrt(wrt, expr)
    return _zero_size_guard(f, lambda: _jvp(expr, wrt, mode=mode, internal=_internal),
                            _lp_sizes(f.loop_program, {"d" + x.name for x in xs}))


def _jvp(expr, wrt, *, mode: str = "sparse", internal=()):
    xs, _ = _wrt(wrt, expr)
    lp = _program(expr, "jvp", mode, internal=internal)
    sp = lp.sp
    tnames = {x.name: "d" + x.name for x in xs}
    dstate = "d" + sp.state.name
    dfinal = "d" + sp.final.name

    # the values the loop computes and their tangents (loop_kernel.Part's ``internal``)
    internal = lp.internal | {"d" + nm for nm in lp.internal}
    ttypes = {"d" + x.name: x.type for x in xs}
    given_memo: dict = {}  # the tangents' validated signatures (``_check_given``)

    def dpart(prog, wrt_):
        wrt_ = [w for w in wrt_ if w in set(input_vars(prog)) or w is prog]
        if not wrt_:
            return None
        if isinstance(prog, Var):
            return "identity"
        return _Part(derivative(prog, wrt_), mode, lp.compile_fn, internal)

    dpre = dpart(sp.pre, xs)
    hs = [(v, e) for v, e in sp.hoisted if set(input_vars(e)) & set(xs)] if lp.body is not None else []
    dinv = [(v, dpart(e, xs)) for v, e in hs]  # the hoisted terms' tangents, computed once
    rows = [row for row, f, _ in sp.rows if f in xs]  # f[±t + c] at step t (loops.row_inputs), tangent df[±t + c]
    dbody = dpart(sp.body, [sp.state] + rows + xs + [v for v, _ in hs]) if lp.body is not None else None
    if isinstance(lp.post, LoopPart):  # the next loops (loops.chain): their own forward loops with tangents
        pxs = [sp.final] + [x for x in xs if x in set(input_vars(sp.post))]
        dpost = jvp(sp.post, pxs, mode=mode, _internal=lp.internal)
    else:
        dpost = dpart(sp.post, [sp.final] + xs)
    for n in tnames.values():
        if n in {v.name for v in input_vars(expr)}:
            raise TensorLangError(f"the tangent name {n!r} is already an input of the program")

    def run(part, prog, values, sizes, zero_t):
        if part is None:
            return _tzeros(zero_t, sizes)
        if part == "identity":
            return values["d" + prog.name]
        return part(values, sizes)

    def f(**inputs):
        missing = [n for n in tnames.values() if n not in inputs]
        if missing:
            raise InputError(f"missing input(s) {missing} (the tangents)")
        prim = {k: v for k, v in inputs.items() if k not in set(tnames.values())}
        sizes = lp.sizes(prim)
        _check_given(inputs, ttypes, sizes, internal, given_memo)
        values = dict(inputs)
        s = lp.pre(values, sizes)
        ds = run(dpre, sp.pre, values, sizes, sp.state.type)
        lp.invariants(values, sizes, lp.steps(sizes))
        for v, part in dinv:
            if lp.steps(sizes) > 0:
                values["d" + v.name] = run(part, v, values, sizes, v.type)
        for t in range(lp.steps(sizes)):
            values[dstate] = ds
            sz = sizes if sp.t_size is None else {**sizes, sp.t_size.name: t_value(t)}
            values[sp.state.name] = s
            lp.set_rows(values, sizes, t)
            lp.set_rows(values, sizes, t, "d")
            ds = run(dbody, sp.body, values, sz, sp.state.type)
            s = lp._step(lp.body, values, sizes, s, t)
        values[sp.final.name] = s
        values[dfinal] = ds
        if isinstance(lp.post, LoopPart):
            kw = lp.post.kwargs(values, sizes)
            kw.update({"d" + x.name: values["d" + x.name] for x in pxs})
            return _in_precision(dpost(**kw), expr, inputs, ttypes)
        return _in_precision((lp.post(values, sizes), run(dpost, sp.post, values, sizes, type_of(expr))), expr, inputs,
                             ttypes)

    f.loop_program = lp
    return f
