"""Loop IR -> Python source -> ``numba.njit`` kernels (paper Section 4.3).

The only place Python text is made: every statement and kernel-IR node
(``kir.py``) is printed here, fully parenthesised, and nothing is decided on
the text.  The source defines ``kernel_serial`` (plain ``range`` loops) and,
when some loop may run in parallel, ``kernel_parallel`` (``parallel=True``):

* the outermost loops of top-level gen blocks become ``prange`` (each
  iteration writes its own elements: the result does not depend on the
  threads);
* a top-level reduction (a sum block's outer loop, not inside another loop,
  accumulating into scalars it does not read) is split into
  ``T`` contiguous chunks run by ``prange`` (``T`` is ``kernel_parallel``'s
  last argument, ``n_threads``: the caller's thread count), each
  with its own partial sums, added in chunk order afterwards (issue #13
  item 4).  The chunks depend only on ``T`` and the loop's bounds, never on
  the scheduling, so a given thread count always gives the same result;
  ``threads=1`` runs ``kernel_serial`` (the single-thread order exactly);
* a top-level scatter loop (``D[h(y)] += term``, backend scatter.py) runs in
  ``T`` work-balanced chunks, each adding into its own slice of a
  ``[T, ...]`` copy of ``D``, the slices then added in chunk order
  (``split_scatters``; only when the output is small beside the work).

(Which loops qualify, and the scatter rewrite, are decided in
``parallel_split.py``; this module prints them.)  Since session 13 the
parallel variant starts from the serial variant's loop IR and runs each
top-level loop that qualifies (chunks.py) as ``T`` contiguous chunks of the
serial loop nest (tiles, tile fusion, short-slab gathers, lanes inside each
chunk); the rules above apply to the top-level loops it leaves, and a
kernel with none it takes keeps the earlier parallel variant whole.  The serial variant is
printed after two loop-IR rewrites: independent loop nests over one domain
fused (``hfuse.py``) and reductions nested in an outer loop given one
partial sum per column (``colsum.py``: the inner loop vectorizes).  In both
variants an innermost reduction loop (``acc += e`` alone in its body) keeps
``LANES`` partial sums, lane ``k`` taking the iterations
``lo + LANES q + k`` and the remainder going to lane 0, then adds lanes
1.. in order to ``acc`` (``_lanes``): a single chain of dependent additions
runs at the adder's latency, independent ones overlap (the deconvolution
gradient's long sums: 1.5 ms -> 0.55 ms).  Both are ``njit(nogil=True,
error_model="numpy")``: no fastmath (results may differ from the reference
evaluator only by the order of additions), and arithmetic follows NumPy's
IEEE rules (``x / 0`` is ``inf``, ``0 ** -1`` is ``inf``; no exception).

``F`` is the kernel's float type (``np.float64``, or ``np.float32`` when every
real input is float32): constants are ``F(<repr>)`` so float32 kernels stay
in float32.  Compiled user functions are bound in the header by allocator
names (``u0 = _function('name')``).

Compile latency (issue #14 item 6): a cold first call pays for every Numba
compilation the kernel triggers, so arrays and ``min``/``max`` are
intrinsics (``intrinsics.py``: no compilation of their own), and the
entries skip what they do not use: ``no_cfunc_wrapper`` (kernels are called
from Python or other kernels, never as first-class function values) and,
for ``kernel_serial``, ``no_rewrites`` (Numba's IR rewrites target array
expressions, constant getitems on tuples, ``**``; the printed kernels use
none of them: the LLVM it gets is the same), Numba's pipeline without the
passes such a kernel gives nothing to do (``intrinsics.KernelCompiler``),
and array elements read and written through the ``load``/``store``
intrinsics (one typed call per access; same machine code).  The loops a
BLAS call falls back to below its size threshold (``If.cold``) are printed
without lanes: there they only cost compile time (the MLP's five GEMMs).
The serial kernel's loops are printed as ``while`` loops (``_while``: no
range iterator for Numba to type and lower, the same counted loop for
LLVM), reductions of fewer than ``LANES`` iterations at every size without
lanes, and constant assignments overwritten before a read not at all
(deadinit.py).  A kernel compiled for one size class (size_classes.py) is
printed with the versions its sizes cannot take left out (``printed_ir``'s
``truth``), a decided choice of loops behind a GEMM as an ``If`` on the
constant ``False``, printed as its else side alone, without lanes.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace

from . import kir as K
from .blas import Gemm, View
from .chunks import chunk_loops
from .colsum import chunk_column_sums, column_sums
from .offsets import hoist_offsets
from .jam import jam_slabs
from .short_slabs import short_slab_gathers
from .tilefuse import tile_consumers
from .tilechain import chain_tiles
from .deadinit import drop_dead_inits
from .fission import split_calls
from .hfuse import fuse_nests
from .roll import LANES, roll_loops  # LANES: the partial sums of a reduction, here and in roll.py
from .ring import ring_temps
from .rowfuse import row_fuse
from .size_classes import decide, version_tests
from .loopir import AccAdd, Alloc, Assign, Break, If, KernelIR, Loop, Store, walk_stmts
from .scalars import COMPARISONS, VECTOR_TANH, code_fixed, compared_constants, exact_in_float32
from .parallel_split import SCATTER_SPLIT_FACTOR, THREADS_ARG, _rename_acc, reductions, split_scatters
from .rw import names, reads_writes

HEADER = '''"""Generated by tensorlang.backend; do not edit."""
import numpy as np
import numba
from numba import prange
from tensorlang.backend.scalars import kernel_function as _function
from tensorlang.backend.hugepages import advise_huge as _huge
from tensorlang.backend.intrinsics import imax as _imax, imin as _imin
from tensorlang.backend.intrinsics import new_empty as _new_empty, new_zeros as _new_zeros
from tensorlang.backend.intrinsics import new_empty_huge as _new_empty_huge, new_zeros_huge as _new_zeros_huge
from tensorlang.backend.intrinsics import load as _ld, store as _st, KernelCompiler as _KernelCompiler
from tensorlang.backend.intrinsics import SLPKernelCompiler as _SLPKernelCompiler, ParallelSLPCompiler as _ParallelSLPCompiler
from tensorlang.backend.vmath import tanh as _tanh

_OPTS = dict(cache={cache}, nogil=True, error_model="numpy", no_cfunc_wrapper=True)
F = np.{dtype}
U = np.uint64  # indices proven in bounds are non-negative: no wraparound test
'''




# Whether the variant being printed accesses arrays through the ``load``/``store``
# intrinsics (intrinsics.py): the serial one.  The parallel variant keeps
# subscripts, which Numba's parfor analyses read (an intrinsic call is opaque
# to them); it is not what a cold first call compiles.
_PRINT = threading.local()


def _intrinsic_access() -> bool:
    return getattr(_PRINT, "intrinsic", False)


def has_parallel(ir: KernelIR) -> bool:
    return (any(isinstance(s, Loop) and s.parallel for s in walk_stmts(ir.body)) or bool(reductions(ir))
            or split_scatters(ir) != list(ir.body) or bool(chunk_loops(serial_passes(ir))[1]))




def _chunked(loop: Loop, accs, depth: int, lines: list) -> None:
    """A reduction loop split into ``T`` contiguous chunks of its iterations,
    one ``prange`` iteration each, with partial sums combined in chunk order."""
    ind = "    " * depth
    v, st = loop.var, loop.step
    T, c, lo, cnt = f"{v}_T", f"{v}_c", f"{v}_lo", f"{v}_N"
    lines.append(f"{ind}{T} = _imax(1, {THREADS_ARG})\n")
    lines.append(f"{ind}{lo} = {expr(loop.lo)}\n")
    lines.append(f"{ind}{cnt} = _imax(0, ({expr(loop.hi)} - {lo} + {st - 1}) // {st})\n")
    for a in accs:
        lines.append(f"{ind}{a}_p = np.zeros({T}, dtype=F)\n")
    lines.append(f"{ind}for {c} in prange({T}):\n")
    for a in accs:
        lines.append(f"{ind}    {a}_q = F(0.0)\n")
    start, stop = f"(({cnt} * {c}) // {T})", f"(({cnt} * ({c} + 1)) // {T})"
    body = _rename_acc(loop.body, {a: f"{a}_q" for a in accs})
    if st == 1:  # the chunk as a loop node: printed like any loop (lanes included)
        start_e = K.IBin("//", K.IBin("*", K.Name(cnt), K.Name(c)), K.Name(T))
        stop_e = K.IBin("//", K.IBin("*", K.Name(cnt), K.IBin("+", K.Name(c), K.Int(1))), K.Name(T))
        chunk = Loop(v, K.IBin("+", K.Name(lo), start_e), K.IBin("+", K.Name(lo), stop_e), 1, body, loop.kind)
        # the chunk's own column partial sums (colsum.py), allocated in the
        # chunk: SIMD inner loops, as in the serial kernel
        _stmts(chunk_column_sums(chunk), depth + 1, False, lines, {})
    else:
        lines.append(f"{ind}    for {v}_k in range({start}, {stop}):\n")
        lines.append(f"{ind}        {v} = {lo} + {v}_k * {st}\n")
        _stmts(body, depth + 2, False, lines, {})  # no prange nested in a prange
    for a in accs:
        lines.append(f"{ind}    {a}_p[{c}] = {a}_q\n")
    lines.append(f"{ind}for {c} in range({T}):\n")
    for a in accs:
        lines.append(f"{ind}    {a} += {a}_p[{c}]\n")


def serial_passes(ir: KernelIR) -> KernelIR:
    """The serial variant's loop passes: row loops sweeping one matrix fused, in a
    loops-only version (rowfuse.py), independent nests over one domain fused
    (hfuse.py), reductions with column partial sums (colsum.py: SIMD inner loops),
    vectorizable calls split out of reduction loops (fission.py), short accumulated
    slabs gathered again, tile by tile of the outer index (short_slabs.py), the consumers
    of a tiled accumulation run in its tile loop on a tile buffer (tilefuse.py).  The other
    accumulated slabs are swept once per two points (jam.py) when a variant is printed
    (``printed_ir``)."""
    return tile_consumers(short_slab_gathers(split_calls(column_sums(fuse_nests(row_fuse(ir))))))


# (id(ir), par) -> (ir, the variant's loop IR before size classes decide): a kernel's
# all-versions source and its size class's source print the same passes' output, so they
# run once (the parallel variant's passes cost 25-30 ms of a cold call). The entry holds
# ``ir`` itself, so its id stays its own; a lowered KernelIR is never changed in place.
_PASSED: dict = {}


def printed_ir(ir: KernelIR, par: bool = False, truth: dict | None = None) -> KernelIR:
    """The loop IR a variant prints: the serial one (``par`` False) or the parallel one;
    ``truth``: a size class's test values (size_classes.py), the versions it cannot take dropped."""
    got = _PASSED.get((id(ir), par))
    if got is not None and got[0] is ir:
        run = got[1]
    else:
        run = _variant_passes(ir, par)
        if len(_PASSED) >= 16:
            _PASSED.clear()
        _PASSED[(id(ir), par)] = (ir, run)
    if truth:  # after the passes that make versions, before those that tune what is printed
        run = replace(run, body=list(decide(run.body, truth)))
    if not par:
        # a temporary read at most one tile back in two tiles (ring.py), after the class's
        # versions are decided: a reader it guards by a size test may have become unguarded
        run = ring_temps(run)
    # accumulated slabs swept once per two points (jam.py), last among the loop passes: the
    # isl questions before it (tilechain.py, chunks.py, ring.py) see each slab nest plain, where
    # a jammed nest's edge conditions made them cost 0.28 s of the deconvolution gradient's
    # cold call (0.02 s now); jam.py regroups a nest's iterations and touches no other statement
    run = jam_slabs(run)
    run = roll_loops(run, par)  # a stencil of substituted temporaries: rolling scalars (roll.py)
    run = hoist_offsets(run)  # index offsets LLVM can bound: SIMD inner loops (offsets.py)
    return drop_dead_inits(run)  # constants overwritten before a read: compile time only (deadinit.py)


