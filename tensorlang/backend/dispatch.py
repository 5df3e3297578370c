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
from .finite import PARALLEL_SCAN_MIN, PARALLEL_SCANS, SCANS

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


def _all_finite(a: np.ndarray, threads: int = 1) -> bool:
    """Every value of the float array ``a`` is finite: finite.py's compiled
    scan of the exponent bits for contiguous float64/float32 arrays (the
    common case; on ``threads`` threads when large, see :func:`scan_threads`),
    NumPy's exact test otherwise."""
    scan = SCANS.get(a.dtype)
    if scan is not None:
        if not (a.ndim == 1 and a.flags.c_contiguous):
            if not (a.flags.c_contiguous or a.flags.f_contiguous):
                return bool(np.isfinite(a).all())
            a = a.reshape(-1, order="A")  # a view: the values in memory order
        if threads != 1 and a.shape[0] >= PARALLEL_SCAN_MIN:
            k = scan_threads(threads)
            if k > 1:
                return _on_threads(PARALLEL_SCANS[a.dtype], a, k)
        return scan(a)
    if a.dtype.kind != "f":
        return True
    if a.dtype.itemsize > 8:
        # long double: the kernel runs in float64, where a value past 1.8e308 is
        # an infinity (as the first call's conversion refuses it)
        with np.errstate(over="ignore"):
            return _all_finite(a.astype(np.float64), threads)
    return bool(np.isfinite(a).all())


def scan_threads(threads: int) -> int:
    """The threads a large input's scan runs on, for a call whose kernel runs
    on ``threads`` (a plan's: 1 serial, k > 1 that many, 0 the automatic
    choice: every thread Numba has when a core is free, as for the kernel)."""
    import numba

    if threads == 0:
        from .autothreads import cores_free

        return numba.get_num_threads() if cores_free() else 1
    return max(1, min(threads, numba.config.NUMBA_NUM_THREADS))


def _on_threads(scan, a: np.ndarray, k: int) -> bool:
    import numba

    old = numba.get_num_threads()
    if old == k:
        return scan(a)
    numba.set_num_threads(k)
    try:
        return scan(a)
    finally:
        numba.set_num_threads(old)


def check_finite(inputs: dict, checks, threads: int = 1) -> None:
    """Refuse NaN or infinity, as ``evaluator.prepare_inputs`` does; a large
    array is scanned on the call's ``threads`` (see :func:`scan_threads`)."""
    for name, path in checks:
        v = inputs[name]
        for k in path:
            v = v[k]
        if type(v) is np.ndarray:
            ok = _all_finite(v, threads)
        else:
            ok = math.isfinite(v)
        if not ok:
            what = name + "".join(f".{k}" for k in path)
            raise InputError(f"input {what} contains NaN or infinity")


def witnessed(witness, res, values: dict, threads: int = 1, compiled: bool = True) -> None:
    """The inputs whose NaN/inf scan the kernel's witness results stand for
    (blas.py's scalars, strict.py's scalar and array results): a non-finite
    witness scans its input, an InputError if the input is to blame; a finite
    witness proves the input finite.  An array witness is scanned once per call,
    with the compiled scan (``compiled``) or NumPy's test (a plan's first call)."""
    arrays = None  # result index -> finite, for the array witnesses of this call
    for name, path, k in witness:
        v = res[k]
        if type(v) is not np.ndarray:
            ok = math.isfinite(v)
        else:
            if arrays is None:
                arrays = {}
            ok = arrays.get(k)
            if ok is None:
                ok = arrays[k] = _all_finite(v, threads) if compiled else bool(np.isfinite(v).all())
        if not ok:
            check_finite(values, ((name, path),))


def direct_inputs(leaves, inputs: dict, dtype):
    """The input names to pass to the kernel unchanged, when every leaf is a
    whole C-contiguous array of the kernel's precision or (float64) a Python
    float; else None.  The call signature (dispatch.py) fixes dtype, shape
    and contiguity, so this holds for every call of the plan."""
    names = []
    for name, path, rank in leaves:
        v = inputs.get(name)
        if path:
            return None
        if rank:
            if type(v) is not np.ndarray or v.dtype != dtype or not v.flags.c_contiguous:
                return None
        elif not (type(v) is float and dtype is np.float64):
            return None
        names.append(name)
    return names


def remember(plans: dict, sig, plan) -> None:
    if len(plans) >= PLAN_LIMIT:
        plans.clear()
    plans[sig] = plan
