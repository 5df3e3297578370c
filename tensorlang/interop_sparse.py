"""Sparse tensors across the framework bridges (issue 16 with issue 18).

Paper Section 4.3: a sparse tensor is a value stored on a relation, and every
read of it is the guarded ``[S(i, j)]·A[i, j]``; by Section 6 its cotangent
lives on the same relation.  This module meets that contract with each
framework's own sparse type, so a bridge never densifies:

* PyTorch: a sparse COO or CSR tensor in; its gradient is a sparse tensor of
  the same layout holding exactly the (coalesced) stored entries.
* JAX: a ``jax.experimental.sparse.BCOO`` in (differentiate with
  ``jax.experimental.sparse.grad`` / ``value_and_grad``, which differentiate a
  BCOO's data).  The cotangent of ``data[p]`` is aligned with the caller's own
  ``indices[p]``, in the caller's order; a duplicated coordinate's entries
  each get that coordinate's gradient (the value there is their sum).
* SciPy: a sparse input in ``wrt`` is optimised over its stored values; the
  flat vector holds them in the relation's row-major order.

On the host every sparse argument becomes :class:`~tensorlang.sparse.SparseData`
on prepared :class:`~tensorlang.relation_data.RelationData` (coordinates
sorted and unique, duplicates summed, as scipy and torch define them).
"""

from __future__ import annotations

import numpy as np

from .errors import InputError
from .relation_data import RelationData, _check_range, _is_scipy, _lex_sort_unique
from .sparse import SparseData, _values_array


def linear(coords: np.ndarray, shape) -> np.ndarray:
    """Row-major linear index of coordinate rows."""
    out = np.zeros(len(coords), dtype=np.int64)
    for k, n in enumerate(shape):
        out = out * int(n) + coords[:, k]
    return out


def host_sparse(coords, values, shape, what: str) -> SparseData:
    """Coordinate rows ``(nnz, arity)`` and values at ``shape`` as SparseData
    (sorted, unique coordinates; duplicates summed)."""
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[1] != len(shape) or coords.dtype.kind not in "iu":
        raise InputError(f"{what}: expected integer coordinates of shape (nnz, {len(shape)}), got "
                         f"{coords.dtype} {coords.shape}")
    coords = coords.astype(np.int64, copy=False)
    vals = _values_array(values, what)
    if vals.shape != (len(coords),):
        raise InputError(f"{what}: {len(coords)} coordinates but values of shape {vals.shape}")
    _check_range(coords, shape, what)
    rd = RelationData(_lex_sort_unique(coords), shape)
    if rd.nnz == len(coords) and np.array_equal(rd.coords, coords):
        return SparseData(rd, np.ascontiguousarray(vals))
    out = np.zeros(rd.nnz, dtype=vals.dtype)
    np.add.at(out, np.searchsorted(rd.linear(), linear(coords, shape)), vals)
    return SparseData(rd, out)


def cotangent_entries(g, shape) -> tuple:
    """A sparse tensor's cotangent as tl.grad returns it (a csr_matrix, or
    ``(coords, values)`` for other arities) -> (sorted coords, values)."""
    if _is_scipy(g):
        m = g.tocsr()
        rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
        coords = np.stack([rows, m.indices.astype(np.int64)], axis=1)
        vals = np.asarray(m.data)
    elif isinstance(g, tuple) and len(g) == 2:
        coords, vals = np.asarray(g[0], dtype=np.int64), np.asarray(g[1])
    elif isinstance(g, SparseData):
        coords, vals = g.rel.coords, g.values
    else:  # a dense cotangent (never produced for a sparse wrt; kept total)
        arr = np.asarray(g)
        coords = np.argwhere(np.ones(shape, dtype=bool)).astype(np.int64)
        vals = arr.reshape(-1)
    lin = linear(coords, shape)
    if len(lin) > 1 and np.any(lin[1:] < lin[:-1]):
        order = np.argsort(lin, kind="stable")
        coords, vals = coords[order], vals[order]
    return coords, vals


def gather_at(g, shape, coords) -> np.ndarray:
    """The cotangent ``g`` read at the caller's coordinate rows (its own order,
    duplicates included); every row must be a stored entry of ``g``."""
    gc, gv = cotangent_entries(g, shape)
    want = linear(np.asarray(coords, dtype=np.int64), shape)
    have = linear(gc, shape)
    pos = np.searchsorted(have, want)
    ok = (pos < len(have)) & (have[np.minimum(pos, max(len(have) - 1, 0))] == want) if len(have) else \
        np.zeros(len(want), bool)
    if len(want) and not np.all(ok):
        raise InputError("internal: a sparse cotangent lacks an entry the input stores")
    return np.asarray(gv)[pos] if len(want) else np.zeros(0, dtype=np.asarray(gv).dtype)


def shape_of(a) -> tuple:
    if isinstance(a, SparseData):
        return a.rel.shape
    if _is_scipy(a):
        return tuple(a.shape)
    return np.shape(a)


def dtype_of(a) -> np.dtype:
    if isinstance(a, SparseData):
        return a.values.dtype
    if _is_scipy(a):
        return np.dtype(a.dtype)
    return np.asarray(a).dtype


def scale(g, s: float):
    """``s * g`` for a dense or sparse cotangent (same representation)."""
    if _is_scipy(g):
        return g * s
    if isinstance(g, tuple) and len(g) == 2:
        return g[0], s * np.asarray(g[1])
    return s * np.asarray(g)


# --------------------------------------------------------------------------
# PyTorch


def is_torch_sparse(t, torch) -> bool:
    return isinstance(t, torch.Tensor) and t.layout != torch.strided


def from_torch(t, name: str, torch) -> SparseData:
    if t.layout not in (torch.sparse_coo, torch.sparse_csr):
        raise InputError(f"tl.torch_function: input {name} has layout {t.layout}; sparse inputs are "
                         "torch.sparse_coo or torch.sparse_csr tensors")
    if t.device.type != "cpu":
        raise InputError(f"tl.torch_function: input {name} is on {t.device}; tensorlang kernels run on the CPU")
    c = t.detach()
    c = (c.to_sparse_coo() if c.layout == torch.sparse_csr else c).coalesce()
    if c.dense_dim() != 0:
        raise InputError(f"tl.torch_function: sparse input {name} has {c.dense_dim()} dense dimension(s); "
                         "tensorlang's sparse tensors store one value per coordinate")
    vals = c.values()
    if vals.dtype == torch.bfloat16:  # NumPy has no bfloat16: widened exactly, as interop._torch_to_numpy
        vals = vals.to(torch.float64)
    return host_sparse(c.indices().numpy().T, vals.numpy(), tuple(c.shape), f"input {name}")


def to_torch(g, like, dtype, torch):
    """A sparse cotangent as a torch sparse tensor of ``like``'s layout."""
    shape = tuple(like.shape)
    coords, vals = cotangent_entries(g, shape)
    out = torch.sparse_coo_tensor(torch.from_numpy(np.ascontiguousarray(coords.T)),
                                  torch.from_numpy(np.ascontiguousarray(vals, dtype=dtype)), shape,
                                  is_coalesced=True, check_invariants=True)
    return out.to_sparse_csr() if like.layout == torch.sparse_csr else out