def _variant_passes(ir: KernelIR, par: bool) -> KernelIR:
    """The serial or the parallel variant's loop passes, the ones that make versions."""
    run = serial_passes(ir)
    if par:
        # the serial kernel's loop nests in per-thread chunks (chunks.py); the other top-level
        # scatters in per-thread copies (parallel_split.py); a kernel with no loop chunks.py
        # takes keeps the earlier parallel variant: scatters split first, short slabs in copies
        # loops reading only their own tile of what an earlier loop writes run in it
        # (tilechain.py), whose tiles chunks.py still splits
        run, handled = chunk_loops(chain_tiles(run, same_tile=True))
        if handled:
            run = replace(run, body=split_scatters(run, handled))
        else:
            run = short_slab_gathers(replace(ir, body=split_scatters(ir)))
    else:
        run = chain_tiles(run)  # serial only: chunks.py splits the tiles the chain links
    return run


def source(ir: KernelIR, dtype: str = "float64", comment: str = "", cache: bool = True,
           truth: dict | None = None, tests: list | None = None) -> str:
    """Signature: source : KernelIR -> str (a Python module).  ``cache``: let
    Numba cache the compiled code next to the file (off for plain-Python runs).
    ``truth``: print a size class's variant (``printed_ir``); ``tests``: a list
    receiving the kernel's size tests (size_classes.version_tests)."""
    # Numba's cache of this file would not notice a called function changing
    # (its key covers only this file), so a kernel calling a user function is
    # cached only when every such function's machine code is fixed by its
    # code (``scalars.code_fixed``: module-level, no closure, defaults or
    # non-module globals), whose fingerprint is part of this file's key
    # (``api.key_options``): a changed function is a different file.
    cache = "True" if cache and all(code_fixed(fn) for fn in ir.functions.values()) else "False"
    out = [HEADER.format(cache=cache, dtype=dtype)]
    if comment:
        out.append("".join(f"# {line}\n" for line in comment.splitlines()))
    for name, fn in sorted(ir.functions.items()):
        out.append(f"{name} = _function({fn!r}, F)\n")
    # the comparisons whose constant operands a float32 kernel must round
    # towards the exact decision (scalars.compared_constants)
    compared = {name: COMPARISONS[fn] for name, fn in ir.functions.items()
                if fn in COMPARISONS} if dtype == "float32" else {}
    variants = [("kernel_serial", False)]
    if has_parallel(ir):
        variants.append(("kernel_parallel", True))
    for name, par in variants:
        run = printed_ir(ir, par, truth)
        _check_nesting(run, par)
        # see the module doc; SLP vectorization (intrinsics._SLPVectorizing) unless a
        # straight-line block is so long that LLVM's SLP pass would dominate the compile
        slp = _largest_block(run.body) <= SLP_MAX_BLOCK
        if par:
            opts = "**_OPTS, parallel=True" + (", pipeline_class=_ParallelSLPCompiler" if slp else "")
        else:
            opts = f"**_OPTS, no_rewrites=True, pipeline_class={'_SLPKernelCompiler' if slp else '_KernelCompiler'}"
        args = ir.args + [THREADS_ARG] if par else ir.args
        out.append(f"\n@numba.njit({opts})\ndef {name}({', '.join(args)}):\n")
        lines: list = []
        _PRINT.intrinsic = not par
        _PRINT.compared = compared
        _PRINT.float32 = dtype == "float32"
        if tests is not None:
            version_tests(ir, [run], tests)
        try:
            _stmts(run.body, 1, par, lines, reductions(run) if par else {})
        finally:
            _PRINT.intrinsic = False
            _PRINT.compared = {}
            _PRINT.float32 = False
        res = [f"{r}.copy()" if r in ir.copies else r for r in ir.results]
        lines.append(f"    return ({', '.join(res)}{',' if len(res) == 1 else ''})\n")
        out.append("".join(lines))
    return "".join(out)


