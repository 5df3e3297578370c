"""``tl.compile``: programs -> cached, validated Numba kernels (paper Section 4.3).

``compile(expr, mode="sparse", threads=None)`` returns a :class:`Kernel`;
``kernel(**inputs)`` validates the inputs with the reference evaluator's
``prepare_inputs`` (names, shapes, size inference, relation data) and runs
the compiled code.

The program, normalized by the driver's route "compile" (``front``), goes
through kernel preparation (``prepare.prepare``) and is lowered
(``lower.lower_program``) at compile time; what the backend cannot lower is
an UnsupportedError then, naming the sub-expression.  No evaluator fallback.

Precision: when every real input given as an array (or NumPy scalar) is
float32, the kernel computes in float32 and returns float32; otherwise
(float64, integer or mixed inputs) it computes in float64, as NumPy
promotes.  Python floats are "weak" (NumPy 2's rule): they never decide the
precision.  Each precision is its own kernel (compiled on first use, its
own cache entry).  Sizes must be at most ``domains.MAX_SIZE`` (2**40).

``threads`` (issue #13 item 4): None picks the parallel variant
(``prange`` outer gen loops, top-level reductions split into per-thread
partial sums: codegen.py) when the machine has at least
``PARALLEL_MIN_CPUS`` cores and the kernel's work (``work_points``: the
points of its top-level gen and sum nests at the call's sizes) is at least
``PARALLEL_MIN``, on every core Numba has; 1 always runs the serial
variant; k > 1 runs the parallel variant on k threads (capped at Numba's
pool).  A given thread count always gives the same result; ``threads=1``
the single-thread one exactly.  The automatic choice also runs serially
while the machine's load average leaves no core free (``cores_free``): on a
shared machine a parallel kernel waits for preempted threads; and it keeps
the parallel variant only where it timed faster on the plan's own calls
(autothreads.py).
The one exception to "compiled": a kernel whose in-bounds proof needed every
size >= 1 (``x[n - 1]`` unguarded) is called with a zero size; the reference
evaluator then decides (it reports the bad access, or computes the value
when the access is never reached), since no proof covers the kernel there.
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

from .. import bounds
from ..errors import InputError, TensorLangError
from ..ir import Expr, Rel, relations_of, walk
from ..sparse import SparseData, keeps_packed, sparse_inputs, unpack_outputs
from ..typecheck import check_program
from ..loops import has_loop
from . import cache as _cache
from .cache_spec import dim_at
from .autothreads import PARALLEL_MIN, PARALLEL_MIN_CPUS, AutoChoice, cores_free, work_points
from .dispatch import check_finite, direct_inputs, finite_checks, relation_inputs, remember, signature, witnessed
from .domains import MAX_SIZE
from .results import aos, as_float32, builder, precision, rebuild, type_of_expr
from .strict import plan_witnesses

# Output arrays of at least this many bytes are written into caller-given
# buffers, reused once the caller has dropped them (``Kernel._out_buffers``):
# glibc serves smaller blocks from its heap without page faults (its mmap
# threshold adapts up to 32 MB), while a fresh 128 MB array costs 15 ms of
# faults against 5 ms to write it again (measured on this machine).
OUT_POOL_MIN = 16 << 20
OUT_KEEP = 2  # buffers kept per output: an optimiser's ``g = grad(x)`` holds one while the next is made
CODEGEN_VERSION = "s21-1"  # in every cache key: the generated source changed
DTYPES = {"float64": np.float64, "float32": np.float32}


def key_options(expr: Expr, mode: str, dtype: str) -> str:
    """Everything besides the canonical program that decides the source:
    mode, precision, tool versions and the code of the user functions it
    calls (passed to ``cache.program_key`` in its ``mode`` argument)."""
    import numba

    from ..isl_bridge import isl

    from ..functions import user_functions
    from .scalars import fingerprint

    parts = [mode, dtype, f"numba={numba.__version__}", f"islpy={isl.VERSION_TEXT}", f"codegen={CODEGEN_VERSION}"]
    parts += [f"{f}={fingerprint(f)}" for f in user_functions(expr)]
    return "|".join(parts)


class _Variant:
    """One precision of a kernel: its cache key, module, spec and source."""

    def __init__(self, key, module, spec, source, hit, ir=None):
        self.key, self.module, self.spec, self.source, self.cache_hit, self.ir = key, module, spec, source, hit, ir


class Kernel:
    """A compiled program.  ``kernel(**inputs)`` runs it; ``kernel.source`` is
    the generated Python (float64); ``kernel.loop_ir`` the loop IR."""

    def __init__(self, expr: Expr, mode: str, threads, prepared: Expr):
        self.expr = expr
        self.mode = mode
        self.threads = threads
        self.prepared = prepared
        self._lowered = None
        self._variants: dict = {}
        self.python = False  # run the generated source as plain Python (tests)
        self._pool = threading.local()
        self._plans: dict = {}  # call signature -> _Plan (dispatch.py)
        # relation data enters a plan as RelationData (dispatch.relation_inputs);
        # sparse tensors (which may come as dense arrays) always take the full path
        self._rel_names = tuple(dict.fromkeys(r.name for r in relations_of(expr)))
        self._plannable = not sparse_inputs(expr)
        self._type = None
        self._packed = any(isinstance(n, Rel) for n in walk(expr))  # may return packed outputs
        # inputs that are values a larger program computed (a loop's state, given to its
        # body's kernel): never refused for NaN/inf, which IEEE arithmetic may give them
        self.unchecked = frozenset()

    def lowered(self):
        if self._lowered is None:
            from .lower import lower_program

            self._lowered = lower_program(self.prepared, self.mode)
        return self._lowered

    def _cached(self, k, key: str, build):
        """The variant kept under ``k``: its disk cache entry ``key`` (checked
        against the program's signature), else ``build()`` -> ``(source, spec,
        loop IR)`` stored there; None when ``build`` gives None."""
        if k in self._variants:
            return self._variants[k]
        hit = _cache.load(key, self.prepared, self.mode)
        if hit is not None:
            got = _Variant(key, hit[0], hit[1], hit[2], True)
        else:  # code generation (and its modules) only on a miss: a warm process imports none of it
            made = build()
            got = None if made is None else _Variant(key, _cache.store(key, made[0], made[1]), made[1], made[0],
                                                     False, made[2])
        self._variants[k] = got
        return got

    def variant(self, dtype: str = "float64") -> _Variant:
        got = self._variants.get(dtype)
        if got is not None:
            return got
        if not self.python:
            return self._cached(dtype, _cache.program_key(self.expr, key_options(self.expr, self.mode, dtype)),
                                lambda: self._all_versions(dtype))
        from .codegen import source

        ir, spec = self.lowered()
        src = source(ir, dtype, cache=False)
        ns: dict = {}
        exec(compile_source(src, "<tensorlang kernel>", "exec"), ns)
        got = self._variants[dtype] = _Variant(None, _PyModule(ns), spec, src, False, ir)
        return got

    def _all_versions(self, dtype: str):
        """``(source, spec, loop IR)`` of the kernel with every version (``variant``)."""
        from .codegen import source
        from .size_classes import spec_tests

        ir, spec = self.lowered()
        tests: list = []
        src = source(ir, dtype, tests=tests)
        if tests:  # the size tests a call's class is made of (size_classes.py), in every later spec
            spec = dict(spec, size_tests=spec_tests(tests, ir))
        return src, spec, ir

    def out_variant(self, dtype: str = "float64"):
        """The variant whose output arrays (spec ``output_arrays``: the
        top-level dense ones) are arguments the caller gives (spec
        ``output_buffers``), its own cache entry; None when the kernel has
        none or runs as plain Python."""
        k = ("out", dtype)
        if k in self._variants:
            return self._variants[k]
        if self.python or not self.variant(dtype).spec.get("output_arrays"):
            self._variants[k] = None
            return None

        def build():
            from .codegen import source

            made = self._out_ir(self.lowered()[1])
            return None if made is None else (source(made[0], dtype), made[1], made[0])

        key = _cache.program_key(self.expr, key_options(self.expr, self.mode, dtype) + "|output-buffers")
        return self._cached(k, key, build)

    def _out_ir(self, spec):
        """``(loop IR, spec)`` of the output-buffer variant (``out_variant``), or None."""
        from .loopir import out_buffer_ir

        ir, _ = self.lowered()
        dims = dict((nm, d) for nm, d in spec["output_arrays"])
        seen: set = set()
        positions = [j for j, r in enumerate(ir.results) if r in dims and not (r in seen or seen.add(r))]
        made = out_buffer_ir(ir, positions)
        if made is None:
            return None
        ir2, names, _ = made
        return ir2, dict(spec, output_buffers=[[nm, dims[nm]] for nm in names])

    def _sized_variant(self, var, dname: str, sizes: dict):
        """The variant a call with these sizes runs (once per call signature, when
        its plan is made): ``var``, or its output-buffer variant when the call's output
        arrays are large (``OUT_POOL_MIN``), for the call's size class (size_classes.py)."""
        if self.python:
            return var
        base = var
        outs = var.spec.get("output_arrays")
        if outs:
            n = sum(math.prod(_shape_at(dims, sizes)) for _, dims in outs)
            if n * np.dtype(DTYPES[dname]).itemsize >= OUT_POOL_MIN:
                base = self.out_variant(dname) or var
        if not var.spec.get("size_tests") or os.environ.get("TENSORLANG_SIZE_CLASSES", "1") == "0":
            return base  # TENSORLANG_SIZE_CLASSES=0: every call all-versions (A/B measurements)
        from .size_classes import size_class

        got = size_class(var.spec["size_tests"], [sizes[s] for s in var.spec["sizes"]])
        return base if got is None else self.class_variant(base, dname, *got)

    def class_variant(self, base, dtype: str, bits: str, truth: dict):
        """``base`` (``variant`` or ``out_variant``) compiled for one size class
        (size_classes.py; ``bits`` the values of the kernel's size tests, ``truth``
        the same as cond -> bool): the versions those sizes cannot take are not
        printed.  Its own cache entry, the key naming the class; ``base``'s spec."""
        out = base.spec.get("output_buffers") is not None

        def build():
            from .codegen import source

            ir, spec = self.lowered()
            made = self._out_ir(spec) if out else (ir, None)
            # None cannot happen: out_variant made ``base`` from the same IR
            return None if made is None else (source(made[0], dtype, truth=truth), base.spec, made[0])

        key = _cache.program_key(self.expr, key_options(self.expr, self.mode, dtype)
                                 + ("|output-buffers" if out else "") + f"|class={bits}")
        return self._cached(("class", dtype, out, bits), key, build) or base

    def _out_buffers(self, outs, dtype) -> list:
        """The output buffers ``(name, shape)`` of a call: per thread, a buffer
        of an earlier call that nothing references any more (only this pool:
        the caller dropped the result and every view of it), else a new one.
        A result the caller still holds is never written."""
        pool = getattr(self._pool, "outs", None)
        if pool is None:
            pool = self._pool.outs = {}
        got = []
        for name, shape in outs:
            kept = pool.get((name, shape, dtype))
            if kept is None:
                if len(pool) > 64:  # many shapes: start afresh
                    pool.clear()
                kept = pool[(name, shape, dtype)] = []
            for arr in kept:
                # references: the list's, ``arr``'s and getrefcount's argument
                if sys.getrefcount(arr) == 3:
                    break
            else:
                arr = np.empty(shape, dtype=dtype)
                if len(kept) >= OUT_KEEP:
                    kept.pop(0)
                kept.append(arr)
            got.append(arr)
        return got

    # the float64 variant's attributes (what tests and tools inspect)
    source = property(lambda self: self.variant().source)
    spec = property(lambda self: self.variant().spec)
    key = property(lambda self: self.variant().key)
    module = property(lambda self: self.variant().module)
    cache_hit = property(lambda self: self.variant().cache_hit)

    @property
    def loop_ir(self):
        return self.lowered()[0]

    def _function(self, mod, spec, sizes: dict):
        """(entry, threads): threads None runs ``kernel_serial``; an int k > 0
        runs ``kernel_parallel`` on k threads; 0 on Numba's current count."""
        if self.python:
            return mod.kernel_serial, None
        par = getattr(mod, "kernel_parallel", None)
        if par is None or self.threads == 1:
            return mod.kernel_serial, None
        if self.threads is None:
            if (os.cpu_count() or 1) < PARALLEL_MIN_CPUS or work_points(self.prepared, sizes) < PARALLEL_MIN:
                return mod.kernel_serial, None
            return par, 0  # threads 0: decided per call (cores_free)
        return par, int(self.threads)

    def _temporaries(self, temps, dtype) -> list:
        """The let-bound temporaries ``(name, shape)``, from a per-thread pool (reused across calls)."""
        pool = getattr(self._pool, "arrays", None)
        if pool is None:
            pool = self._pool.arrays = {}
        got = pool.get((dtype, temps))  # this thread's arrays for these shapes, as last time
        if got is not None:
            return got
        out = []
        for name, shape in temps:
            arr = pool.get((name, dtype))
            if arr is None or arr.shape != shape:
                arr = pool[(name, dtype)] = np.empty(shape, dtype=dtype)
            out.append(arr)
        if len(pool) > 256:  # shapes seen by many signatures: start afresh
            pool.clear()
        pool[(dtype, temps)] = out
        return out

    def planned_entry(self, inputs: dict):
        """``(run, plan)`` for a call whose signature was validated before
        (``run(plan, inputs, None)`` runs it), else None (dispatch.py)."""
        if not self._plannable or self.python:
            return None
        sig = signature(inputs)
        plan = self._plans.get(sig) if sig is not None else None
        return None if plan is None else (self._run, plan)

    def __call__(self, **inputs):
        out = self._call(inputs)
        if self._packed and not keeps_packed():
            out = unpack_outputs(out)  # callers outside the gradient API get dense arrays
        return out

    def _call(self, inputs: dict):
        if self._rel_names:  # once per call, through tl.relation_data's cache
            inputs = relation_inputs(inputs, self._rel_names)
        sig = signature(inputs) if self._plannable and not self.python else None
        if sig is not None:
            plan = self._plans.get(sig)
            if plan is not None:  # validated once for this signature (see dispatch.py)
                check_finite(inputs, plan.checks, plan.scan)
                return self._run(plan, inputs, None)
        from ..evaluator import prepare_inputs

        for k, v in inputs.items():
            if isinstance(v, np.ndarray) and v.dtype == object:
                raise InputError(f"input {k} is an object array; compiled kernels run in floating point (use tl.evaluate)")
        # sparse tensors stay compressed and relations come as RelationData,
        # prepared once per distinct array (issues 13 and 16)
        env, sizes, relations, _ = prepare_inputs(self.expr, inputs, exact=False, compressed=True,
                                                  finite_elsewhere=self.unchecked)
        bounds.check_sizes(bounds.check_program(self.expr), sizes)  # constant accesses in range
        big = [s for s, v in sizes.items() if v > MAX_SIZE]
        if big:
            raise InputError(f"size {big[0]} = {sizes[big[0]]} exceeds the compiled kernels' limit {MAX_SIZE}")
        dname = precision(self.expr, inputs)
        dtype = DTYPES[dname]
        var = self._sized_variant(self.variant(dname), dname, sizes)
        spec = var.spec
        _check_accesses(spec, sizes)
        if spec.get("needs_positive_sizes") and any(sizes[s] < 1 for s in spec["sizes"]):
            # the in-bounds proof assumed every size >= 1 (see module doc)
            from ..evaluator import evaluate

            out = evaluate(self.expr, **inputs)
            return as_float32(out) if dtype is np.float32 else out
        plan = self._plan(var, sizes, dtype, inputs)
        if sig is not None:
            remember(self._plans, sig, plan)
        # a direct plan passes the caller's arrays (``dispatch.direct_inputs`` checked them), as later calls
        # do: the evaluator's validated copies may be float64 where the kernel is float32
        values = inputs if plan.direct is not None else {v.name: val for v, val in env.items()}
        return self._run(plan, values, {r.name: d for r, d in relations.items()})

    def _plan(self, var, sizes: dict, dtype, inputs: dict) -> "_Plan":
        """What a call with these (validated) sizes and precision passes to the kernel."""
        spec = var.spec
        fn, threads = self._function(var.module, spec, sizes)
        temps = tuple((name, _shape_at(dims, sizes)) for name, dims in spec.get("temporaries", []))
        outs = tuple((name, _shape_at(dims, sizes)) for name, dims in spec.get("output_buffers", []))
        if self._type is None:
            self._type = type_of_expr(self.expr)
        checks = tuple(c for c in finite_checks(self.expr, inputs) if c[0] not in self.unchecked)
        witness = tuple((n, tuple(p), k) for n, p, k in spec.get("witnesses", ()))
        if witness:  # these inputs are checked through the kernel's witness scalars (blas.py)
            skip = {(n, p) for n, p, _ in witness}
            witness = tuple(w for w in witness if (w[0], w[1]) in checks)
            checks = tuple(c for c in checks if c not in skip)
        strict = plan_witnesses(spec, self._type, sizes, checks, inputs)
        if strict:  # inputs a result is strict in (strict.py): checked through it after the call
            witness += strict
            checks = tuple(c for c in checks if c not in {(n, p) for n, p, _ in strict})
        plan = _Plan(
            [np.int64(sizes[s]) for s in spec["sizes"]], list(spec["inputs"]), dtype, temps, fn, threads,
            checks, spec, self._type, getattr(var.module, "kernel_serial", None),
        )
        plan.witness = witness
        plan.outs = outs
        plan.build = builder(spec["outputs"], self._type, dtype)
        if not (spec["relations"] or spec.get("dense_relations") or spec.get("sparse_values")
                or spec.get("sparse_outputs") or spec.get("relation_orders")) and not self.python:
            plan.direct = direct_inputs(plan.leaves, inputs, dtype)
        return plan

    def _run(self, plan: "_Plan", values: dict, rels):
        """Call the kernel: ``values`` name -> input, ``rels`` name -> RelationData
        (None: a planned call, whose ``values`` hold its RelationData)."""
        if rels is None:
            rels = values
        dtype = plan.dtype
        spec = plan.spec
        direct = plan.direct
        if direct is not None and plan.threads is None:
            # the common case: inputs already the kernel's arrays, one thread
            args = plan.size_args + [values[name] for name in direct]
            if plan.temps:
                args += self._temporaries(plan.temps, dtype)
            if plan.outs:
                args += self._out_buffers(plan.outs, dtype)
            res = plan.fn(*args)
            if plan.witness:
                witnessed(plan.witness, res, values, plan.scan, plan.ran)
                plan.ran = True
            return plan.build(res)
        if direct is not None:  # this signature's inputs are already the kernel's arrays
            args = plan.size_args + [values[name] for name in direct]
        else:
            args = list(plan.size_args)
            for name, path, rank in plan.leaves:
                val = values[name]
                if isinstance(val, SparseData):  # a read off the relation's loops: densified
                    val = val.dense(dtype)
                for k in path:
                    val = val[k]
                args.append(np.ascontiguousarray(val, dtype=dtype) if rank else dtype(val))
        if spec["relations"] or spec.get("dense_relations") or spec.get("sparse_values") or spec.get("relation_orders"):
            for name, perm, ptrs, cols in spec["relations"]:
                args += rels[name].kernel_arrays(perm, ptrs, cols)
            for name in spec.get("dense_relations", []):
                args.append(rels[name].dense())
            for name, perm in spec.get("sparse_values", []):
                args.append(values[name].permuted(perm, dtype))
            for name, perm in spec.get("relation_orders", []):
                args.append(rels[name].order(perm))
        if plan.temps:
            args += self._temporaries(plan.temps, dtype)
        if plan.outs:
            args += self._out_buffers(plan.outs, dtype)
        fn, threads = plan.fn, plan.threads
        if threads is not None:
            import numba

            k = numba.get_num_threads() if threads == 0 else 0
            if threads == 0 and (k < 2 or not cores_free()):
                # the automatic choice with one thread allowed (NUMBA_NUM_THREADS=1,
                # numba.set_num_threads(1)) or on a busy machine: the serial kernel
                res = plan.serial(*args)
            elif threads == 0:  # the automatic choice: every thread Numba has now, if faster (autothreads.py)
                if plan.auto is None:
                    plan.auto = AutoChoice()
                res = plan.auto.run(plan.serial, fn, args, k)
            else:
                old = numba.get_num_threads()
                k = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
                numba.set_num_threads(k)
                try:
                    res = fn(*args, np.int64(k))  # the chunk count of split reductions
                finally:
                    numba.set_num_threads(old)
        elif self.python:
            with np.errstate(all="ignore"):  # NumPy scalars: IEEE values, as in Numba
                res = fn(*args)
        else:
            res = fn(*args)
        if plan.witness:
            witnessed(plan.witness, res, values, plan.scan, plan.ran)
            plan.ran = True
        if spec.get("sparse_outputs"):
            # packed outputs: values in the relation's CSR order (issue 16)
            res = list(res)
            for k, rname in spec["sparse_outputs"]:
                res[k] = SparseData(rels[rname], res[k])
            return aos(rebuild(spec["outputs"], res, dtype), plan.type, dtype)
        return plan.build(res)


