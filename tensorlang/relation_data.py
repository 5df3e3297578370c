"""Relation data prepared once (issue 13 item 1; paper Section 4.3: "with a
data-driven p, use CSR-like representations").

``relation_data(x)`` turns a boolean mask, integer coordinate rows or a
scipy.sparse matrix into a :class:`RelationData`: the relation's coordinates
sorted lexicographically and unique, plus, on demand and cached on the
object, its dense table, the permutation into any column order (the CSC
permutation for ``(1, 0)``) and the CSR-like arrays kernels iterate.  A
cache keyed by the array (identity, then an exact comparison with a copy of
the array's structure) makes the conversion happen once per distinct array:
an array mutated in place is converted again, a stale entry is never used.
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from .errors import InputError


def _lex_sort_unique(coords: np.ndarray) -> np.ndarray:
    if len(coords) == 0:
        return coords
    order = np.lexsort(coords.T[::-1])
    c = coords[order]
    keep = np.ones(len(c), dtype=bool)
    keep[1:] = np.any(c[1:] != c[:-1], axis=1)
    return np.ascontiguousarray(c[keep])


class RelationData:
    """A relation's data, prepared once (see the module doc).

    ``coords``: int64 array (nnz, arity), sorted lexicographically, unique.
    ``shape``: the extents (None for coordinate rows given without a shape;
    :meth:`bound` fixes it at call time)."""

    def __init__(self, coords: np.ndarray, shape):
        self.coords = coords
        self.coords.setflags(write=False)
        self.shape = None if shape is None else tuple(int(s) for s in shape)
        self._lock = threading.Lock()
        self._dense = None
        self._arrays: dict = {}
        self._bound: dict = {}

    @property
    def nnz(self) -> int:
        return len(self.coords)

    @property
    def arity(self) -> int:
        return self.coords.shape[1]

    def __repr__(self):
        return f"RelationData(shape={self.shape}, nnz={self.nnz})"

    def bound(self, shape, what: str) -> "RelationData":
        """This data at extents ``shape`` (checked: every coordinate in range)."""
        shape = tuple(int(s) for s in shape)
        if self.shape is not None:
            if self.shape != shape:
                raise InputError(f"{what} has shape {self.shape}; the program's sizes give {shape}")
            return self
        got = self._bound.get(shape)
        if got is None:
            c = self.coords.reshape(0, len(shape)) if self.nnz == 0 else self.coords
            _check_range(c, shape, what)
            got = RelationData(c, shape)
            self._bound[shape] = got
        return got

    def dense(self) -> np.ndarray:
        if self._dense is None:
            d = np.zeros(self.shape, dtype=bool)
            if self.nnz:
                d[tuple(self.coords.T)] = True
            d.setflags(write=False)
            self._dense = d
        return self._dense

    def linear(self, perm=None) -> np.ndarray:
        """Row-major linear index of every coordinate (columns in order ``perm``)."""
        perm = tuple(range(self.arity)) if perm is None else tuple(perm)
        ext = [self.shape[k] for k in perm]
        out = np.zeros(self.nnz, dtype=np.int64)
        for k, n in zip(perm, ext):
            out = out * n + self.coords[:, k]
        return out

    def flat_index(self) -> np.ndarray:
        """:meth:`linear` in the stored order, kept: where each value of a
        packed cotangent goes in a row-major dense array (one flat store)."""
        got = self._arrays.get("flat")
        if got is None:
            got = self._arrays["flat"] = self.linear()
            got.setflags(write=False)
        return got

    def order(self, perm) -> np.ndarray:
        """Positions of the coordinates sorted with columns in order ``perm``
        (the CSC permutation for ``(1, 0)``)."""
        key = ("order", tuple(perm))
        got = self._arrays.get(key)
        if got is None:
            if tuple(perm) == tuple(range(self.arity)):
                got = np.arange(self.nnz, dtype=np.int64)
            else:
                got = np.argsort(self.linear(perm), kind="stable").astype(np.int64)
            self._arrays[key] = got
        return got

    def kernel_arrays(self, perm, ptrs, cols) -> list:
        """The CSR-like arrays a kernel iterates: ``ptr{L}`` row starts over the
        first ``L`` columns of ``perm``, then column ``k`` of the sorted coords."""
        key = ("kernel", tuple(perm), tuple(ptrs), tuple(cols))
        got = self._arrays.get(key)
        if got is not None:
            return got
        c = self.coords[:, list(perm)][self.order(perm)] if self.nnz else np.zeros((0, self.arity), np.int64)
        ext = [self.shape[k] for k in perm]
        out = []
        for L in ptrs:
            if L == 0:
                out.append(np.array([0, len(c)], dtype=np.int64))
                continue
            nrows = int(np.prod(ext[:L]))
            flat = np.zeros(len(c), dtype=np.int64)
            for k in range(L):
                flat = flat * ext[k] + c[:, k]
            counts = np.bincount(flat, minlength=nrows)
            out.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        for k in cols:
            out.append(np.ascontiguousarray(c[:, k]))
        with self._lock:
            self._arrays[key] = out
        return out


def _check_range(coords: np.ndarray, shape, what: str) -> None:
    if coords.shape[1] != len(shape):
        raise InputError(f"{what}: coordinates have {coords.shape[1]} column(s), the relation has arity {len(shape)}")
    for k, n in enumerate(shape):
        if len(coords) and (coords[:, k].min() < 0 or coords[:, k].max() >= n):
            raise InputError(f"{what}: coordinate column {k} is outside [0, {n})")


def _coords_array(c, what: str, arity=None) -> np.ndarray:
    arr = np.asarray(c)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise InputError(f"{what}: coordinates contain NaN or infinity")
        if not np.all(arr == np.round(arr)):
            raise InputError(f"{what}: coordinates must be integers")
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu" or arr.dtype == bool:
        raise InputError(f"{what}: coordinates must be integer rows, got dtype {arr.dtype}")
    if arr.size == 0 and arity is not None:
        arr = arr.reshape(0, arity)
    if arr.ndim == 1 and arity == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or (arity is not None and arr.shape[1] != arity):
        raise InputError(f"{what}: coordinates must have shape (nnz, {arity if arity is not None else 'arity'}), got {arr.shape}")
    if len(arr) and arr.min() < 0:
        raise InputError(f"{what}: a coordinate is negative")
    return arr.astype(np.int64)


def _is_scipy(x) -> bool:
    if "scipy.sparse" not in sys.modules:  # no scipy matrix exists before scipy.sparse is imported
        return False
    import scipy.sparse as sp  # a core dependency; imported only once the caller has

    return sp.issparse(x)


def _canonical_csr(m):
    """scipy matrix -> CSR with duplicates summed and indices sorted (scipy's
    canonical format; explicit zeros stay stored entries).  No copy when the
    matrix already is one."""
    import scipy.sparse as sp

    if m.ndim != 2:
        raise InputError("a scipy.sparse input must be 2-dimensional")
    if sp.isspmatrix_csr(m) or getattr(m, "format", None) == "csr":
        if m.has_canonical_format:
            return m
        m = m.copy()
    else:
        m = m.tocsr(copy=True)
    m.sum_duplicates()
    m.sort_indices()
    return m


def _csr_coords(m) -> np.ndarray:
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    return np.stack([rows, m.indices.astype(np.int64)], axis=1)


# the cache keyed by the array: id -> (weak reference, exact structure copy, RelationData)
_CACHE: dict = {}
_CACHE_MAX = 64
_CACHE_LOCK = threading.Lock()


def _structure(x, copy: bool = False):
    """What decides ``x``'s pattern (a copy is stored; compared exactly on a hit)."""
    c = np.array if copy else (lambda a: a)
    if isinstance(x, np.ndarray):
        return ("nd", x.shape, x.dtype.str, c(x))
    if getattr(x, "format", None) in ("csr", "csc"):
        return (x.format, x.shape, c(x.indptr), c(x.indices))
    if getattr(x, "format", None) == "coo":
        return ("coo", x.shape, c(x.coords[0]), c(x.coords[1]))
    return None  # other formats (lil, dok, dia, bsr): converted on every call


