"""Numba intrinsics for generated kernels (issue #14 item 6: compile latency; paper Section 4.3).

Each function here is typed and lowered by hand (``type_callable``,
``lower_builtin``: straight into the kernel's LLVM, no compilation of its
own), and is a plain Python function too (the kernels' plain-Python runs,
``api.python_kernel``); an overloaded function (``np.empty``, ``np.zeros``, the built-in
``max`` and ``min``) or a helper ``njit`` function (``advise_huge``) is a
separate Numba compilation (typing, lowering, LLVM) the first time a process
uses it at a type.  Measured on a cold first gradient: ``np.empty``'s
implementation 0.08-0.2 s, ``np.zeros`` 0.15 s, ``advise_huge`` 0.07-0.2 s
per rank, ``Array._allocate`` 0.03-0.1 s, ``max``/``min`` 0.03-0.2 s each
(2-core machine, load 3-5): most of the compile of a small kernel.

* ``imax(a, b)`` / ``imin(a, b)``: the built-in ``max`` / ``min`` of two numbers
  (the kernel IR's ``MinMax``), with the built-ins' own typing and code.
* ``new_empty``, ``new_zeros``, ``new_empty_huge``, ``new_zeros_huge``
  ``(shape, F)``: a serial kernel's arrays, instead of ``np.empty`` /
  ``np.zeros`` (and, at top level, ``hugepages.advise_huge``).  The machine code is the same allocation as ``np.empty``'s (Numba's
``_empty_nd_impl`` with its default allocator, NRT's
``meminfo_alloc_aligned``: C layout, the preferred alignment, the size
overflow check), then, for the ``_huge`` ones, the ``madvise(MADV_HUGEPAGE)`` advice of
``hugepages.py`` on the page-aligned part of a buffer of at least
``HUGE_MIN_BYTES``, then, for the ``zeros`` ones, a ``memset`` to 0 (all-zero bits are
``0.0``, as ``np.zeros`` and ``a[...] = 0.0`` give).
* ``load(a, i, j, ...)`` / ``store(a, v, i, j, ...)``: ``a[i, j, ...]`` and
  ``a[i, j, ...] = v`` at indices proven in bounds (the kernel IR's unsigned
  ``Load`` and every ``Store``), in serial kernels.  The machine code is
  Numba's own for ``a[np.uint64(i), np.uint64(j)]`` (``basic_indexing``: an
  unsigned index is not wrapped around; ``get_item_pointer`` then
  ``load_item``/``store_item``), but one typed call per access instead of an
  index tuple, a getitem and one ``np.uint64`` call per index: on the image
  and wave gradients' kernels about a fifth of Numba's typing and lowering.
"""

from __future__ import annotations

import inspect
import operator
import sys

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.core.compiler import Compiler, CompilerBase, DefaultPassBuilder
from numba.core.imputils import impl_ret_new_ref
from numba.extending import lower_builtin, type_callable
from numba.core.typing.templates import signature
from numba.core.types.functions import BaseFunction

from .hugepages import HUGE_MIN_BYTES, MADV_HUGEPAGE, PAGE

_LINUX = sys.platform.startswith("linux")


def _numba_array_lowering():
    """``numba.np.arrayobj``, imported when a kernel is lowered (every use is in a
    lowering function): a warm process loads machine code and lowers nothing, and
    the import is 30-45 ms of its first result (issue #14 item 6).  Numba's
    compiler imports it anyway (its target refresh) before any lowering runs."""
    from numba.np import arrayobj

    return arrayobj


def imax(a, b):
    """``max(a, b)``."""
    return max(a, b)


def imin(a, b):
    """``min(a, b)``."""
    return min(a, b)


def _minmax_typer(context):
    def typer(a, b):  # the built-ins' typing (numba.cpython.builtins.max_vararg)
        if isinstance(a, (types.Number, types.Boolean)) and isinstance(b, (types.Number, types.Boolean)):
            return context.unify_types(a, b)
        return None
    return typer


def _minmax_lower(op):
    def lower(context, builder, sig, args):  # the built-ins' code: Python's rule, NaN included
        from numba.cpython.builtins import do_minmax  # lowering only, as _numba_array_lowering

        return do_minmax(context, builder, list(sig.args), list(args), op)
    return lower


