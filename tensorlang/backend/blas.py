"""Dense contractions as BLAS calls inside the kernel (paper Section 4.3; issue #13 item 6).

Tensor SSA names every contraction: a binding

    x = gen[i:m] sum[k:p] A[i, k]·v[k]                     (GEMV)
    x = gen[i:m] gen[j:q] sum[k:p] A[i, k]·B[k, j]          (GEMM)

or one of its transposes (the adjoint's ``gen[k] sum[i] A[i, k]·r[i]`` is
``Aᵀ r``; ``gen[l, m] sum[o] D[l, o]·W[m, o]`` is ``D Wᵀ``).  Loops compute
these at a fraction of the machine's speed (a transposed GEMV walks a column,
one cache line per multiply-add); BLAS does them blocked and vectorised.

:func:`match` recognises such a binding from its typed form alone (never from
source text): a gen over one or two indices whose body is a single sum over
one index of a product of two dense array reads, each index a bare loop
variable, with no bracket anywhere (a guard such as ``[i < j]`` inside the
sum is not a matrix product) and every loop's range the whole extent of the
array dimension it indexes (full boxes: the array *is* the operand, no
slicing).  It returns a :class:`Gemm` statement ``out = lhs · rhs``
(codegen prints ``np.dot(lhs, rhs, out)``, Numba's BLAS gemm/gemv binding,
and a transposed :class:`View` as ``a.T``, which Numba passes to BLAS as a
transpose flag: no copy).

The lowering keeps the loop nest too and chooses at run time, from the
sizes: :func:`worth_blas` is true when every extent is at least 1 and the
multiply-add count reaches ``BLAS_MIN_WORK`` (a call into BLAS costs about a
microsecond of set-up; below that, the loops win).  Every kernel array is
C-contiguous (inputs are made so before the call, allocations are fresh), so
the views are what BLAS reads directly.  Results equal the loops' up to the
order of additions.  The loops are right at every size: a kernel compiled
for sizes below the BLAS test prints them alone, no BLAS call to compile
(size_classes.py); one for larger sizes keeps both.

A GEMV whose matrix is past the caches (``WITNESS_MIN`` elements) runs loops
instead: ``A v`` row by row with A's finiteness witness (below), and ``vᵀA``
(the adjoint's ``Aᵀ r``) as a row-order scatter, ``out[:] += A[i, :]·v[i]``.
Either is one streaming pass over A, as BLAS's is, and rowfuse.py fuses such
row loops over the same matrix into one pass (issue #13: the quadratic
form's gradient reads A once).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from ..ir import REAL, Access, Add, Call, Iverson, Mul, SparseVar, Sum, TensorT, Var, access, accesses, free_indices, fresh_var, gens, make_gens, sums
from . import kir as K
from .domains import aff_expr
from .loopir import AccAdd, Alloc, Assign, If, Loop, Store

# Numba's np.dot calls the BLAS that SciPy ships (scipy.linalg.cython_blas); SciPy is a core
# dependency for it, and an environment without SciPy keeps every product's loops
HAVE_BLAS = importlib.util.find_spec("scipy") is not None
# multiply-adds below which the loop nest runs instead of the BLAS call
BLAS_MIN_WORK = 4096
# matrix elements from which a witnessed GEMV runs its loops (finite_witness)
WITNESS_MIN = 1 << 22
# extents are capped before multiplying (no int64 overflow: (2^20)^3 < 2^63)
_CAP = 1 << 20


@dataclass(frozen=True)
class View(K.KExpr):
    """A whole kernel array (1-D or 2-D) as a BLAS operand, transposed if ``trans``."""

    array: str
    trans: bool = False


@dataclass(frozen=True)
class Gemm:
    """Loop-IR statement ``out = lhs · rhs`` over whole arrays (``np.dot(lhs, rhs, out)``):
    matrix·matrix, matrix·vector or vector·matrix.  ``out`` is written entirely."""

    out: str
    lhs: View
    rhs: View

    def arrays_read(self) -> tuple:
        return (self.lhs.array, self.rhs.array)


@dataclass(frozen=True)
class Contraction:
    """What :func:`match` found: ``out = lhs · rhs`` with operand bases and
    ``dims``, the extents (Aff) of the product's m, n and k (n None for GEMV)."""

    lhs: tuple  # (base Expr, transposed)
    rhs: tuple
    dims: tuple


def _same(a, b) -> bool:
    """Equal affine extents (``==`` on ``Aff`` builds a predicate)."""
    return (a.terms, a.const) == (b.terms, b.const)


def _bare(a, binders):
    """The binder a bare index ``a`` is, else None."""
    if a.const == 0 and len(a.terms) == 1 and a.terms[0][1] == 1 and a.terms[0][0] in binders:
        return a.terms[0][0]
    return None