def _equal(x: np.ndarray, y: np.ndarray) -> bool:
    """Exact equality, compared as the arrays' bytes in 8-byte words when
    both are contiguous (a bool mask: 8x fewer elements and temporaries than
    ``np.array_equal``).  Equal bytes imply equal bools and integers; unequal
    bytes at worst convert the data again."""
    if x.flags.c_contiguous and y.flags.c_contiguous and x.nbytes % 8 == 0 and x.nbytes:
        return bool(np.array_equal(x.reshape(-1).view(np.uint64), y.reshape(-1).view(np.uint64)))
    return bool(np.array_equal(x, y))


def _same(a, b) -> bool:
    if a is None or b is None or len(a) != len(b) or a[0] != b[0]:
        return False
    for x, y in zip(a[1:], b[1:]):
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.shape == y.shape and x.dtype == y.dtype and _equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def _cached(x, build, what):
    try:
        ref = weakref.ref(x)
    except TypeError:
        return build(x, what)
    st = _structure(x)
    if st is None:
        return build(x, what)
    with _CACHE_LOCK:
        got = _CACHE.get(id(x))
    if got is not None and got[0]() is x and _same(got[1], st):
        return got[2]
    out = build(x, what)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[id(x)] = (ref, _structure(x, copy=True), out)
    return out


def _build_relation(x, what: str) -> RelationData:
    if _is_scipy(x):
        m = _canonical_csr(x)
        return RelationData(_csr_coords(m), m.shape)
    try:
        arr = np.asarray(x)
    except Exception as exc:
        raise InputError(f"{what}: data is not an array: {exc}") from None
    if arr.dtype == bool:
        return RelationData(np.argwhere(arr).astype(np.int64), arr.shape)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{what} must be a boolean array or integer coordinate rows, got dtype {arr.dtype}")
    if arr.size == 0:
        return RelationData(np.zeros((0, 0), np.int64), None)  # arity fixed by bound()
    if arr.ndim != 2:
        raise InputError(f"{what}: integer data must be coordinate rows of shape (nnz, arity), got {arr.shape}")
    return RelationData(_lex_sort_unique(arr.astype(np.int64)), None)  # range checked by bound()


def relation_data(data, what: str = "relation data") -> RelationData:
    """A relation's data prepared once: from a boolean mask, integer coordinate
    rows ``(nnz, arity)`` or a scipy.sparse matrix (its stored entries).
    Reusable across calls; the same array given again is not converted again."""
    if isinstance(data, RelationData):
        return data
    if isinstance(getattr(data, "rel", None), RelationData):  # a sparse tensor's data (sparse.SparseData)
        return data.rel
    return _cached(data, _build_relation, what)