class _Plan:
    """A validated call signature's kernel arguments (see dispatch.py)."""

    __slots__ = ("size_args", "leaves", "dtype", "temps", "fn", "threads", "checks", "spec", "type", "serial",
                 "direct", "build", "witness", "outs", "auto", "scan", "ran")

    def __init__(self, size_args, leaves, dtype, temps, fn, threads, checks, spec, type_, serial=None):
        self.size_args, self.leaves, self.dtype, self.temps = size_args, leaves, dtype, temps
        self.fn, self.threads, self.checks, self.spec, self.type = fn, threads, checks, spec, type_
        self.serial = serial  # the single-thread entry (the automatic choice on a busy machine)
        self.direct = None  # input names passed on as they are (``dispatch.direct_inputs``), else None
        self.build = None  # kernel results -> the program's value (``results.builder``)
        self.witness = ()  # (input, path, result index): inputs checked after the call (``dispatch.witnessed``)
        self.outs = ()  # (name, shape): output buffers the call gives (``Kernel._out_buffers``)
        self.auto = None  # threads=None: the serial/parallel timing and choice (autothreads.AutoChoice)
        # the threads the inputs' NaN/inf scan may use: the kernel's (dispatch.scan_threads)
        self.scan = 1 if threads is None else threads
        # the plan's first call checks an array witness with NumPy, as that call validated
        # its inputs (evaluator.prepare_inputs): no compilation of the scan on a cold first call
        self.ran = False