def _float_ops(e) -> int:
    """Floating-point operations in the kernel-IR expression ``e``: a call of
    libm or of a user's function one, vmath's tanh (inlined arithmetic)
    ``TANH_OPS``."""
    match e:
        case K.FSum(terms=ts):
            return len(ts) - 1 + sum(_float_ops(t) for t in ts)
        case K.FMul(lhs=a, rhs=b) | K.FDiv(lhs=a, rhs=b):
            return 1 + _float_ops(a) + _float_ops(b)
        case K.FNeg(arg=a) | K.FPow(base=a):
            return 1 + _float_ops(a)
        case K.FCall(fn=fn, args=args, numpy=np_):
            inlined = fn == VECTOR_TANH and not np_  # vmath's tanh: arithmetic LLVM sees; others: one call
            return (TANH_OPS if inlined else 1) + sum(_float_ops(a) for a in args)
        case K.Select(then=a, orelse=b):
            return 1 + _float_ops(a) + _float_ops(b)
        case _:
            return 0


def _largest_block(stmts) -> int:
    """The most floating-point operations in one straight-line run of ``stmts``
    (statements between loops), over every loop body and branch."""
    best = run = 0
    for s in stmts:
        if isinstance(s, Loop):
            best, run = max(best, run, _largest_block(s.body)), 0
        elif isinstance(s, If):
            best = max(best, _largest_block(s.then), _largest_block(s.orelse))
        elif isinstance(s, (Assign, AccAdd, Store)):
            run += _float_ops(s.value)
    return max(best, run)


