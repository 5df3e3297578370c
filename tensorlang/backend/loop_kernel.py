"""Compiled execution of loop programs (issue #17 item 3).

``loops.split`` cuts a program at its top-level loop into ``pre``, ``body``
and ``post``; each is compiled to its own kernel by ``tl.compile``, and the
body's kernel runs ``T`` times with ``T`` a runtime value, so the kernels'
size and compile time do not depend on ``T``.

The steps run in one Numba driver per body kernel (:class:`Driver`):
``for t in range(t0, t1): s = body(sizes…, inputs…, s)`` compiled with
``njit`` around the body's own ``njit`` kernel (Numba calls one from the
other without leaving machine code), ``T`` and ``t`` runtime arguments.
The first step goes through the kernel's validated call (names, shapes,
sizes, finiteness of the inputs); the driver then repeats the same call.
Where the driver does not apply (a pair-valued state, float32 inputs,
relation data, a kernel whose proof needs positive sizes) the steps run
as validated calls from Python, one per step, with the same results.
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
        """The state after steps ``t0 … t1-1`` from ``s`` (``s_t0``)."""
        if t1 <= t0:
            return s
        s = self._step(self.body, values, sizes, s, t0)  # validated
        if t1 == t0 + 1:
            return s
        drv = self.driver() if t1 - t0 - 1 >= DRIVER_MIN_STEPS else None
        if drv is not None:
            values[self.sp.state.name] = s
            got = drv.run(values, sizes, t0 + 1, t1)
            if got is not None:
                return got
        for t in range(t0 + 1, t1):
            s = self._step(self.body, values, sizes, s, t)
        return s

    def driver(self):
        if not hasattr(self, "_driver"):
            self._driver = Driver.build(self.body, self.sp)
        return self._driver

    def forward(self, inputs: dict):
        sizes = self.sizes(inputs)
        values = dict(inputs)
        s = self.advance(values, sizes, self.pre(values, sizes), 0, self.steps(sizes))
        values[self.sp.final.name] = s
        return self.post(values, sizes)

    __call__ = forward


def _jit(var, name: str, src: str):
    """The driver ``name`` defined by ``src`` (calling ``body``), compiled in one
    module with the body kernel's own source and kept in the kernel cache
    (Numba's on-disk cache then holds its machine code: later processes load
    it instead of compiling).  A float64 variant without a cache key (the
    plain-Python test kernels) gets no driver."""
    import hashlib

    from . import cache as _cache

    if var.key is None:
        return None
    key = hashlib.sha256(f"{var.key}|loop-driver|{src}".encode()).hexdigest()[:40]
    got = _cache.load(key)
    if got is None:
        text = (var.source + "\n\n# -- loop driver (tensorlang.backend.loop_kernel) --\nbody = kernel_serial\n\n"
                "@numba.njit(**_OPTS)\n" + src)
        mod = _cache.store(key, text, var.spec)
    else:
        mod = got[0]
    return getattr(mod, name)


class Driver:
    """A Numba ``for t in range(t0, t1)`` loop around a body kernel (module doc)."""

    def __init__(self, fn, spec, state: str, t_size: str | None):
        self.fn, self.spec, self.state, self.t_size = fn, spec, state, t_size

    @classmethod
    def build(cls, part: Part, sp: Split):
        k = part.fn  # an api.Kernel (not imported: api imports this module)
        if not hasattr(k, "variant") or k.python or not isinstance(sp.state.type, TensorT):
            return None
        var = k.variant("float64")
        spec = var.spec
        leaves = [tuple(x) for x in spec["inputs"]]
        if (spec["relations"] or spec.get("dense_relations") or spec["outputs"] != ["leaf", 0]
                or (sp.state.name, (), _rank(sp.state.type)) not in [(a, tuple(b), c) for a, b, c in leaves]
                or any(a == sp.state.name and tuple(b) != () for a, b, _ in leaves)):
            return None
        args = [f"z{k}" for k in range(len(spec["sizes"]) + len(leaves) + len(spec.get("temporaries", [])))]
        call = list(args)
        for k, name in enumerate(spec["sizes"]):
            if t_name(sp) == name:
                call[k] = "t + 1"  # loops.t_value
        for k, (name, _, _) in enumerate(leaves):
            if name == sp.state.name:
                call[len(spec["sizes"]) + k] = "s"
        # one function for both sweeps (one Numba compilation): with store,
        # s_t goes to buf[slot0 + t - t0] before each step (the "all" sweep)
        src = (f"def drive(t0, t1, s, store, buf, slot0, {', '.join(args)}):\n"
               f"    for t in range(t0, t1):\n"
               f"        if store:\n"
               f"            buf[slot0 + t - t0] = s\n"
               f"        s = body({', '.join(call)})[0]\n"
               f"    return s\n")
        fn = _jit(var, "drive", src)
        return None if fn is None else cls(fn, spec, sp.state.name, t_name(sp))

    def run(self, values: dict, sizes: dict, t0: int, t1: int, buf=None, slot0: int = 0):
        """``s_t1`` from ``values[state] = s_t0``, or None where the driver does not apply;
        with ``buf``, ``s_t`` is also stored in ``buf[slot0 + t - t0]``."""
        args = kernel_args(self.spec, values, sizes, self.t_size)
        if args is None:
            return None
        state = args[len(self.spec["sizes"]) + [n for n, _, _ in self.spec["inputs"]].index(self.state)]
        store = buf is not None
        if not store:
            buf = np.empty((1,) + state.shape)  # not written (the same compiled signature)
        return self.fn(np.int64(t0), np.int64(t1), state, store, buf, np.int64(slot0), *args)


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


class ReverseDriver:
    """A Numba loop over reverse steps: for each ``(t, slot)``, the body's
    adjoint kernel at the state ``buf[slot]`` and the cotangent ``ds``; the
    state's cotangent is carried, the inputs' cotangents accumulate."""

    def __init__(self, fn, spec, names):
        self.fn, self.spec, self.names = fn, spec, names

    @classmethod
    def build(cls, part: Part, sp: Split, wrt: list, dstate: str):
        """``wrt``: the adjoint's inputs in output order, the state first."""
        k = part.fn
        if not hasattr(k, "variant") or k.python or not isinstance(sp.state.type, TensorT):
            return None
        var = k.variant("float64")
        spec = var.spec
        leaves = [(a, tuple(b), c) for a, b, c in spec["inputs"]]
        if spec["relations"] or spec.get("dense_relations"):
            return None
        # outputs: (E_state, (E_x1, ...)) with every E one leaf
        outs, tree = [], spec["outputs"]
        for j in range(len(wrt)):
            node = tree if j == len(wrt) - 1 else tree[1]
            if node[0] != "leaf":
                return None
            outs.append(node[1])
            if j < len(wrt) - 1:
                tree = tree[2]
        names = [n for n, _, _ in leaves]
        for n in (sp.state.name, dstate):
            if names.count(n) != 1 or leaves[names.index(n)][1] != ():
                return None
        args = [f"z{q}" for q in range(len(spec["sizes"]) + len(leaves) + len(spec.get("temporaries", [])))]
        call = list(args)
        for q, name in enumerate(spec["sizes"]):
            if t_name(sp) == name:
                call[q] = "t + 1"  # loops.t_value
        call[len(spec["sizes"]) + names.index(sp.state.name)] = "buf[slots[q]]"
        call[len(spec["sizes"]) + names.index(dstate)] = "ds"
        accs = [f"a{j}" for j in range(1, len(wrt))]
        lines = [f"def rev(ts, slots, buf, ds, {''.join(a + ', ' for a in accs)}{', '.join(args)}):",
                 "    for q in range(ts.shape[0]):",
                 "        t = ts[q]",
                 f"        res = body({', '.join(call)})"]
        for j, a in enumerate(accs, start=1):
            lines.append(f"        {a} = {a} + res[{outs[j]}]")
        lines.append(f"        ds = res[{outs[0]}]")
        lines.append("    return (ds," + "".join(" " + a + "," for a in accs) + ")")
        fn = _jit(var, "rev", "\n".join(lines) + "\n")
        return None if fn is None else cls(fn, spec, (sp.state.name, dstate, t_name(sp)))

    def run(self, values: dict, sizes: dict, ts, slots, buf, ds, accs):
        """(ds, accs) after the reverse steps ``ts`` (states ``buf[slots]``), or None."""
        state, dstate, t_size = self.names
        vals = {**values, state: buf[0], dstate: ds}
        args = kernel_args(self.spec, vals, sizes, t_size)
        if args is None or any(not isinstance(a, (float, np.ndarray)) for a in accs):
            return None
        accs = [a.copy() if isinstance(a, np.ndarray) else np.float64(a) for a in accs]
        got = self.fn(np.asarray(ts, np.int64), np.asarray(slots, np.int64), buf,
                      np.ascontiguousarray(ds, dtype=np.float64), *accs, *args)
        return got[0], [float(a) if np.ndim(a) == 0 else a for a in got[1:]]


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
