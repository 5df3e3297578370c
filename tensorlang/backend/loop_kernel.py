"""Compiled execution of loop programs (issue #17 item 3).

``loops.split`` cuts a program at its top-level loop into ``pre``, ``body``
and ``post``; each is compiled to its own kernel by ``tl.compile``, and the
body's kernel runs ``T`` times with ``T`` a runtime value, so the kernels'
size and compile time do not depend on ``T``.  With several loops
(``loops.chain``) ``post`` holds the next loops and runs as a loop program
of its own (:class:`LoopPart`): the loops run one after the other, each its
own sequential loop with its own step programs, the loop-free segments
between them as kernels.

A whole sweep runs in one Numba call (``step_programs.py``): the
checkpoint schedule becomes a table of instructions, run by a loop compiled
next to a variant of the body's kernel that writes into a buffer it is
given, so the state (a tensor or nested pairs of tensors: a pool of
buffers per leaf type) is double-buffered and no step allocates or returns
to Python; a leaf the body carries over unchanged (a pair state's
``(u_prev, u) -> (u, u_next)``) shares its buffer instead of being copied.
The inputs are validated once (names, shapes, sizes, finiteness).  With
``threads=k`` (k > 1) the programs call the kernels' parallel variants.
Where this does not apply (a scalar leaf in the state, float32 inputs,
relation data, a kernel whose proof needs positive sizes, runs shorter than
``DRIVER_MIN_STEPS``) the steps run as validated calls from Python, one per
step, with the same operations.
"""

from __future__ import annotations

import functools

import numpy as np

from ..ir import Var, input_vars, size_vars
from ..loops import Split, has_loop, row_at, split, t_value
from ..typecheck import check_program
# the step programs (their own module); names re-exported for loop_autodiff and the tests
from .step_programs import (  # noqa: F401
    FWD,
    IN,
    REV,
    STEP_VERSION,
    StepKernel,
    build_value,
    compile_schedule,
    cotangent_leaves,
    cotangent_pools,
    forward_program,
    forward_table,
    kernel_args,
    leaf,
    leaf_value,
    make_pools,
    precision_of,
    result_leaves,
    reverse_program,
    row_expr,
    row_sources,
    state_leaves,
    t_name,
)


# The step programs are compiled (seconds, once per body kernel: then
# Numba's disk cache) only for runs of at least this many steps; shorter
# runs are cheaper as per-step validated calls.
DRIVER_MIN_STEPS = 32


class Part:
    """One loop-free program, run compiled on the values it names."""

    def __init__(self, prog, mode: str, compile_fn, internal=()):
        self.prog = prog
        self.var = prog if isinstance(prog, Var) and prog.uid == 0 else None
        self.inputs = [v.name for v in input_vars(prog)]
        self.sizes = [s.name for s in size_vars(prog)]
        if self.var is None:
            check_program(prog)
            self.fn = compile_fn(prog, mode=mode)
            # ``internal``: the loop's own values (state, final state, hoisted terms, their
            # tangents and cotangents), which overflow may make infinite, as in a loop-free
            # program; the user's inputs are checked (``LoopProgram.sizes``, or here)
            if hasattr(self.fn, "unchecked"):
                self.fn.unchecked = frozenset(internal) & set(self.inputs)

    def __call__(self, values: dict, sizes: dict):
        if self.var is not None:
            return values[self.var.name]
        kw = {k: values[k] for k in self.inputs}
        for s in self.sizes:
            kw[s] = sizes[s]
        if self.fn is None:
            from ..evaluator import evaluate

            return evaluate(self.prog, **kw)
        return self.fn(**kw)


class LoopPart:
    """The ``post`` of a program with several loops (``loops.chain``): a loop
    program of the inputs and the previous loop's final state, run as one
    (its own split, kernels and step programs), on the values it names."""

    def __init__(self, prog, mode: str, compile_fn, threads=None, internal=()):
        self.prog = prog
        self.var = None
        self.program = LoopProgram(prog, "compile", mode, compile_fn, threads, internal)
        self.inputs = [v.name for v in input_vars(prog)]
        self.sizes = [s.name for s in size_vars(prog)]

    def kwargs(self, values: dict, sizes: dict) -> dict:
        kw = {k: values[k] for k in self.inputs}
        for s in self.sizes:
            kw[s] = sizes[s]
        return kw

    def __call__(self, values: dict, sizes: dict):
        return self.program.forward(self.kwargs(values, sizes))


