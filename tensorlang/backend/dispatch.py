"""Call-time dispatch plans for compiled kernels (paper Section 4.3; issue #13 item 7).

A call of a compiled program validates its inputs (names, shapes, dtypes,
sizes inferred from shapes, the bounds proof's size constraints, finite
values).  Everything but the values' finiteness is decided by the call's
*signature*: the keyword names, each array's dtype and shape, each scalar's
Python type (and an integer's value, which may be a size).  So the full
validation (``evaluator.prepare_inputs``, ``bounds.check_sizes``) runs once
per signature and its outcome (sizes, precision, argument layout) is kept
as a plan; later calls with the same signature check only finiteness and
call the Numba entry (arrays already contiguous and of the kernel's
precision are passed on as they are; the result's shape is rebuilt by a
function made once per plan).  A call whose signature differs re-plans through the
full validation (refused exactly as before); inputs that have no signature
(lists, bools, subclasses, sparse tensors, relation coordinate rows without
a shape) always take the full path.  Relation data (a mask, a scipy.sparse
matrix) is first made a ``RelationData`` through ``tl.relation_data``'s
cache (``relation_inputs``), every call, so a mutated mask is converted
again; its signature is its shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..ir import PairT, input_vars
from ..relation_data import RelationData, relation_data

PLAN_LIMIT = 64  # plans kept per callable (an int scalar input's value is part of the key)


def _leaf_sig(v):
    t = type(v)
    if t is np.ndarray:  # contiguity too: a plan may pass the array on as it is
        return (v.dtype, v.shape, v.flags.c_contiguous)
    if t is float:
        return float
    if t is int:
        return (int, v)
    if t is tuple and len(v) == 2:
        a, b = _leaf_sig(v[0]), _leaf_sig(v[1])
        return None if a is None or b is None else (tuple, a, b)
    if isinstance(v, (np.floating, np.integer)):
        return (v.dtype, v.item() if v.dtype.kind in "iu" else None)
    if t is RelationData and v.shape is not None:
        # prepared relation data (relation_inputs): its shape decides the sizes
        # and checks; its coordinates are read from it on every call
        return (RelationData, v.shape)
    return None  # lists, bools, objects, subclasses: the full path decides


def signature(inputs: dict):
    """A hashable key deciding every check but finiteness, or None."""
    out = []
    for k, v in inputs.items():
        s = _leaf_sig(v)
        if s is None:
            return None
        out.append((k, s))
    return tuple(out)


def relation_inputs(inputs: dict, names: tuple) -> dict:
    """``inputs`` with the relations ``names`` given as :class:`RelationData`,
    through ``relation_data``'s cache (identity, then an exact comparison: a
    mask mutated in place is converted again).  Once per call, so that a
    relation program's signature, and so its plan, is decided by the data's
    shape; missing relations are left for the full path to report."""
    out = None
    for name in names:
        v = inputs.get(name)
        if v is None or type(v) is RelationData:
            continue
        if out is None:
            out = dict(inputs)
        out[name] = relation_data(v, f"relation {name}")
    return inputs if out is None else out


def finite_checks(expr, inputs: dict) -> tuple:
    """The (name, path) of every floating leaf of ``expr``'s inputs in
    ``inputs``: the values whose finiteness each call must still check."""
    out = []
    for var in input_vars(expr):
        if var.name not in inputs:
            continue
        todo = [(var.type, (), inputs[var.name])]
        while todo:
            t, path, v = todo.pop()
            if isinstance(t, PairT):
                todo += [(t.fst, path + (0,), v[0]), (t.snd, path + (1,), v[1])]
            elif isinstance(v, (float, np.floating)) or (isinstance(v, np.ndarray) and v.dtype.kind == "f"):
                out.append((var.name, path))
    return tuple(out)


_finite_fn = None
_FAST = (np.dtype(np.float64), np.dtype(np.float32))
# Below this many values NumPy's ``isfinite`` is as quick as the compiled scan
# (about 30 us at 2**16 float64), and a process whose arrays are all this
# small never compiles or loads the scan (0.14-0.2 s of Numba's compiler in a
# process with an empty cache, a few ms to load it from the cache).
FINITE_JIT_MIN = 1 << 16


def _all_finite(a: np.ndarray) -> bool:
    global _finite_fn
    if a.dtype.kind != "f":
        return True
    if a.dtype not in (np.float64, np.float32) or not a.flags.c_contiguous or a.size < FINITE_JIT_MIN:
        return bool(np.all(np.isfinite(a)))
    if _finite_fn is None:
        _finite_fn = _compile_all_finite()
    return _finite_fn(a.reshape(-1).view(_BITS[a.dtype]), _EXPONENT[a.dtype])


# a float is NaN or infinite exactly when its exponent bits are all ones
_BITS = {np.dtype(np.float64): np.int64, np.dtype(np.float32): np.int32}
_EXPONENT = {np.dtype(np.float64): np.int64(0x7FF0000000000000), np.dtype(np.float32): np.int32(0x7F800000)}


def _compile_all_finite():
    """``all_finite(bits, exponent)`` over a float array's bits: each block of
    4096 values is tested with integer operations, which vectorize (a
    per-value ``isfinite`` with an early exit does not: 11.4 -> 7.2 ms on
    4000 x 4000 float64), and the scan stops after the first bad block."""
    import numba

    @numba.njit(cache=True, nogil=True)
    def all_finite(b, mask):
        n = b.shape[0]
        for lo in range(0, n, 4096):
            bad = 0
            for k in range(lo, min(lo + 4096, n)):
                bad += (b[k] & mask) == mask
            if bad:
                return False
        return True

    return all_finite


def check_finite(inputs: dict, checks) -> None:
    """Refuse NaN or infinity, as ``evaluator.prepare_inputs`` does."""
    for name, path in checks:
        v = inputs[name]
        for k in path:
            v = v[k]
        if type(v) is np.ndarray:
            if _finite_fn is not None and v.dtype in _FAST and v.flags.c_contiguous and v.size >= FINITE_JIT_MIN:
                ok = _finite_fn(v.reshape(-1).view(_BITS[v.dtype]), _EXPONENT[v.dtype])  # the common case
            else:
                ok = _all_finite(v)
        else:
            ok = math.isfinite(v)
        if not ok:
            what = name + "".join(f".{k}" for k in path)
            raise InputError(f"input {what} contains NaN or infinity")


def remember(plans: dict, sig, plan) -> None:
    if len(plans) >= PLAN_LIMIT:
        plans.clear()
    plans[sig] = plan