def _shape_at(dims, sizes: dict) -> tuple:
    """A spec's extents (``[[[size, coeff], ...], const]`` each) at ``sizes``, at least 0."""
    return tuple(max(0, dim_at(d, sizes)) for d in dims)


def _check_accesses(spec, sizes) -> None:
    """The kernel's size-only accesses (``x[2]``) must be in range at these
    sizes: an InputError before the kernel runs, never an out-of-range read."""
    for index, extent, what in spec.get("checks", ()):
        i, n = dim_at(index, sizes), dim_at(extent, sizes)
        if not 0 <= i < n:
            shown = ", ".join(f"{k} = {v}" for k, v in sorted(sizes.items()))
            raise InputError(f"the access {what} reads index {i}, outside [0, {n}) at {shown}")


class _PyModule:
    def __init__(self, ns):
        self.kernel_serial = ns["kernel_serial"].py_func


compile_source = compile  # the builtin, before the public name below shadows it


LOOPS = ("sparse", "box")


def lowering_mode(mode=None, loops=None) -> str:
    """The lowering's mode for ``loops=`` (issue #13 item 8): "sparse" loops are
    narrowed by isl, "box" loops run over full boxes and test predicates
    inside (the lowering's "naive" mode).  ``mode`` is the older spelling:
    "naive" means ``loops="box"``."""
    if mode is not None and mode not in ("sparse", "naive"):
        raise TensorLangError(f"unknown compile mode {mode!r}; use 'sparse' or 'naive' (or loops='sparse'|'box')")
    if loops is not None and loops not in LOOPS:
        raise TensorLangError(f"loops must be one of {LOOPS}, got {loops!r}")
    if mode is not None and loops is not None and (mode == "naive") != (loops == "box"):
        raise TensorLangError(f"mode={mode!r} contradicts loops={loops!r}: mode='naive' is loops='box'")
    if loops is not None:
        return "naive" if loops == "box" else "sparse"
    return mode or "sparse"