TANH_OPS = 80  # the instructions of vmath's tanh, about
# Floating-point operations in one straight-line block above which a kernel is compiled
# without SLP vectorization: LLVM's SLP pass grows faster than linearly in a block's
# length (a chain of N inlined tanh, session 14, cold compile without -> with SLP:
# N = 10 (821 ops) 0.48 -> 0.61 s, 25 (2051) 0.45 -> 0.73 s, 50 (4101) 0.95 -> 2.26 s,
# 100 (8201) 2.34 -> 6.17 s); the benchmark programs' largest blocks are 1-135 ops
SLP_MAX_BLOCK = 1024


# CPython compiles at most 20 statically nested blocks (``for``/``while`` loops; ``if`` is
# no block) in one function: a deeper kernel is a SyntaxError when its module is imported
MAX_NESTED_LOOPS = 20


def _check_nesting(run: KernelIR, par: bool) -> None:
    """Refuse (UnsupportedError) a printed kernel IR ``run`` whose loops nest deeper than
    Python compiles: the loop IR's depth, plus the chunk loop ``_chunked`` prints around a
    split reduction of the parallel variant.  Which statement is too deep is named by
    the arrays it stores to (their let names) or the scalars it assigns."""
    red = reductions(run) if par else {}
    for s in run.body:
        deep = _loop_depth(s, red)
        if deep > MAX_NESTED_LOOPS:
            from ..errors import UnsupportedError

            binding = {a.name: a.binding for a in walk_stmts(run.body) if isinstance(a, Alloc)}
            wrote = sorted({binding.get(x.array) or x.array for x in walk_stmts([s]) if isinstance(x, Store)}
                           | {x.target for x in walk_stmts([s]) if isinstance(x, (Assign, AccAdd))})
            raise UnsupportedError(
                f"the compiled kernel nests {deep} loops (the loop nest computing {', '.join(wrote[:4])}"
                f"{', ...' if len(wrote) > 4 else ''}); Python, and so Numba, compiles at most "
                f"{MAX_NESTED_LOOPS} nested loops in one function")


