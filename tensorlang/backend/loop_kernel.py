"""Compiled execution of loop programs (issue #17 item 3).

``loops.split`` cuts a program at its top-level loop into ``pre``, ``body``
and ``post``; each is compiled to its own kernel by ``tl.compile``, and the
body's kernel runs ``T`` times with ``T`` a runtime value, so the kernels'
size and compile time do not depend on ``T``.

A whole sweep runs in one Numba call (section "Step programs" below): the
checkpoint schedule becomes a table of instructions, run by a loop compiled
next to a variant of the body's kernel that writes into a buffer it is
given, so the state is double-buffered and no step allocates or returns to
Python.  The inputs are validated once (names, shapes, sizes, finiteness).
Where this does not apply (a scalar or pair-valued state, float32 inputs,
relation data, a kernel whose proof needs positive sizes, runs shorter than
``DRIVER_MIN_STEPS``) the steps run as validated calls from Python, one per
step, with the same operations.
"""

from __future__ import annotations

import numpy as np

from ..ir import TensorT, Var, input_vars, size_vars
from ..loops import Split, split, t_value
from ..typecheck import check_program


# A driver is compiled (seconds, once per body kernel: then Numba's disk
# cache) only for runs of at least this many steps; shorter runs are
# cheaper as per-step validated calls.
DRIVER_MIN_STEPS = 32


class Part:
    """One loop-free program, run compiled on the values it names."""

    def __init__(self, prog, mode: str, compile_fn):
        self.prog = prog
        self.var = prog if isinstance(prog, Var) and prog.uid == 0 else None
        if self.var is None:
            check_program(prog)
            self.fn = compile_fn(prog, mode=mode)
        self.inputs = [v.name for v in input_vars(prog)]
        self.sizes = [s.name for s in size_vars(prog)]

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


class LoopProgram:
    """A loop program's parts, its sizes and its compiled primal."""

    def __init__(self, expr, stage: str, mode: str, compile_fn):
        from .. import bounds

        check_program(expr)
        self.constraints = bounds.check_program(expr)
        self.expr = expr
        self.mode = mode
        self.compile_fn = compile_fn
        self.sp: Split = split(expr, stage)
        self.pre = Part(self.sp.pre, mode, compile_fn)
        # T = 0 (a constant): the body never runs, and may not even compile
        # (``forcing[t]`` with ``forcing : [0]…`` reads out of range at every t)
        never = self.sp.steps.is_const and self.sp.steps.const == 0
        self.body = None if never else Part(self.sp.body, mode, compile_fn)
        self.post = Part(self.sp.post, mode, compile_fn)

    def sizes(self, inputs: dict) -> dict:
        from .. import bounds
        from ..evaluator import prepare_inputs

        _, sizes, _, _ = prepare_inputs(self.expr, inputs, exact=False)
        bounds.check_sizes(self.constraints, sizes)  # every access of every step is in range
        return sizes

    def steps(self, sizes) -> int:
        return self.sp.steps.evaluate(sizes)

    def _step(self, part, values, sizes, state, t):
        values[self.sp.state.name] = state
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
        """``(s0 as float64, the body kernel's arguments)`` for a step program,
        or None where it does not apply (a short run, float32, a scalar or
        pair state, sizes a proof needs positive).  The inputs' finiteness is
        checked here, as the first validated call would."""
        from .dispatch import check_finite, finite_checks

        fp = self.step_program()
        if fp is None or not isinstance(s0, np.ndarray) or s0.ndim == 0 or s0.dtype != np.float64:
            return None
        vals = {**values, self.sp.state.name: s0}
        args = kernel_args(fp.base, vals, sizes, t_name(self.sp))
        if args is None:
            return None
        check_finite(vals, finite_checks(self.sp.body, vals))
        return np.ascontiguousarray(s0), args

    def forward(self, inputs: dict):
        sizes = self.sizes(inputs)
        values = dict(inputs)
        s0 = self.pre(values, sizes)
        T = self.steps(sizes)
        got = self.table_args(values, sizes, s0) if T >= DRIVER_MIN_STEPS else None
        if got is not None:
            # the whole run in one Numba call, alternating between two buffers
            s0c, args = got
            code, loc = forward_table(T)
            bufs = np.empty((2,) + s0c.shape)
            self.step_program().module.fwd_prog(code, s0c, bufs, *args)
            s = bufs[loc]
        else:
            s = self.advance(values, sizes, s0, 0, T)
        values[self.sp.final.name] = s
        return self.post(values, sizes)

    __call__ = forward