for _fn, _op in ((imax, operator.gt), (imin, operator.lt)):
    type_callable(_fn)(_minmax_typer)
    lower_builtin(_fn, types.Any, types.Any)(_minmax_lower(_op))


def _python_array(zero: bool):
    def make(shape, dtype):
        return np.zeros(shape, dtype=dtype) if zero else np.empty(shape, dtype=dtype)
    return make


new_empty, new_zeros = _python_array(False), _python_array(True)
new_empty_huge, new_zeros_huge = _python_array(False), _python_array(True)  # NumPy advises huge pages itself
for _fn, _name in ((new_empty, "new_empty"), (new_zeros, "new_zeros"), (new_empty_huge, "new_empty_huge"),
                   (new_zeros_huge, "new_zeros_huge")):
    _fn.__name__ = _fn.__qualname__ = _name


def _array_typer(context):
    def typer(shape, dtype):
        if (isinstance(shape, types.UniTuple) and isinstance(shape.dtype, types.Integer)
                and isinstance(dtype, types.NumberClass)):
            return types.Array(dtype.instance_type, shape.count, "C")
        return None
    return typer


def _array_lower(zero: bool, huge: bool):
    def lower(context, builder, sig, args):
        shape_t = sig.args[0]
        shapes = [context.cast(builder, v, shape_t.dtype, types.intp)
                  for v in cgutils.unpack_tuple(builder, args[0], count=shape_t.count)]
        ary, nbytes = _empty(context, builder, sig.return_type, shapes)
        if huge and _LINUX:
            _advise(builder, ary.data, nbytes)
        if zero:
            cgutils.memset(builder, ary.data, nbytes, 0)
        return impl_ret_new_ref(context, builder, sig.return_type, ary._getvalue())
    return lower


for _fn, _z, _h in ((new_empty, False, False), (new_zeros, True, False), (new_empty_huge, False, True),
                    (new_zeros_huge, True, True)):
    type_callable(_fn)(_array_typer)
    lower_builtin(_fn, types.UniTuple, types.NumberClass)(_array_lower(_z, _h))


def _empty(context, builder, arrtype, shapes):
    """Numba's ``_empty_nd_impl`` for a C-layout array, calling NRT's aligned
    allocator directly instead of through ``Array._allocate`` (an overload that
    is one more Numba compilation per process): ``(array, nbytes)``."""
    intp = context.get_value_type(types.intp)
    itemsize = context.get_constant(types.intp, _numba_array_lowering().get_itemsize(context, arrtype))
    n = context.get_constant(types.intp, 1)
    overflow = ir.Constant(ir.IntType(1), 0)
    for s in shapes:
        m = builder.smul_with_overflow(n, s)
        n = builder.extract_value(m, 0)
        overflow = builder.or_(overflow, builder.extract_value(m, 1))
    strides = [itemsize]
    for s in reversed(shapes[1:]):
        strides.append(builder.mul(strides[-1], s))
    m = builder.smul_with_overflow(n, itemsize)
    nbytes = builder.extract_value(m, 0)
    overflow = builder.or_(overflow, builder.extract_value(m, 1))
    with builder.if_then(overflow, likely=False):  # as np.empty (sizes here are at most MAX_SIZE per axis)
        context.call_conv.return_user_exc(
            builder, ValueError,
            ("array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size.",))
    align = context.get_constant(types.uint32, context.get_preferred_array_alignment(arrtype.dtype))
    meminfo = context.nrt.meminfo_alloc_aligned(builder, nbytes, align)
    arrayobj = _numba_array_lowering()
    ary = arrayobj.make_array(arrtype)(context, builder)
    arrayobj.populate_array(ary, data=builder.bitcast(context.nrt.meminfo_data(builder, meminfo),
                                             context.get_data_type(arrtype.dtype).as_pointer()),
                   shape=cgutils.pack_array(builder, shapes, ty=intp),
                   strides=cgutils.pack_array(builder, list(reversed(strides)), ty=intp),
                   itemsize=itemsize, meminfo=meminfo)
    return ary, nbytes