def _loop_depth(s, red: dict) -> int:
    if isinstance(s, Loop):
        return 1 + (id(s) in red) + max((_loop_depth(b, {}) for b in s.body), default=0)
    if isinstance(s, If):
        return max((_loop_depth(b, red) for b in s.then + s.orelse), default=0)
    return 0


def _stmts(stmts, depth: int, par: bool, lines: list, red: dict) -> None:
    """Print statements; ``red``: the top-level reductions to split (``reductions``)."""
    ind = "    " * depth
    if not stmts:
        lines.append(f"{ind}pass\n")
    for s in stmts:
        if isinstance(s, Loop) and id(s) in red:
            _chunked(s, red[id(s)], depth, lines)
            continue
        match s:
            case Alloc(name=n, zero=z, pooled=True):
                if z:
                    lines.append(f"{ind}{n}[...] = 0.0\n")
            case Alloc(name=n, shape=sh, zero=z) if not par:
                # one intrinsic, no separate Numba compilations (intrinsics.py); huge pages at top level
                shape = ", ".join(f"_imax(0, {expr(x)})" for x in sh)
                lines.append(f"{ind}{n} = _new_{'zeros' if z else 'empty'}{'_huge' if depth == 1 else ''}(({shape},), F)\n")
            case Alloc(name=n, shape=sh, zero=z) if depth == 1:
                # a top-level array: huge pages before the first write (hugepages.py)
                shape = ", ".join(f"_imax(0, {expr(x)})" for x in sh)
                lines.append(f"{ind}{n} = np.empty(({shape},), dtype=F)\n")
                lines.append(f"{ind}_huge({n})\n")
                if z:
                    lines.append(f"{ind}{n}[...] = 0.0\n")
            case Alloc(name=n, shape=sh, zero=z):
                shape = ", ".join(f"_imax(0, {expr(x)})" for x in sh)
                fn = "np.zeros" if z else "np.empty"
                lines.append(f"{ind}{n} = {fn}(({shape},), dtype=F)\n")
            case Loop(var=v, lo=lo, hi=hi, step=st, body=b, parallel=p) if p and par and st != 1:
                # prange needs unit steps: count the strided points instead
                lines.append(f"{ind}for {v}_t in prange(_imax(0, ({expr(hi)} - {expr(lo)} + {st - 1}) // {st})):\n")
                lines.append(f"{ind}    {v} = {expr(lo)} + {v}_t * {st}\n")
                _stmts(b, depth + 1, par, lines, {})
            case Loop(var=v, lo=lo, hi=hi, step=1, body=(AccAdd(target=t, value=val),), parallel=p) if (
                not (p and par) and s.kind in ("sum", "rel") and t not in names(val, set())
                and not getattr(_PRINT, "plain", False) and not _lanes_never_run(lo, hi)
            ):
                _lanes(v, lo, hi, t, val, ind, lines, s.lanes or LANES)
            case Loop(var=v, lo=lo, hi=hi, step=st, body=b) if (
                _intrinsic_access() and st == 1 and v not in reads_writes(b)[1]  # a body setting v: range's
            ):
                _while(v, expr(lo), expr(hi), ind, lines)
                _stmts(b, depth + 1, par, lines, {})
                lines.append(f"{ind}    {v} += 1\n")
            case Loop(var=v, lo=lo, hi=hi, step=st, body=b, parallel=p):
                rng = "prange" if (p and par) else "range"
                step = f", {st}" if st != 1 else ""
                lines.append(f"{ind}for {v} in {rng}({expr(lo)}, {expr(hi)}{step}):\n")
                _stmts(b, depth + 1, par, lines, {})
            case If(cond=K.Bool(value=v), then=t, orelse=e):  # decided for a size class (size_classes.py)
                plain = getattr(_PRINT, "plain", False)
                _PRINT.plain = plain or (s.cold and not v)
                try:
                    _stmts(t if v else e, depth, par, lines, red)
                finally:
                    _PRINT.plain = plain
            case If(cond=c, then=t, orelse=e):
                lines.append(f"{ind}if {expr(c)}:\n")
                _stmts(t, depth + 1, par, lines, red)
                if e:
                    lines.append(f"{ind}else:\n")
                    plain = getattr(_PRINT, "plain", False)
                    _PRINT.plain = plain or s.cold  # loops whose speed cannot matter: no lanes
                    try:
                        _stmts(e, depth + 1, par, lines, red)
                    finally:
                        _PRINT.plain = plain
            case Assign(target=t, value=v):
                lines.append(f"{ind}{t} = {expr(v)}\n")
            case AccAdd(target=t, value=v):
                lines.append(f"{ind}{t} += {expr(v)}\n")
            case Store(array=a, index=ix, value=v) if _intrinsic_access():
                lines.append(f"{ind}_st({a}, {expr(v)}, {', '.join(expr(i) for i in ix)})\n")
            case Store(array=a, index=ix, value=v):
                lines.append(f"{ind}{a}[{', '.join(_index(i) for i in ix)}] = {expr(v)}\n")
            case Break():
                lines.append(f"{ind}break\n")
            case Gemm(out=o, lhs=a, rhs=b):  # BLAS gemm/gemv through Numba's np.dot (blas.py)
                lines.append(f"{ind}np.dot({_view(a)}, {_view(b)}, {o})\n")
            case _:
                raise TypeError(f"not a loop-IR statement: {s!r}")