# --------------------------------------------------------------------------
# Step programs: the whole sweep in one Numba call (issue #17 item 3)
#
# A schedule (``loops.schedule``) is compiled once per (policy, T) into an
# int64 table of instructions over numbered state buffers: slots ``0 … S-1``
# (the checkpoints), two scratch buffers ``S`` and ``S+1``, and ``IN``
# (-1: the initial state, only read).  ``FWD t src dst``: one step of the
# body from buffer ``src`` into ``dst``; ``COPY src dst``; ``REV t src``: one
# adjoint step at the state in ``src``.  The body's kernel writes into the
# buffer it is given (:func:`out_buffer_ir`), so no step allocates: the
# primal alternates between the two scratch buffers, and a step whose result
# is stored next writes straight into its checkpoint slot (``"all"`` stores
# without a copy).  The table is run by ``fwd_prog`` / ``rev_prog``, loops
# generated next to the body's and the adjoint's kernels: no Python per step.

IN = -1
FWD, COPY, REV = 0, 1, 2
STEP_VERSION = "s4-steps-1"  # in the step modules' cache keys


def compile_schedule(sch, T: int):
    """``(forward table, reverse table, buffer of s_T)`` of a ``loops.Schedule``
    (comment above); the tables are ``(m, 4)`` int64 arrays ``op, t, src, dst``."""
    S = sch.slots
    X, Y = S, S + 1
    fwd: list = []
    code = fwd
    cur = IN
    final = None
    for a in sch.actions:
        op = a[0]
        if op == "store":
            slot = a[1]
            if cur == slot:
                continue
            last = code[-1] if code else None
            if last is not None and last[0] == FWD and last[3] == cur and cur in (X, Y) and last[2] != slot:
                last[3] = slot  # the step writes its result straight into the slot
            else:
                code.append([COPY, -1, cur, slot])
            cur = slot
        elif op == "restore":
            cur = a[1]
        elif op == "advance":
            for t in range(a[1], a[2]):
                dst = Y if cur == X else X
                code.append([FWD, t, cur, dst])
                cur = dst
        elif op == "final":
            final = cur
            code = []
            rev = code
        else:
            code.append([REV, a[1], cur, -1])
    if final is None:
        raise AssertionError("internal: a schedule without its final action")
    tables = tuple(np.array(c, dtype=np.int64).reshape(-1, 4) for c in (fwd, rev))
    return tables[0], tables[1], final


def forward_table(T: int):
    """The primal's table: ``T`` steps from ``IN`` alternating between the scratch buffers 0 and 1."""
    code = np.empty((T, 4), dtype=np.int64)
    cur = IN
    for t in range(T):
        dst = 1 if cur == 0 else 0
        code[t] = (FWD, t, cur, dst)
        cur = dst
    return code, cur


def out_buffer_ir(ir, leaves):
    """``ir`` with the array results ``leaves`` (result positions) written into
    caller-given buffers (pooled allocations, arguments after the others),
    and their argument names; None when one of them is not a kernel-allocated
    array at top level (an input returned as a copy, a packed output)."""
    from dataclasses import replace

    from .loopir import Alloc

    names = []
    for k in leaves:
        r = ir.results[k]
        if not isinstance(r, str) or r in ir.copies:
            return None
        names.append(r)
    top = {s.name: s for s in ir.body if isinstance(s, Alloc)}
    if any(nm not in top or top[nm].role != "output" or top[nm].pooled for nm in names):
        return None
    swap = {nm: replace(top[nm], pooled=True) for nm in names}
    body = [swap.get(s.name, s) if isinstance(s, Alloc) else s for s in ir.body]
    allocs = [swap.get(a.name, a) for a in ir.allocs]
    return replace(ir, args=list(ir.args) + names, allocs=allocs, body=body), names


def _dims(t) -> list:
    out = []
    while isinstance(t, TensorT):
        out.append([[[s.name, c] for s, c in t.extent.terms], t.extent.const])
        t = t.elem
    return out