def _check_options(expr, mode, threads):
    if mode not in ("sparse", "naive"):
        raise TensorLangError(f"unknown compile mode {mode!r}; use 'sparse' or 'naive'")
    if threads is not None and (type(threads) is not int or threads < 1):
        raise TensorLangError(f"threads must be None or a positive int, got {threads!r}")
    if not isinstance(expr, Expr):
        raise TensorLangError(f"tl.compile needs a tensorlang expression, got {type(expr).__name__}")
    check_program(expr)
    bounds.check_program(expr)  # every access proven in range, or refused


def python_kernel(expr: Expr, mode: str | None = None, threads=None, *, loops=None, front=None) -> Kernel:
    """:func:`compile`'s kernel run as plain Python, serially (no Numba, no disk
    cache): the same source, for fast differential tests of the lowering."""
    from .prepare import prepare

    mode = lowering_mode(mode, loops)
    _check_options(expr, mode, 1)
    k = Kernel(expr, mode, 1, prepare(front(expr) if front else expr))
    k.python = True
    k.variant()
    return k


def compile(expr: Expr, mode: str | None = None, threads=None, *, loops: str | None = None, front=None) -> Kernel:  # noqa: A001
    """Compile ``expr`` to a kernel (module doc), built now: what the backend cannot
    lower is refused here.  ``loops="sparse"`` (default) or ``"box"`` (``mode="naive"``).
    ``front``: the driver's stages before ``prepare`` (the route "compile"), run on each
    loop-free program or loop part; without it ``expr`` must be in prepare's input grammar."""
    from .prepare import prepare

    mode = lowering_mode(mode, loops)
    _check_options(expr, mode, threads)
    if has_loop(expr):  # issue #17: the body's kernel run T times
        from .loop_kernel import LoopKernel

        return LoopKernel(expr, mode, threads, lambda e, **kw: compile(e, **kw, front=front))
    k = Kernel(expr, mode, threads, prepare(front(expr) if front else expr))
    k.variant("float64")
    return k