def _while(v: str, lo: str, hi: str, ind: str, lines: list) -> None:
    """The head of a serial kernel's loop ``for v in range(lo, hi)`` as
    ``v = lo; while v < v_e:``; the caller prints the body and ``v += 1``.
    Unit steps only: Numba's additions carry no no-wrap flag, so LLVM can
    count the iterations of ``v += 1`` up to ``v_e`` (it cannot pass it) but
    not of ``v += 4`` (it might wrap past it): a stepped ``while`` loop would
    lose unrolling and vectorization (the batched convolution's lanes loop:
    2.8 -> 3.5 ms), so stepped loops keep ``range``.  The printed kernels
    never ``continue``, and after a ``break`` ``v`` is the value it broke at,
    as with ``range``.  Numba types
    and lowers a ``range`` loop through its iterator protocol (``getiter``,
    ``iternext``, a range state, a pair per step), which LLVM reduces to the
    same counted loop: the ``while`` form gives the same machine code for
    about 10% less of a cold kernel's compile time (the deconvolution
    gradient's: 0.36 -> 0.33 s; issue #14 item 6).  The bound is read once,
    as ``range`` reads it."""
    lines.append(f"{ind}{v}_e = {hi}\n")
    lines.append(f"{ind}{v} = {lo}\n")
    lines.append(f"{ind}while {v} < {v}_e:\n")