def _call(spec, names: dict, t_size, outs, prefix: str = "z"):
    """``(parameters, call arguments)`` of a step kernel's call from a step
    program: ``<prefix><k>`` for the arguments passed in (``spec``: the
    kernel's own, without the output buffers), ``names`` replacing inputs by
    name, ``t + 1`` for ``t_size``, then the output buffers ``outs``."""
    nsz = len(spec["sizes"])
    params = [f"{prefix}{k}" for k in range(nsz + len(spec["inputs"]) + len(spec.get("temporaries", [])))]
    args = list(params)
    for k, nm in enumerate(spec["sizes"]):
        if nm == t_size:
            args[k] = "t + 1"  # loops.t_value
    for k, (nm, _, _) in enumerate(spec["inputs"]):
        if nm in names:
            args[nsz + k] = names[nm]
    return params, args + list(outs)


class StepKernel:
    """A compiled part's float64 kernel writing its array results ``leaves``
    into caller-given buffers, in its own cache entry together with the loop
    that runs an instruction table (``fwd_prog`` or ``rev_prog``)."""

    def __init__(self, module, key: str, base: dict):
        self.module, self.key, self.base = module, key, base  # base: the kernel's own spec (no buffers)

    @classmethod
    def build(cls, kernel, leaves, out_types, prog_src, imports: str = ""):
        import hashlib

        from . import cache as _cache
        from .codegen import source

        if not hasattr(kernel, "variant") or kernel.python:
            return None
        var = kernel.variant("float64")
        spec = var.spec
        if (var.key is None or spec["relations"] or spec.get("dense_relations") or spec.get("sparse_values")
                or spec.get("sparse_outputs") or spec.get("relation_orders")):
            return None
        key = hashlib.sha256(f"{var.key}|{STEP_VERSION}|{leaves}|{imports}|{prog_src}".encode()).hexdigest()[:40]
        got = _cache.load(key)
        if got is not None:
            return None if got[1].get("loop_out_buffers") is None else cls(got[0], key, spec)
        ir, _ = kernel.lowered()
        made = out_buffer_ir(ir, leaves)
        spec2 = dict(spec)
        if made is None:  # remembered: this kernel has no step form
            spec2["loop_out_buffers"] = None
            _cache.store(key, source(ir, "float64"), spec2)
            return None
        ir2, names = made
        spec2["temporaries"] = list(spec.get("temporaries", [])) + [[nm, _dims(t)] for nm, t in zip(names, out_types)]
        spec2["loop_out_buffers"] = list(leaves)
        text = (source(ir2, "float64") + imports + "\n# -- step program (tensorlang.backend.loop_kernel) --\n"
                "@numba.njit(**_OPTS)\n" + prog_src)
        return cls(_cache.store(key, text, spec2), key, spec)


def forward_program(part: Part, sp: Split):
    """The body's step kernel with ``fwd_prog(code, s0, bufs, z…)`` (the
    table's FWD and COPY instructions), or None where it does not apply (a
    pair or scalar state, relations)."""
    if not isinstance(sp.state.type, TensorT) or part is None or part.var is not None:
        return None
    k = part.fn
    if not hasattr(k, "variant") or k.python:
        return None
    spec = k.variant("float64").spec
    if spec["outputs"] != ["leaf", 0] or [n for n, _, _ in spec["inputs"]].count(sp.state.name) != 1:
        return None
    if any(n == sp.state.name and tuple(p) != () for n, p, _ in spec["inputs"]):
        return None
    zs, call = _call(spec, {sp.state.name: "a"}, t_name(sp), ["bufs[dst]"])
    src = (f"def fwd_prog(code, s0, bufs, {', '.join(zs)}):\n"
           "    for q in range(code.shape[0]):\n"
           "        t = code[q, 1]\n"
           "        src = code[q, 2]\n"
           "        dst = code[q, 3]\n"
           "        if src < 0:\n"
           "            a = s0\n"
           "        else:\n"
           "            a = bufs[src]\n"
           f"        if code[q, 0] == {FWD}:\n"
           f"            kernel_serial({', '.join(call)})\n"
           "        else:\n"
           "            b = bufs[dst]\n"
           "            b[...] = a\n"
           "    return 0\n")
    return StepKernel.build(k, [0], [sp.state.type], src)