def _operand(e, extents: dict):
    """``(base, (binder, ...))`` for a dense read at bare distinct indices, each
    ranging over its dimension's whole extent; else None."""
    if not isinstance(e, Access):
        return None
    base, idx = accesses(e)
    if not isinstance(base, Var) or isinstance(base, SparseVar) or len(idx) not in (1, 2):
        return None
    got = tuple(_bare(a, extents) for a in idx)
    if None in got or len(set(got)) != len(got):
        return None
    return base, got


def match(gb, body, shape_of) -> Contraction | None:
    """The contraction ``gen[gb] body`` computes, or None.

    ``gb``: the gen binders ``[(var, extent)]``; ``shape_of(base)`` gives the
    extents (Aff) of an operand array, or None when it is not a plain dense
    array (a sparse tensor, an array packed on a relation)."""
    binds, inner = sums(body)
    if len(gb) not in (1, 2) or len(binds) != 1 or not isinstance(inner, Mul):
        return None
    (k, p), = binds
    out = [v for v, _ in gb]
    extents = {v: n for v, n in gb}
    extents[k] = p
    if len(extents) != len(gb) + 1:
        return None
    ops = [_operand(inner.lhs, extents), _operand(inner.rhs, extents)]
    if None in ops or any(isinstance(x, Iverson) for x in (inner.lhs, inner.rhs)):
        return None
    for base, idx in ops:
        shape = shape_of(base)
        if shape is None or len(shape) != len(idx) or not all(_same(s, extents[v]) for s, v in zip(shape, idx)):
            return None
        if k not in idx:
            return None  # a factor constant in k: not a contraction over k
    used = [v for _, idx in ops for v in idx if v != k]
    if sorted(used, key=out.index) != out or len(used) != len(out):
        return None  # each output index in exactly one operand
    if len(out) == 1:
        (mb, mi), (vb, vi) = sorted(ops, key=lambda o: len(o[1]), reverse=True)
        if len(mi) != 2 or len(vi) != 1:
            return None
        if mi == (out[0], k):  # A[i,k]·v[k]: A v
            return Contraction((mb, False), (vb, False), (extents[out[0]], None, p))
        return Contraction((vb, False), (mb, False), (extents[out[0]], None, p))  # A[k,i]·v[k]: v A
    i, j = out
    left = next(o for o in ops if i in o[1])
    right = next(o for o in ops if j in o[1])
    if left is right or len(left[1]) != 2 or len(right[1]) != 2:
        return None
    return Contraction((left[0], left[1] != (i, k)), (right[0], right[1] != (k, j)),
                       (extents[i], extents[j], p))


def worth_blas(dims) -> K.KExpr:
    """The run-time test choosing the BLAS call over the loops (kernel IR):
    every extent at least 1 and ``m·n·k >= BLAS_MIN_WORK``."""
    work, tests = K.Int(1), []
    for d in _canonical(dims):
        if K.Cmp(">=", d, K.Int(1)) not in tests:
            tests.append(K.Cmp(">=", d, K.Int(1)))
        work = K.IBin("*", work, K.MinMax("min", (d, K.Int(_CAP))))
    return K.and_of(tests + [K.Cmp(">=", work, K.Int(BLAS_MIN_WORK))])


def _canonical(dims) -> list:
    """The extents present in ``dims``, in one fixed order (by their kernel-IR
    structure): ``A x`` and ``vᵀA`` over one matrix get the same size test,
    so rowfuse.py's version test and its else branch see one choice."""
    return sorted((d for d in dims if d is not None), key=repr)


def dense_shape(lw, base):
    """The extents of ``base`` when it is a whole dense kernel array (an
    input or a let array of the Lowerer ``lw``), else None."""
    if isinstance(base, SparseVar) or base in lw.packed:
        return None
    if isinstance(base, Var) and base not in lw.arrays and lw._leaf(base) is None:
        return None
    try:
        _, ext = lw.array_of(base)
    except UnsupportedError:
        return None
    return None if any(n is None for n in ext) else tuple(ext)