def _lanes_never_run(lo, hi) -> bool:
    """A loop of fewer than ``LANES`` iterations at every size (constant
    bounds: the n-body's sums over 3 coordinates): its lanes' loop would never
    run, only be compiled (issue #14 item 6).  Printed plainly, its additions
    are the same, in the same order."""
    try:
        return K.evaluate_int(hi, {}) - K.evaluate_int(lo, {}) < LANES
    except (KeyError, TypeError):  # a bound naming a size or an index
        return False


def _lanes(v: str, lo, hi, acc: str, val, ind: str, lines: list, lanes: int = LANES) -> None:
    """An innermost reduction loop ``for v: acc += val`` with ``lanes``
    independent partial sums: one long chain of dependent additions is
    latency-bound (about 4 cycles each); ``lanes`` chains overlap (``LANES``,
    unless the loop asks for more: short_slabs.py).  Lane 0 is
    ``acc`` itself, the others start at 0 and are added, in lane order, after
    the loop: a fixed order of additions (threads do not change it)."""
    lo_n, hi_n = f"{v}_l", f"{v}_h"
    lines.append(f"{ind}{lo_n} = {expr(lo)}\n")
    lines.append(f"{ind}{hi_n} = {lo_n} + (_imax(0, {expr(hi)} - {lo_n}) // {lanes}) * {lanes}\n")
    for k in range(1, lanes):
        lines.append(f"{ind}{acc}_a{k} = F(0.0)\n")
    lines.append(f"{ind}for {v} in range({lo_n}, {hi_n}, {lanes}):\n")  # a stepped loop: see _while
    lines.append(f"{ind}    {acc} += {expr(val)}\n")
    for k in range(1, lanes):
        lines.append(f"{ind}    {acc}_a{k} += {expr(K.substitute(val, {v: K.IBin('+', K.Name(v), K.Int(k))}))}\n")
    if _intrinsic_access():
        _while(v, hi_n, expr(hi), ind, lines)
        lines.append(f"{ind}    {acc} += {expr(val)}\n")
        lines.append(f"{ind}    {v} += 1\n")
    else:
        lines.append(f"{ind}for {v} in range({hi_n}, {expr(hi)}):\n")
        lines.append(f"{ind}    {acc} += {expr(val)}\n")
    rest = f"{acc}_a1"
    for k in range(2, lanes):
        rest = f"({rest} + {acc}_a{k})"
    lines.append(f"{ind}{acc} += {rest}\n")