def _advise(builder, data, nbytes) -> None:
    """``madvise(lo, hi - lo, MADV_HUGEPAGE)`` over the whole pages of the buffer
    when it has at least ``HUGE_MIN_BYTES`` (``hugepages.advise_huge``, inline;
    by symbol name, so the code stays cacheable).  Advice only: a refusal leaves
    small pages and changes no value."""
    i64 = ir.IntType(64)
    big = builder.icmp_signed(">=", nbytes, ir.Constant(i64, HUGE_MIN_BYTES))
    with builder.if_then(big, likely=False):
        p = builder.ptrtoint(data, i64)
        lo = builder.and_(builder.add(p, ir.Constant(i64, PAGE - 1)), ir.Constant(i64, ~(PAGE - 1)))
        hi = builder.and_(builder.add(p, nbytes), ir.Constant(i64, ~(PAGE - 1)))
        with builder.if_then(builder.icmp_unsigned(">", hi, lo)):
            fnty = ir.FunctionType(ir.IntType(32), [i64, i64, ir.IntType(32)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "madvise")
            builder.call(fn, [lo, builder.sub(hi, lo), ir.Constant(ir.IntType(32), MADV_HUGEPAGE)])


def load(a, *index):
    """``a[index]``."""
    return a[index]


def store(a, v, *index):
    """``a[index] = v``."""
    a[index] = v


def _flat(names):
    """A fixed-arity Python signature for one call: its arguments stay
    separate in lowering (Numba's ``CallableTemplate`` takes the typer's
    ``pysig`` attribute, else its own signature, whose ``*index`` would make
    lowering pack the indices into a tuple).  Each typing makes a new typer
    (``type_callable``'s ``generic``), so the attribute is per call."""
    return inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])


def _indices(a, index) -> bool:
    return (isinstance(a, types.Array) and len(index) == a.ndim
            and all(isinstance(i, (types.Integer, types.IntegerLiteral)) for i in index))


@type_callable(load)
def _load_typer(context):
    def typer(a, *index):
        if not _indices(a, index):
            return None
        typer.pysig = _flat(["a"] + [f"i{k}" for k in range(len(index))])  # read by Numba after this call
        return signature(a.dtype, a, *index)
    return typer


@type_callable(store)
def _store_typer(context):
    def typer(a, v, *index):
        if _indices(a, index) and isinstance(v, (types.Number, types.Boolean)):
            typer.pysig = _flat(["a", "v"] + [f"i{k}" for k in range(len(index))])
            return signature(types.none, a, v, *index)
        return None
    return typer


def _pointer(context, builder, aryty, ary, index_types, index):
    """The element's address as Numba's ``basic_indexing`` computes it for
    unsigned indices (cast to ``uintp``, no wraparound, no bounds check)."""
    arr = _numba_array_lowering().make_array(aryty)(context, builder, ary)
    inds = [context.cast(builder, v, t, types.uintp) for v, t in zip(index, index_types)]
    return cgutils.get_item_pointer(context, builder, aryty, arr, inds, wraparound=False, boundscheck=False)