class LoopProgram:
    """A loop program's parts, its sizes and its compiled primal."""

    def __init__(self, expr, stage: str, mode: str, compile_fn, threads=None, internal=()):
        from .. import bounds

        self.threads = threads  # None or 1: serial step programs; k > 1: their parallel variants

        check_program(expr)
        self.constraints = bounds.check_program(expr)
        self.expr = expr
        self.mode = mode
        # every part's kernel (pre, body, post, hoisted terms, and the derivatives' parts that
        # loop_autodiff builds with it) runs on the program's threads: threads=1 serial, as the
        # step programs; a part compiled with threads=None chose serial or parallel per call
        # (autothreads.py), so a threads=1 program's result changed between its calls
        self.compile_fn = compile_fn if threads is None else functools.partial(compile_fn, threads=threads)
        compile_fn = self.compile_fn
        self.sp: Split = split(expr, stage)
        sp = self.sp
        # the values the loop computes (``Part``'s ``internal``), with ``internal``: those of
        # an earlier loop this one reads (loops.chain: its final state)
        self.internal = frozenset(internal) | {sp.state.name, sp.final.name} | {v.name for v, _ in sp.hoisted}
        self.pre = Part(self.sp.pre, mode, compile_fn, self.internal)
        # T = 0 (a constant): the body never runs, and may not even compile
        # (``forcing[t]`` with ``forcing : [0]…`` reads out of range at every t)
        never = self.sp.steps.is_const and self.sp.steps.const == 0
        self.body = None if never else Part(self.sp.body, mode, compile_fn, self.internal)
        # several loops (loops.chain): post holds the next ones, a loop program of its own
        self.post = (LoopPart(self.sp.post, mode, compile_fn, threads, self.internal) if has_loop(self.sp.post)
                     else Part(self.sp.post, mode, compile_fn, self.internal))
        # the body's loop-invariant terms (loops.hoist_invariants), each its own kernel
        self.inv = [] if never else [(v, Part(e, mode, compile_fn, self.internal)) for v, e in self.sp.hoisted]

    def invariants(self, values: dict, sizes: dict, T: int) -> None:
        """The hoisted terms' values into ``values``, once, when the body runs
        (at ``T = 0`` a term may even read out of range: the body never does)."""
        if T > 0:
            for v, part in self.inv:
                values[v.name] = part(values, sizes)

    def sizes(self, inputs: dict) -> dict:
        from .. import bounds
        from ..evaluator import prepare_inputs

        _, sizes, _, _ = prepare_inputs(self.expr, inputs, exact=False, finite_elsewhere=self.internal)
        bounds.check_sizes(self.constraints, sizes)  # every access of every step is in range
        return sizes

    def steps(self, sizes) -> int:
        return self.sp.steps.evaluate(sizes)

    def set_rows(self, values: dict, sizes: dict, t: int, prefix: str = "") -> None:
        """The per-step rows ``loop_row_f = f[±t + c]`` (``loops.row_inputs``)
        into ``values`` (``prefix="d"``: the tangents' rows, ``df[±t + c]``)."""
        for row, f, idx in self.sp.rows:
            src = values.get(prefix + f.name)
            if src is None:
                continue
            if not isinstance(src, np.ndarray):  # once per call, not per step
                src = values[prefix + f.name] = np.asarray(src)
            values[prefix + row.name] = src[row_at(idx, self.sp.loop.ivar, t, sizes)]

    def _step(self, part, values, sizes, state, t):
        values[self.sp.state.name] = state
        self.set_rows(values, sizes, t)
        if self.sp.t_size is not None:
            sizes = {**sizes, self.sp.t_size.name: t_value(t)}
        return part(values, sizes)

    def advance(self, values: dict, sizes: dict, s, t0: int, t1: int):
        """The state after steps ``t0 … t1-1`` from ``s`` (``s_t0``), one validated call per step."""
        for t in range(t0, t1):
            s = self._step(self.body, values, sizes, s, t)
        return s

    def step_program(self):
        """The body's :class:`StepKernel` with ``fwd_prog``, or None (built once)."""
        if not hasattr(self, "_steps"):
            self._steps = None if self.body is None else forward_program(self.body, self.sp)
        return self._steps

    def table_args(self, values: dict, sizes: dict, s0):
        """``(the initial state's leaves as float64 arrays, the body kernel's
        arguments)`` for a step program, or None where it does not apply
        (float32, a scalar leaf, sizes a proof needs positive).  The inputs'
        finiteness is checked here, as the first validated call would."""
        from .dispatch import check_finite, finite_checks

        fp = self.step_program()
        if fp is None:
            return None
        leaves = [leaf(s0, p) for p, _ in state_leaves(self.sp.state.type)]
        if not all(isinstance(x, np.ndarray) and x.ndim > 0 and x.dtype == np.float64 for x in leaves):
            return None
        vals = {**values, self.sp.state.name: s0}
        args = kernel_args(fp.base, vals, sizes, t_name(self.sp), row_sources(self.sp, sizes))
        if args is None:
            return None
        check_finite(vals, tuple(c for c in finite_checks(self.sp.body, vals) if c[0] not in self.internal))
        whole = {f.name: values[f.name] for _, f, _ in self.sp.rows}  # the rows' sources, named as given
        check_finite(whole, finite_checks(self.sp.loop, whole))
        return [np.ascontiguousarray(x) for x in leaves], args

    def forward(self, inputs: dict):
        sizes = self.sizes(inputs)
        values = dict(inputs)
        s0 = self.pre(values, sizes)
        T = self.steps(sizes)
        self.invariants(values, sizes, T)
        got = self.table_args(values, sizes, s0) if T >= DRIVER_MIN_STEPS else None
        if got is not None:
            # the whole run in one Numba call, alternating between scratch buffers
            s0l, args = got
            fp = self.step_program()
            code, final, npool = forward_table(T, fp.groups, fp.alias)
            pools = make_pools(fp.groups, s0l, npool)
            fp.run("fwd_prog", self.threads, code, *s0l, *pools, *args)
            s = build_value(self.sp.state.type, [leaf_value(pools, fp.groups, s0l, k, p) for k, p in enumerate(final)])
        else:
            s = self.advance(values, sizes, s0, 0, T)
        values[self.sp.final.name] = s
        return self.post(values, sizes)

    __call__ = forward


class LoopKernel:
    """``tl.compile`` of a loop program: the three parts' kernels, the body run ``T`` times."""

    def __init__(self, expr, mode: str, threads, compile_fn):
        self.program = LoopProgram(expr, "compile", mode, compile_fn, threads)
        self.expr = expr
        self.threads = threads

    def __call__(self, **inputs):
        return self.program.forward(inputs)
