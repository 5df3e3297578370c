"""``tl.compile``: programs -> cached, validated Numba kernels (paper Section 4.3).

``compile(expr, mode="sparse", threads=None)`` returns a :class:`Kernel`;
``kernel(**inputs)`` validates the inputs with the reference evaluator's
``prepare_inputs`` (names, shapes, size inference, relation data) and runs
the compiled code.  Values are float64 throughout: float32 and integer
inputs are accepted and converted to float64 (as the evaluator does);
exact (sympy/object) inputs are rejected with an InputError.

Programs outside the backend's input grammar (see
``tensorlang.backend.fusion``) are first flattened
(``tensorlang.backend.flatten``) and, if still outside, passed through
``tl.normalize`` (and the simplifier) when those exist; what still does
not fit is an UnsupportedError, never a wrong answer.

``threads``: None picks the parallel variant (``prange`` outer gen loops)
when the kernel's outer gen domains hold at least ``PARALLEL_MIN`` points
and the machine has at least ``PARALLEL_MIN_CPUS`` cores, else the serial
one; 1 always runs serially; k > 1 runs the parallel
variant on k threads.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from .. import bounds
from ..errors import InputError, TensorLangError, UnsupportedError
from ..ir import Expr, PairT, RealT, TensorT
from ..typecheck import check_program, type_of
from . import cache as _cache

PARALLEL_MIN = 1 << 15
# On 2 cores the memory-bound kernels measured slower with prange than
# serially (thread start-up, and cores shared with other work); threads=k
# still asks for the parallel variant explicitly.
PARALLEL_MIN_CPUS = 4


def _candidates(expr: Expr):
    """The program as given, flattened, then normalized (and simplified)."""
    from .flatten import flatten

    yield lambda: expr
    yield lambda: flatten(expr)
    for stage in _normalizers():
        yield lambda stage=stage: flatten(stage(expr))


def _first(expr: Expr, use):
    """``use(prog)`` for the first candidate form it accepts (see ``_candidates``)."""
    first_error = None
    for k, make in enumerate(_candidates(expr)):
        try:
            return use(make())
        except UnsupportedError as exc:
            first_error = first_error or exc
        except TensorLangError:
            if k < 2:  # the program's own error, not a normalizer's limit
                raise
    raise first_error


def _to_backend_form(expr: Expr) -> Expr:
    from .fusion import split_program

    def check(prog):
        split_program(prog)
        return prog

    return _first(expr, check)


def _lower(expr: Expr, mode: str):
    from .lower import lower_program

    return _first(expr, lambda prog: lower_program(prog, mode))


def _normalizers():
    """tl.normalize (and then the simplifier), when they exist."""
    out = []
    try:
        from ..passes.pipeline import normalize
    except ImportError:
        return out
    out.append(normalize)
    try:
        from ..passes.simplify import simplify
    except ImportError:
        return out
    out.append(lambda e: simplify(normalize(e)))
    return out


class Kernel:
    """A compiled program.  ``kernel(**inputs)`` runs it; ``kernel.source`` is
    the generated Python; ``kernel.loop_ir`` the loop IR (lowered on demand)."""

    def __init__(self, expr: Expr, mode: str, threads, key: str, module, spec: dict, src: str, hit: bool):
        self.expr = expr
        self.mode = mode
        self.threads = threads
        self.key = key
        self.module = module
        self.spec = spec
        self.source = src
        self.cache_hit = hit
        self._ir = None
        self.python = False  # run the generated source as plain Python (tests)
        self._pool = threading.local()

    @property
    def loop_ir(self):
        if self._ir is None:
            self._ir, _ = _lower(self.expr, self.mode)
        return self._ir

    def _variant(self, sizes: dict):
        if self.python:
            return self.module.kernel_serial.py_func, None
        par = getattr(self.module, "kernel_parallel", None)
        if par is None or self.threads == 1:
            return self.module.kernel_serial, None
        if self.threads is None:
            work = 0
            for dims in self.spec["work"]:
                pts = 1
                for terms, const in dims:
                    pts *= max(0, const + sum(c * sizes[s] for s, c in terms))
                work = max(work, pts)
            if work < PARALLEL_MIN or (os.cpu_count() or 1) < PARALLEL_MIN_CPUS:
                return self.module.kernel_serial, None
            return par, None
        return par, int(self.threads)

    def _temporaries(self, sizes: dict) -> list:
        """The let-bound temporaries, from a per-thread pool (reused across calls)."""
        pool = getattr(self._pool, "arrays", None)
        if pool is None:
            pool = self._pool.arrays = {}
        out = []
        for name, dims in self.spec.get("temporaries", []):
            shape = tuple(max(0, const + sum(c * sizes[s] for s, c in terms)) for terms, const in dims)
            arr = pool.get(name)
            if arr is None or arr.shape != shape:
                arr = pool[name] = np.empty(shape, dtype=np.float64)
            out.append(arr)
        return out

    def __call__(self, **inputs):
        from ..evaluator import prepare_inputs

        for k, v in inputs.items():
            if isinstance(v, np.ndarray) and v.dtype == object:
                raise InputError(f"input {k} is an object array; compiled kernels run in float64 (use tl.evaluate)")
        env, sizes, relations, _ = prepare_inputs(self.expr, inputs, exact=False)
        bounds.check_sizes(bounds.check_program(self.expr), sizes)  # constant accesses in range
        if self.spec.get("needs_positive_sizes") and any(sizes[s] < 1 for s in self.spec["sizes"]):
            # the in-bounds proof assumed every size >= 1: let the evaluator decide
            from ..evaluator import evaluate

            return evaluate(self.expr, **inputs)
        by_name = {v.name: val for v, val in env.items()}
        args = [np.int64(sizes[s]) for s in self.spec["sizes"]]
        for name, path, rank in self.spec["inputs"]:
            val = by_name[name]
            for k in path:
                val = val[k]
            args.append(np.ascontiguousarray(val, dtype=np.float64) if rank else float(val))
        rels = {r.name: d for r, d in relations.items()}
        for name, perm, ptrs, cols in self.spec["relations"]:
            args += _relation_arrays(rels[name], perm, ptrs, cols)
        for name in self.spec.get("dense_relations", []):
            args.append(np.ascontiguousarray(rels[name], dtype=np.bool_))
        args += self._temporaries(sizes)
        fn, threads = self._variant(sizes)
        if threads is not None:
            import numba

            old = numba.get_num_threads()
            numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
            try:
                res = fn(*args)
            finally:
                numba.set_num_threads(old)
        else:
            res = fn(*args)
        return _aos(_rebuild(self.spec["outputs"], res), type_of(self.expr))


def _relation_arrays(dense: np.ndarray, perm, ptrs, cols):
    """CSR-like data of a relation with its columns in the order ``perm``:
    coordinates sorted lexicographically, ``ptr{L}`` the row starts over the
    first ``L`` columns (flattened), ``c{k}`` column ``k``."""
    coords = np.argwhere(np.transpose(dense, perm)).astype(np.int64)  # sorted
    ext = tuple(dense.shape[k] for k in perm)
    out = []
    for L in ptrs:
        if L == 0:
            out.append(np.array([0, len(coords)], dtype=np.int64))
            continue
        nrows = int(np.prod(ext[:L]))
        flat = np.ravel_multi_index(tuple(coords[:, :L].T), ext[:L]) if len(coords) else np.zeros(0, np.int64)
        counts = np.bincount(flat, minlength=nrows)
        out.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    for k in cols:
        out.append(np.ascontiguousarray(coords[:, k]))
    return out


def _aos(val, t):
    """Struct-of-arrays results -> the evaluator's representation of a tensor of
    pairs (an object array of tuples), recursively."""
    if isinstance(t, PairT):
        return (_aos(val[0], t.fst), _aos(val[1], t.snd))
    if isinstance(t, TensorT) and _pairlike(t.elem):
        a, b = val
        out = np.empty(len(a), dtype=object)
        for k in range(len(a)):
            out[k] = _aos((a[k], b[k]), t.elem)
        return out
    if isinstance(t, RealT) and isinstance(val, np.ndarray):
        return float(val)
    return val


def _pairlike(t) -> bool:
    while isinstance(t, TensorT):
        t = t.elem
    return isinstance(t, PairT)


def _rebuild(spec, res):
    if spec[0] == "pair":
        return (_rebuild(spec[1], res), _rebuild(spec[2], res))
    v = res[spec[1]]
    if isinstance(v, np.ndarray):
        return v
    return float(v)


def python_kernel(expr: Expr, mode: str = "sparse") -> Kernel:
    """The generated kernel run as plain Python (no Numba compilation, no disk
    cache): the same source, for fast differential tests of the lowering."""
    from .codegen import source

    check_program(expr)
    ir, spec = _lower(expr, mode)
    src = source(ir)
    ns: dict = {}
    exec(compile_source(src.replace("cache=True", "cache=False"), "<tensorlang kernel>", "exec"), ns)
    k = Kernel(expr, mode, 1, None, _PyModule(ns), spec, src, False)
    k._ir = ir
    k.python = True
    return k


class _PyModule:
    def __init__(self, ns):
        self.kernel_serial = ns["kernel_serial"]


compile_source = compile  # the builtin, before the public name below shadows it


def compile(expr: Expr, mode: str = "sparse", threads=None) -> Kernel:  # noqa: A001 - the public name
    """Compile ``expr`` to a kernel (see module doc)."""
    if mode not in ("sparse", "naive"):
        raise TensorLangError(f"unknown compile mode {mode!r}; use 'sparse' or 'naive'")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise TensorLangError(f"threads must be None or a positive int, got {threads!r}")
    if not isinstance(expr, Expr):
        raise TensorLangError(f"tl.compile needs a tensorlang expression, got {type(expr).__name__}")
    check_program(expr)
    bounds.check_program(expr)  # every access proven in range, or refused
    key = _cache.program_key(expr, mode)
    got = _cache.load(key, expr, mode)  # checks the entry against this program's signature
    if got is not None:
        mod, spec, src = got
        return Kernel(expr, mode, threads, key, mod, spec, src, True)
    from .codegen import source

    ir, spec = _lower(expr, mode)
    src = source(ir)
    mod = _cache.store(key, src, spec)
    k = Kernel(expr, mode, threads, key, mod, spec, src, False)
    k._ir = ir
    return k
