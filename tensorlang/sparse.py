"""Sparse tensors and prepared relation data (issue 16; issue 13 item 1).

Paper Section 4.3 (relations as data predicates, rule 4.20) and Section 6
(the adjoint of a relation-guarded program stays guarded).

* ``sparse_tensor("A", S)`` declares an input of type ``[n][m]R`` stored on
  the relation ``S`` (an :class:`~tensorlang.ir.SparseVar`).  Every read the
  API builds, ``A[i, j]``, is ``[S(i, j)]·A[i][j]``: typing, normal forms,
  the total and adjoint derivatives, simplification and the cost model see
  an ordinary variable under a relation bracket, so loops narrow to S's
  non-zeros and the adjoint of ``A`` is a gen guarded by ``[S(i, j)]``.
* :class:`RelationData` is a relation's data prepared once: its coordinates
  sorted and unique, plus (on demand, cached) the dense table and the
  CSR-like arrays a kernel iterates.  ``relation_data(x)`` builds one from a
  boolean mask, integer coordinate rows or a scipy.sparse matrix, and keeps
  it in a cache keyed by the array: identity plus an exact comparison with a
  copy of the array's structure, so a mutated array is converted again and
  a stale entry is never used.
* :func:`prepare` turns the call's sparse data (scipy.sparse in any format,
  or ``(coords, values)``) into :class:`SparseData` (values aligned with the
  relation's sorted coordinates) and fills in, or checks, the relation's
  data.  :func:`to_sparse` turns a cotangent into a ``scipy.sparse.csr_matrix``
  with exactly the relation's pattern.

Duplicates are summed and explicit zeros are stored entries, as scipy
defines them.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from .errors import InputError, TensorLangError
from .relation_data import (  # noqa: F401 - re-exported: tl.relation_data, RelationData
    RelationData,
    _build_relation,
    _cached,
    _canonical_csr,
    _check_range,
    _coords_array,
    _csr_coords,
    _is_scipy,
    _lex_sort_unique,
    _structure,
    relation_data,
)
from .ir import Access, Gen, Iverson, Rel, Relation, SparseVar, Var, as_aff, fresh_index, free_vars, input_vars, tensor_type

# --------------------------------------------------------------------------
# Declaring


def sparse_tensor(name: str, rel) -> SparseVar:
    """An input of type ``[n0]...[nk]R`` whose values exist only where ``rel`` holds."""
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorLangError(f"the name of a sparse tensor must be an identifier string, got {name!r}")
    if not isinstance(rel, Relation):
        raise TensorLangError(f"sparse tensor {name!r}: expected a relation (tl.relation), got {rel!r}")
    if not rel.extents:
        raise TensorLangError(f"sparse tensor {name!r}: relation {rel.name} has no extents")
    return SparseVar(name, 0, tensor_type(list(rel.extents)), rel)


def guarded_read(v: SparseVar, keys) -> object:
    """``A[k0, ...]`` for a sparse tensor: the access under ``[S(k0, ...)]``;
    a partial access is the gen over the remaining indices (a row of A, 0 off S)."""
    keys = [as_aff(k) for k in keys]
    rest = [fresh_index("j") for _ in range(len(v.rel.extents) - len(keys))]
    idx = keys + [as_aff(j) for j in rest]
    body = v
    for a in idx:
        body = Access(body, a)
    out = mark_guard(Iverson(v.rel(*idx), body))
    for j, n in reversed(list(zip(rest, v.rel.extents[len(keys):]))):
        out = Gen(j, n, out)
    return out


def hoist_guards(e):
    """``([S(a)]·x)·b -> [S(a)]·(x·b)`` (and ``a·([S(a)]·x)``) for the brackets
    of sparse tensors' relations, bottom-up: the product of a sparse read
    with anything is zero off S (the bracket is a hard zero, rule 4.12, as
    the lowering's own hoisting already takes it), so the normal forms that
    name sub-terms of the product name them under the bracket and their
    gens are narrowed to S's non-zeros instead of being dense n x m."""
    from .ir import Expr, Mul, Rel, children, rebuild

    rels = {v.rel for v in sparse_inputs(e)}
    if not rels:
        return e
    memo: dict = {}

    def guard(x):
        return isinstance(x, Iverson) and isinstance(x.pred, Rel) and x.pred.rel in rels

    def go(x):
        got = memo.get(x)
        if got is not None:
            return got
        if isinstance(x, Var):
            out = x
        else:
            out = rebuild(x, tuple(go(c) if isinstance(c, Expr) else c for c in children(x)))
        if isinstance(out, Mul):
            a, b = out.lhs, out.rhs
            if guard(a):
                out = Iverson(a.pred, Mul(a.body, b))
            elif guard(b):
                out = Iverson(b.pred, Mul(a, b.body))
        memo[x] = out
        return out

    return go(e)


def mark_guard(e):
    """``[S(a)]·e`` built for a sparse read; it is a guard by its shape alone (:func:`is_guard`)."""
    if not is_guard(e):  # pragma: no cover - guarded_read and the API's product build only guards
        raise TensorLangError(f"internal: {e!r} is not a sparse read's bracket")
    return e


def is_guard(e) -> bool:
    """Is ``e`` a sparse read's bracket ``[S(a)]·b``: ``S`` the relation of a
    sparse tensor that ``b`` reads?  The API multiplies such a bracket's
    product under it (``([S(a)]·A[a])·y`` is built as ``[S(a)]·(A[a]·y)``,
    rule 4.12), so the product's gens are narrowed to S's non-zeros.

    A function of the interned node alone (never a mark stored on it): an
    identical node built by hand is the same node and gets the same answer,
    whatever was built before; a bracket of S over dense tensors is none."""
    if not (isinstance(e, Iverson) and isinstance(e.pred, Rel)):
        return False
    rel = e.pred.rel
    return any(isinstance(v, SparseVar) and v.rel is rel for v in free_vars(e.body))


def sparse_inputs(program) -> list:
    """The program's sparse tensor inputs, sorted by name."""
    return [v for v in input_vars(program) if isinstance(v, SparseVar)]


def tangent_of(x: Var, dx: Var) -> Var:
    """The tangent input of ``x``: sparse on the same relation when ``x`` is."""
    if isinstance(x, SparseVar):
        return SparseVar(dx.name, dx.uid, dx.type, x.rel)
    return dx


# --------------------------------------------------------------------------
# Sparse tensor data


class SparseData:
    """A sparse tensor's value: ``values[p]`` at ``rel.coords[p]``."""

    __slots__ = ("rel", "values")

    def __init__(self, rel: RelationData, values: np.ndarray):
        self.rel, self.values = rel, values

    def permuted(self, perm, dtype) -> np.ndarray:
        """The values in the order a relation loop with columns ``perm`` visits
        them (a gather through the CSC permutation prepared once)."""
        v = self.values
        if tuple(perm) != tuple(range(self.rel.arity)):
            v = v[self.rel.order(perm)]
        return np.ascontiguousarray(v, dtype=dtype)

    def dense(self, dtype=np.float64) -> np.ndarray:
        d = np.zeros(self.rel.shape, dtype=dtype)
        if self.rel.nnz:  # one store through linear indices into the flat view (not a fancy index per column)
            d.reshape(-1)[self.rel.flat_index()] = self.values
        return d


def _values_array(v, what: str) -> np.ndarray:
    arr = np.asarray(v)
    if arr.dtype == object:  # exact values (numbers, sympy terms) for the exact evaluator
        import numbers

        import sympy

        bad = next((x for x in arr.flat if isinstance(x, bool) or not isinstance(x, (numbers.Real, sympy.Expr))), None)
        if bad is not None or arr.ndim != 1:
            raise InputError(f"{what}: exact values must be real numbers or sympy expressions, got {bad!r}")
        return arr
    if arr.dtype.kind not in "fiu" or arr.dtype == bool:
        raise InputError(f"{what}: values must be real numbers, got dtype {arr.dtype}")
    if arr.dtype != np.float32:
        arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{what}: values contain NaN or infinity")
    return arr


def _pattern_and_values(v: SparseVar, data, shape):
    """(RelationData of the data's own pattern, values aligned with it)."""
    what = f"sparse tensor {v.name}"
    arity = len(v.rel.extents)
    if _is_scipy(data):
        if arity != 2:
            raise InputError(f"{what} is stored on the {arity}-ary relation {v.rel.name}; pass (coords, values)")
        m = _canonical_csr(data)
        rd = _cached(data, _build_relation, what) if _structure(data) is not None else RelationData(_csr_coords(m), m.shape)
        return rd, _values_array(m.data, what)
    if isinstance(data, tuple) and len(data) == 2:
        coords = _coords_array(data[0], what, arity)
        vals = _values_array(data[1], what)
        if vals.shape != (len(coords),):
            raise InputError(f"{what}: {len(coords)} coordinate rows but values of shape {vals.shape}")
        if shape is None:
            raise InputError(f"{what}: given as (coords, values), its shape is unknown; pass the data of relation {v.rel.name} or the sizes")
        _check_range(coords, shape, what)
        rd = RelationData(_lex_sort_unique(coords), shape)
        pos = np.searchsorted(rd.linear(), _linear(coords, shape))
        out = np.zeros(rd.nnz, dtype=vals.dtype)
        np.add.at(out, pos, vals)  # duplicates summed, as scipy's COO defines
        return rd, out
    if isinstance(data, SparseData):
        return data.rel, data.values
    raise InputError(f"{what} needs scipy.sparse data or a (coords, values) pair, got {type(data).__name__}")


def _linear(coords, shape) -> np.ndarray:
    out = np.zeros(len(coords), dtype=np.int64)
    for k, n in enumerate(shape):
        out = out * n + coords[:, k]
    return out


def _align(pat: RelationData, vals, rel: RelationData, what: str, rname: str) -> np.ndarray:
    """Values on ``pat`` moved onto ``rel``'s coordinates (0 where ``pat`` has none)."""
    if pat is rel or (pat.nnz == rel.nnz and np.array_equal(pat.coords, rel.coords)):
        return vals
    a, b = pat.linear(), rel.linear()
    pos = np.searchsorted(b, a)
    bad = (pos >= len(b)) | (b[np.minimum(pos, max(len(b) - 1, 0))] != a) if len(b) else np.ones(len(a), bool)
    if len(a) and np.any(bad):
        k = int(np.argmax(bad))
        raise InputError(f"{what} stores an entry at {tuple(int(c) for c in pat.coords[k])}, where relation {rname} does not hold")
    out = np.zeros(rel.nnz, dtype=vals.dtype)
    out[pos] = vals
    return out


def _sizes_from(program, kwargs, rel: Relation):
    """The relation's extents when every size in them is given as an int or
    is the length of a dense input's axis declared with that size alone
    (InputErrors about disagreeing shapes are left to ``prepare_inputs``)."""
    from .ir import SizeVar, TensorT

    env = {}
    for v in input_vars(program):
        val = kwargs.get(v.name)
        if isinstance(v, SparseVar) or not isinstance(val, np.ndarray) or not isinstance(v.type, TensorT):
            continue
        t, axis = v.type, 0
        while isinstance(t, TensorT) and axis < val.ndim:
            a = t.extent
            if a.const == 0 and len(a.terms) == 1 and a.terms[0][1] == 1 and isinstance(a.terms[0][0], SizeVar):
                env.setdefault(a.terms[0][0], int(val.shape[axis]))
            t, axis = t.elem, axis + 1
    for a in rel.extents:
        for s in a.size_vars():
            v = kwargs.get(s.name)
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                env[s] = int(v)
            elif s not in env:
                return None
    return tuple(int(a.evaluate(env)) for a in rel.extents)


def prepare(program, kwargs: dict) -> dict:
    """The call's inputs with every sparse tensor as :class:`SparseData` on its
    relation's :class:`RelationData`, and every relation of a sparse tensor
    given (or taken from the tensor's pattern) as :class:`RelationData`."""
    svars = sparse_inputs(program)
    if not svars:
        return kwargs
    out = dict(kwargs)
    by_rel: dict = {}
    for v in svars:
        by_rel.setdefault(v.rel, []).append(v)
    for rel, vs in by_rel.items():
        given = out.get(rel.name)
        rd = relation_data(given, f"relation {rel.name}") if given is not None else None
        shape = rd.shape if rd is not None else None
        if shape is None and any(isinstance(out.get(v.name), tuple) for v in vs):
            shape = _sizes_from(program, kwargs, rel)  # (coords, values) carry no shape
        pats = []
        for v in vs:
            if v.name not in out:
                continue  # reported as missing by prepare_inputs
            pat, vals = _pattern_and_values(v, out[v.name], shape)
            shape = shape or pat.shape
            if pat.shape != shape:
                raise InputError(f"sparse tensor {v.name} has shape {pat.shape}; relation {rel.name} has shape {shape}")
            pats.append((v, pat, vals))
        if rd is None:
            if not pats:
                continue
            rd = pats[0][1]  # the relation's data taken from the first tensor's pattern
        elif rd.shape is None and shape is not None:
            rd = rd.bound(shape, f"relation {rel.name}")
        for v, pat, vals in pats:
            out[v.name] = SparseData(rd, _align(pat, vals, rd, f"sparse tensor {v.name}", rel.name))
        out[rel.name] = rd
    return out


def dense_inputs(program, kwargs: dict) -> dict:
    """:func:`prepare`, then every sparse value and prepared relation data
    densified (the reference evaluator's representation)."""
    from .ir import relations_of

    out = prepare(program, kwargs)
    if out is kwargs:
        out = dict(kwargs)
    for v in sparse_inputs(program):
        d = out.get(v.name)
        if isinstance(d, SparseData):
            out[v.name] = d.dense(d.values.dtype)
    for r in relations_of(program):
        if r.name not in out:
            continue  # reported as missing by prepare_inputs
        d = out[r.name]
        if _is_scipy(d):
            d = relation_data(d, f"relation {r.name}")
        out[r.name] = relation_value(d)
    return out


def relation_value(data):
    """Relation data as the evaluator takes it (dense table or coordinate rows)."""
    if isinstance(data, RelationData):
        return data.dense() if data.shape is not None else data.coords
    return data


# --------------------------------------------------------------------------
# Cotangents out


def to_sparse(v: SparseVar, value, prepared: dict):
    """A sparse tensor's cotangent (dense array or values on the relation) as a
    ``scipy.sparse.csr_matrix`` with exactly the relation's pattern (arity 2),
    else ``(coords, values)``."""
    rd = prepared.get(v.rel.name)
    if not isinstance(rd, RelationData):
        rd = relation_data(rd, f"relation {v.rel.name}")
    if rd.shape is None:
        rd = rd.bound(np.shape(value), f"relation {v.rel.name}")
    if isinstance(value, SparseData):
        if value.rel is not rd and not np.array_equal(value.rel.coords, rd.coords):
            raise TensorLangError(f"internal: the cotangent of {v.name} is packed on other relation data")
        vals = value.values
    else:
        arr = np.asarray(value)
        vals = arr[tuple(rd.coords.T)] if rd.nnz else np.zeros(0, dtype=arr.dtype)
    if rd.arity != 2:
        return rd.coords.copy(), np.ascontiguousarray(vals)
    import scipy.sparse as sp

    indptr, indices = rd.kernel_arrays((0, 1), (1,), (1,))  # prepared once per relation data
    out = sp.csr_matrix(rd.shape, dtype=vals.dtype)  # filled in place: no index-dtype scan per call
    # the pattern is shared with the prepared relation data through read-only
    # views (copying two nnz-long arrays per call cost more than the kernel's
    # pass over them); writing into them raises instead of corrupting it
    out.data, out.indices, out.indptr = np.ascontiguousarray(vals), _frozen(indices), _frozen(indptr)
    out.has_sorted_indices = True
    return out


def _frozen(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


# --------------------------------------------------------------------------
# Packed kernel outputs

_KEEP_PACKED = contextvars.ContextVar("tensorlang_keep_packed", default=False)


def keeps_packed() -> bool:
    """Does the caller take packed outputs (:class:`SparseData`) from kernels?"""
    return _KEEP_PACKED.get()


@contextlib.contextmanager
def keep_packed():
    """Kernels called inside return relation-packed outputs as SparseData
    (the gradient API turns them into csr_matrix without a dense copy)."""
    tok = _KEEP_PACKED.set(True)
    try:
        yield
    finally:
        _KEEP_PACKED.reset(tok)


def unpack_outputs(out):
    """Kernel outputs with every SparseData densified (tuples recursively)."""
    if isinstance(out, SparseData):
        return out.dense(out.values.dtype)
    if isinstance(out, tuple):
        return tuple(unpack_outputs(o) for o in out)
    return out