def reverse_program(part: Part, fwd: StepKernel, sp: Split, wrt: list, dstate: str):
    """The body adjoint's step kernel (its state cotangent written into a
    buffer) with ``rev_prog(code, s0, bufs, ds, dsb, accs…, zf…, za…)``
    running FWD, COPY and REV instructions (the body's steps through
    ``fwd``'s module), or None.  ``wrt``: the adjoint's inputs in output
    order, the state first; the inputs' cotangents accumulate in order
    ``t = T-1 … 0`` (``acc = acc + step``), the state's is carried."""
    if fwd is None or part is None or part in ("identity",) or not hasattr(part.fn, "variant") or part.fn.python:
        return None
    spec = part.fn.variant("float64").spec
    names = [n for n, _, _ in spec["inputs"]]
    for nm in (sp.state.name, dstate):
        if names.count(nm) != 1 or tuple(spec["inputs"][names.index(nm)][1]) != ():
            return None
    outs, tree = [], spec["outputs"]  # (E_state, (E_x1, …)), every E one leaf
    for j in range(len(wrt)):
        node = tree if j == len(wrt) - 1 else tree[1]
        if node[0] != "leaf":
            return None
        outs.append(node[1])
        if j < len(wrt) - 1:
            tree = tree[2]
    accs = [f"acc{j}" for j in range(1, len(wrt))]
    zf, fcall = _call(fwd.base, {sp.state.name: "a"}, t_name(sp), ["bufs[dst]"], prefix="f")
    za, acall = _call(spec, {sp.state.name: "a", dstate: "ds"}, t_name(sp), ["dsb"])
    lines = [f"def rev_prog(code, s0, bufs, ds, dsb, {''.join(a + ', ' for a in accs)}{', '.join(zf + za)}):",
             "    for q in range(code.shape[0]):",
             "        op = code[q, 0]",
             "        t = code[q, 1]",
             "        src = code[q, 2]",
             "        dst = code[q, 3]",
             "        if src < 0:",
             "            a = s0",
             "        else:",
             "            a = bufs[src]",
             f"        if op == {FWD}:",
             f"            _body_step({', '.join(fcall)})",
             f"        elif op == {COPY}:",
             "            b = bufs[dst]",
             "            b[...] = a",
             "        else:",
             f"            res = kernel_serial({', '.join(acall)})"]
    # in place for arrays (the caller's private accumulators): acc + step, as added before
    lines += [f"            {a} += res[{outs[j]}]" for j, a in enumerate(accs, start=1)]
    lines += [f"            nds = res[{outs[0]}]",  # dsb (written), or a fresh copy
              "            dsb = ds",
              "            ds = nds",
              "    return (ds," + "".join(" " + a + "," for a in accs) + ")"]
    imports = ("\nfrom tensorlang.backend import cache as _loop_cache\n"
               f"_body_entry = _loop_cache.load({fwd.key!r})\n"
               "if _body_entry is None:\n"
               "    raise ImportError('the loop body step kernel is not in the cache')\n"
               "_body_step = _body_entry[0].kernel_serial\n")
    return StepKernel.build(part.fn, [outs[0]], [sp.state.type], "\n".join(lines) + "\n", imports)

def kernel_args(spec, values: dict, sizes: dict, t_size):
    """The float64 kernel's arguments (``api.Kernel._run``'s order), or None
    where a driver does not apply (float32, sizes a proof needs positive)."""
    if spec.get("needs_positive_sizes") and any(sizes.get(n, 1) < 1 for n in spec["sizes"] if n != t_size):
        return None
    vals = {k: values[k] for k, _, _ in spec["inputs"]}
    if precision_of(vals) != "float64":
        return None
    args = [np.int64(1 if n == t_size else sizes[n]) for n in spec["sizes"]]  # t_size: set per step
    for name, path, rank in spec["inputs"]:
        v = vals[name]
        for k in path:
            v = v[k]
        args.append(np.ascontiguousarray(v, dtype=np.float64) if rank else np.float64(v))
    for name, dims in spec.get("temporaries", []):
        shape = tuple(max(0, const + sum(c * sizes[s] for s, c in terms)) for terms, const in dims)
        args.append(np.empty(shape, dtype=np.float64))
    return args


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


class LoopKernel:
    """``tl.compile`` of a loop program: the three parts' kernels, the body run ``T`` times."""

    def __init__(self, expr, mode: str, threads, compile_fn):
        self.program = LoopProgram(expr, "compile", mode, compile_fn)
        self.expr = expr
        self.threads = threads

    def __call__(self, **inputs):
        return self.program.forward(inputs)