def lower_gemm(lw, x, gb, rhs, stmts: list) -> list:
    """The statements of the top-level binding ``x = rhs`` (``stmts``: its
    allocation, then its loop nest, as the lowering made them) with the loop
    nest behind the run-time choice ``If(worth_blas, [Gemm], loops)`` when
    ``rhs`` is a dense matrix product; else ``stmts`` unchanged."""
    got = match(gb, gens(rhs)[1], lw.dense_shape) if HAVE_BLAS else None
    name, _ = lw.arrays[x]
    if got is None or not stmts or not isinstance(stmts[0], Alloc) or stmts[0].name != name or stmts[0].zero:
        return stmts
    lhs = View(lw.array_of(got.lhs[0])[0], got.lhs[1])
    rhs_v = View(lw.array_of(got.rhs[0])[0], got.rhs[1])
    dims = tuple(None if d is None else aff_expr(d, lw.scope0) for d in got.dims)
    use = worth_blas(dims)
    wit = _witnessed(lw, got)
    if wit is None and _row_order(lw, got):
        # vᵀA past the caches: the loops, row by row (a row loop over A that
        # rowfuse.py can share with the other sweeps of A in the kernel)
        use = K.and_of([use, _small(dims)])
        return [stmts[0], If(use, (Gemm(name, lhs, rhs_v),), _rows_vtA(lw, name, lhs.array, rhs_v.array, dims),
                             general="orelse")]
    if wit is None:
        # the loops run only below BLAS_MIN_WORK or at an extent 0 (cold)
        return [stmts[0], If(use, (Gemm(name, lhs, rhs_v),), tuple(stmts[1:]), cold=True, general="orelse")]
    # a matrix past the caches: the loops, which witness its finiteness (below)
    use = K.and_of([use, _small(dims)])
    return [stmts[0], If(use, (Gemm(name, lhs, rhs_v),), tuple(stmts[1:]), general="orelse")] + \
        finite_witness(lw, wit, name, got.dims[0], use)


def _small(dims) -> K.KExpr:
    """The matrix of a GEMV with extents ``dims`` (m, None, k) has fewer than ``WITNESS_MIN`` elements."""
    m, k = _canonical((dims[0], dims[2]))
    return K.Cmp("<", K.IBin("*", K.MinMax("min", (m, K.Int(_CAP))), K.MinMax("min", (k, K.Int(_CAP)))),
                 K.Int(WITNESS_MIN))


def _row_order(lw, got) -> bool:
    """``got`` is ``vᵀA`` (``gen[k] sum[i] v[i]·A[i, k]``, A not transposed):
    a GEMV whose left operand is the vector (``A v`` has the matrix there)."""
    shape = lw.dense_shape(got.lhs[0])
    return got.dims[1] is None and not got.lhs[1] and not got.rhs[1] and len(got.dims) == 3 \
        and got.lhs[0] is not got.rhs[0] and shape is not None and len(shape) == 1


def _rows_vtA(lw, out: str, v: str, a: str, dims) -> tuple:
    """``out = vᵀA`` as loops that read A row by row (kernel IR)::

        for k: out[k] = 0
        for i: c = v[i]; for k: out[k] += A[i, k]·c

    Each ``out[k]`` receives the terms in the gather's order (i ascending);
    the inner loop is stride 1 in A and ``out`` with no carried dependence
    (it vectorizes).  For a matrix past the caches this is one streaming
    pass over A, as a BLAS gemv is; unlike BLAS it is a loop nest that
    rowfuse.py can fuse with another row loop over A."""
    k0, i, k, c = lw.names.new("index"), lw.names.new("index"), lw.names.new("index"), lw.local()
    cols, rows = dims[0], dims[2]
    zero = Loop(k0, K.Int(0), cols, 1, (Store(out, (K.Name(k0),), K.Float(0.0)),), "gen")
    acc = Store(out, (K.Name(k),), K.FSum((K.Load(out, (K.Name(k),)),
                                           K.FMul(K.Load(a, (K.Name(i), K.Name(k))), K.Name(c)))))
    inner = Loop(k, K.Int(0), cols, 1, (acc,), "gen")
    return (zero, Loop(i, K.Int(0), rows, 1, (Assign(c, K.Load(v, (K.Name(i),))), inner), "scatter"))


# -- finiteness witnesses (issue #13: the NaN/inf scan of a large input) ----------------------
#
# Every call refuses NaN and infinity in its inputs (dispatch.check_finite):
# the rewrites that made the kernel (0·x = 0, x - x = 0, skipped points) are
# exact over the reals only.  That scan is a pass over each input; for the
# matrix of a matrix-vector product (logistic regression's 205 MB X) it costs
# as much as the product.  The product's own loops can witness it instead:
#
#     y[i] = sum_k A[i, k]·v[k]   (v finite, checked as before)
#
# In IEEE arithmetic a product of a non-finite and a finite number is
# non-finite (inf·0 = NaN), and a sum with a non-finite term is non-finite in
# any order of additions (inf + -inf = NaN, NaN + x = NaN); every A[i, k] is
# a term of y[i].  So A has a non-finite element only if y has one, and ``w = sum_i (y[i] - y[i])`` (0, or NaN when some y[i] is not
# finite) is one scalar the kernel returns beside its results.  The caller
# (api.Kernel) then skips A's scan and checks ``w`` after the call; a NaN
# ``w`` scans A (InputError when A is to blame; a finite A whose product
# overflowed keeps the computed answer, as before).  A BLAS gemv may skip
# zero multipliers (the reference BLAS did until 2014), so a witnessed
# product runs the kernel's own loops (no fastmath: IEEE as written), which
# read A once, as BLAS does, at the same memory-bound speed for a GEMV whose
# matrix is past the caches (``WITNESS_MIN`` elements, 32 MB of float64).  A
# smaller one keeps BLAS, its witness is NaN and the caller scans A after the
# call, as it did before it.