def _view(v: View) -> str:
    return f"{v.array}.T" if v.trans else v.array


def _index(e: K.KExpr) -> str:
    return f"U({expr(e)})"


def float_literal(v: float) -> str:
    if math.isnan(v):
        return "F(np.nan)"
    if math.isinf(v):
        return "F(np.inf)" if v > 0 else "F(-np.inf)"
    return f"F({v!r})"


def expr(e: K.KExpr) -> str:
    """Python source of a kernel-IR expression (every compound parenthesised)."""
    match e:
        case K.Int(value=v):
            return str(v) if v >= 0 else f"({v})"
        case K.Bool(value=v):
            return "True" if v else "False"
        case K.Float(value=v):
            return float_literal(v)
        case K.Name(name=n):
            return n
        case K.IBin(op=op, lhs=a, rhs=b):
            return f"({expr(a)} {op} {expr(b)})"
        case K.MinMax(fn=f, args=args):
            out = expr(args[0])
            for a in args[1:]:  # integers: intrinsics, not the built-ins (intrinsics.py)
                out = f"_i{f}({out}, {expr(a)})"
            return out
        case K.Select(test=t, then=a, orelse=b):
            return f"({expr(a)} if {expr(t)} else {expr(b)})"
        case K.Cmp(op=op, lhs=a, rhs=b):
            return f"({expr(a)} {op} {expr(b)})"
        case K.BoolOp(op=op, args=args):
            return "(" + f" {op} ".join(expr(a) for a in args) + ")"
        case K.Load(array=a, index=ix, unsigned=True) if _intrinsic_access():
            return f"_ld({a}, {', '.join(expr(i) for i in ix)})"
        case K.Load(array=a, index=ix, unsigned=u):
            return f"{a}[{', '.join(_index(i) if u else expr(i) for i in ix)}]"
        case K.FSum(terms=ts):
            return "(" + " + ".join(expr(t) for t in ts) + ")"
        case K.FMul(lhs=a, rhs=b):
            return f"({expr(a)} * {expr(b)})"
        case K.FDiv(lhs=a, rhs=b):
            return f"({expr(a)} / {expr(b)})"
        case K.FNeg(arg=a):
            return f"(-{expr(a)})"
        case K.FPow(base=b, exponent=k):
            if getattr(_PRINT, "float32", False) and not exact_in_float32(k):
                # F(k) would round the exponent: x ** 16777217 became x ** 16777216, +1 at
                # x = -1 (the parity decides the sign); computed in float64, then rounded
                return f"F(np.power(np.float64({expr(b)}), {k!r}))"
            return f"np.power({expr(b)}, {float_literal(k)})"
        case K.FCall(fn=f, args=args, numpy=True):
            return f"np.{f}({', '.join(expr(a) for a in args)})"
        case K.FCall(fn=f, args=args):
            op = getattr(_PRINT, "compared", {}).get(f)
            if op is not None and len(args) >= 2:  # float32 kernel: constants decide exactly (scalars.COMPARISONS)
                args = (*compared_constants(op, args[0], args[1]), *args[2:])
            return f"{f}({', '.join(expr(a) for a in args)})"
    raise TypeError(f"not a kernel-IR expression: {e!r}")


__all__ = ["source", "has_parallel", "expr", "float_literal", "reductions", "split_scatters", "THREADS_ARG",
           "LANES", "SCATTER_SPLIT_FACTOR"]