@lower_builtin(load, types.Array, types.VarArg(types.Any))
def _load_lower(context, builder, sig, args):
    ptr = _pointer(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
    return _numba_array_lowering().load_item(context, builder, sig.args[0], ptr)


@lower_builtin(store, types.Array, types.Any, types.VarArg(types.Any))
def _store_lower(context, builder, sig, args):
    aryty = sig.args[0]
    ptr = _pointer(context, builder, aryty, args[0], sig.args[2:], args[2:])
    val = context.cast(builder, args[1], sig.args[1], aryty.dtype)  # as setitem: the value in the array's type
    _numba_array_lowering().store_item(context, builder, aryty, val, ptr)
    return context.get_dummy_value()


__all__ = ["imax", "imin", "new_empty", "new_zeros", "new_empty_huge", "new_zeros_huge", "load", "store"]


# --------------------------------------------------------------------------
# The kernels' compiler pipelines


class _SLPVectorizing:
    """LLVM's SLP vectorizer on for the kernel being compiled (issue #13 item
    3: loops a compiler can vectorize).  Numba leaves it off
    (``NUMBA_SLP_VECTORIZE=0``); a printed kernel's reductions carry ``LANES``
    independent partial sums over consecutive elements (codegen._lanes,
    roll.py) precisely so that they become one vector operation, which only
    the SLP vectorizer does (the loop vectorizer may not reassociate a sum
    without fast-math flags).  SLP packs isomorphic scalar operations into
    vector ones with the same IEEE operations lane by lane, so every result
    is bit for bit the one without it (tests/backend/test_slp.py: six
    benchmark programs' values and gradients, serial, on two threads and in
    float32, compiled both ways).  Measured on
    the 2-core Xeon (session 14): the logistic regression's row loops 30 ->
    21 ms for ``X w`` at 50000 x 512.

    The switch is Numba's process-wide ``config.SLP_VECTORIZE``, read when
    the optimisation passes of a library are built; it is set only while this
    compilation runs (Numba's compiler lock is held for all of it, nested
    parfor bodies included), so other Numba code in the process keeps
    Numba's default."""

    def _compile_core(self):
        old = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = 1
        try:
            return super()._compile_core()
        finally:
            config.SLP_VECTORIZE = old


class _MemoTyping:
    """Numba's type inference resolves each call site afresh: ``a + b`` on two
    ``intp`` tries every template of ``+`` (ints, floats, complex, arrays, ...)
    each time, though a printed kernel repeats a few signatures hundreds of
    times (833 of the deconvolution gradient's 872 resolutions).  While one
    kernel compiles, its typing context resolves a function type (the
    operators, built-ins and intrinsics: ``BaseFunction``) once per argument
    types, and every later site gets the same signature: the first site's
    answer, the one Numba would give again, since a function type's templates
    see nothing but the types (literal values are part of a literal type).
    Failures and keyword calls go to Numba each time.  Numba's compiler lock
    is held for the whole compilation, nested parfor bodies included.  Cold
    first call, fresh processes, bitwise the same gradients: deconvolution
    1.48 -> 1.34 s, TV image prior 1.55 -> 1.44 s, tanh MLP 1.25 -> 1.16 s
    (issue #14 item 6)."""

    def _compile_core(self):
        ctx = self.state.typingctx
        if "resolve_function_type" in vars(ctx):  # a nested compilation: the outer one's memo serves
            return super()._compile_core()
        resolve, memo = ctx.resolve_function_type, {}

        def memoized(func, args, kws):
            if kws or not isinstance(func, BaseFunction):
                return resolve(func, args, kws)
            key = (func, tuple(args))
            try:
                got = memo.get(key)
            except TypeError:  # an unhashable argument type
                return resolve(func, args, kws)
            if got is None:
                got = resolve(func, args, kws)
                if got is not None:
                    memo[key] = got
            return got

        ctx.resolve_function_type = memoized
        try:
            return super()._compile_core()
        finally:
            del ctx.resolve_function_type


class KernelCompiler(_MemoTyping, CompilerBase):
    """Numba's nopython pipeline without the passes a printed serial kernel
    gives nothing to do (issue #14 item 6: each pass walks every line of a
    few-hundred-line kernel):

    * ``InlineClosureLikes``: inlines closures, ``make_function`` and array
      comprehensions; the kernels define none, so the pass only re-runs the
      post-processing ``IRProcessing`` already did (about 9% of the compile
      of the image gradient's kernel);
    * ``ReconstructSSA`` and ``PreLowerStripPhis`` (``enable_ssa`` off, as
      Numba's own object-mode loop lifting compiles): SSA lets one variable
      hold values of different types; a printed kernel gives each local one
      type (indices ``intp``, values ``F``, masks ``bool``), so typing the
      unversioned variables gives the same types, and LLVM's ``mem2reg``
      builds the SSA form the optimiser works on either way (another 10%).

    Everything else, the lowering and LLVM's optimisation included, is
    Numba's own, so the machine code is the same (:class:`SLPKernelCompiler`
    adds SLP vectorization).
    """

    SKIP = ("InlineClosureLikes", "ReconstructSSA", "PreLowerStripPhis")

    def define_pipelines(self):
        self.state.flags.enable_ssa = False
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.passes = [(p, d) for p, d in pm.passes if p.__name__ not in self.SKIP]
        pm._finalized = False
        pm.finalize()
        return [pm]


class SLPKernelCompiler(_SLPVectorizing, KernelCompiler):
    """The serial kernels' pipeline with SLP vectorization (codegen chooses it
    unless a straight-line block is longer than ``codegen.SLP_MAX_BLOCK``)."""


class ParallelSLPCompiler(_SLPVectorizing, _MemoTyping, Compiler):
    """The ``parallel=True`` variant's pipeline: Numba's own (parfors), with SLP."""