def _witnessed(lw, got):
    """``(input leaf of A, partner leaf)`` when ``got`` is ``A v`` with A a dense
    2-D input and v a dense 1-D input (the kernel's own checks cover v), else None."""
    if lw.mode != "sparse" or got.dims[1] is not None or got.lhs[1] or got.rhs[1]:
        return None
    a, v = lw._leaf(got.lhs[0]), lw._leaf(got.rhs[0])
    if a is None or v is None or a not in lw.leaves or v not in lw.leaves or a == v:
        return None
    if len(lw.leaves[a][1]) != 2 or len(lw.leaves[v][1]) != 1:
        return None
    if any(a == w[0] for w in lw.witnesses):
        return None
    return a, v


def finite_witness(lw, wit, array: str, extent, blas) -> list:
    """``w = 0; for i: w += y[i] - y[i]`` over the GEMV's output ``array``
    (kernel IR), registered on the Lowerer as witness of the input ``wit[0]``;
    NaN (no witness: the caller scans) when ``blas`` held and BLAS computed ``y``."""
    acc, i = lw.local(), lw.names.new("index")
    y = K.Load(array, (K.Name(i),))
    loop = Loop(i, K.Int(0), aff_expr(extent, lw.scope0), 1, (AccAdd(acc, K.FSum((y, K.FNeg(y)))),), "sum")
    lw.witnesses.append((wit[0], acc))
    return [Assign(acc, K.Float(0.0)), If(blas, (Assign(acc, K.Float(math.nan)),), (loop,))]



def extract_products(binders, body, shape_of):
    """``([(c, gen[...] S)], body')``: each matrix product ``S`` (a sum that
    :func:`match` accepts over the ``binders`` it uses) found inside the
    scalar ``body`` of a top-level binding, through ``+``, ``·``, function
    calls and sums (whose binders count as loops), bound to a fresh array ``c`` and
    read as ``c[i, ...]`` in ``body'``.  Tensor-SSA fusion (fusion.py) puts
    ``y = A x`` inside its single consumer (``dY = y + y``): computing it
    apart again is what lets BLAS run it.  Sums under a bracket are left
    alone (the bracket may skip most of their points)."""
    if not HAVE_BLAS or (binders and match(binders, body, shape_of) is not None):
        return [], body  # the binding is the product itself (lower_gemm)
    found: dict = {}
    order = list(binders)

    seen: set = set()  # a shared sub-term is looked at once (2^K paths in a DAG of K levels)

    def visit(e):
        if e in seen:
            return
        seen.add(e)
        match e:
            case Sum():
                got = _candidate(e)
                if got is not None:
                    found[e] = got
                    return
                binds, inner = sums(e)  # its points are the loops' points: look inside
                order.extend(binds)
                visit(inner)
            case Add(lhs=a, rhs=b) | Mul(lhs=a, rhs=b):
                visit(a)
                visit(b)
            case Call(args=args):
                for a in args:
                    visit(a)

    def _candidate(e):
        used = free_indices(e)
        outs = [(v, n) for v, n in order if v in used]
        if len(outs) != len(used) or not outs or match(outs, e, shape_of) is None:
            return None
        return outs

    visit(body)
    if not found:
        return [], body
    pre, repl = [], {}
    for e, outs in found.items():
        t = REAL
        for _, n in reversed(outs):
            t = TensorT(n, t)
        c = fresh_var("mm", t)
        pre.append((c, make_gens(outs, e)))
        repl[e] = access(c, [v for v, _ in outs])
    return pre, _replace(body, repl)


def _replace(e, repl: dict):
    got = repl.get(e)
    if got is not None:
        return got
    match e:
        case Sum(var=v, extent=n, body=b):
            return Sum(v, n, _replace(b, repl))
        case Add(lhs=a, rhs=b):
            return Add(_replace(a, repl), _replace(b, repl))
        case Mul(lhs=a, rhs=b):
            return Mul(_replace(a, repl), _replace(b, repl))
        case Call(fn=f, args=args):
            return Call(f, tuple(_replace(a, repl) for a in args))
    return e


__all__ = ["View", "Gemm", "Contraction", "match", "worth_blas", "lower_gemm", "extract_products", "BLAS_MIN_WORK"]
