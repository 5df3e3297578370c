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


# Finiteness by a sum: NaN propagates through every addition and an
# infinity stays infinite or meets the opposite one in a NaN, so a finite
# sum (of the values, or of their squares) proves every value finite.  Up to
# DOT_MAX values one BLAS dot ``a @ a`` (0.8 us at 1000 float64, 2 us at
# 16000, against 1.6 and 3.8 us for ``np.isfinite(a).all()``, which
# allocates); past it NumPy's own pairwise sum, because OpenBLAS runs a dot
# over more than 10000 values on several threads, and on a loaded machine
# waiting for a preempted thread cost 200 us a call.  Neither needs a
# compiled scan.  A sum that is not finite is a NaN/inf or an overflow
# (|x| > 1e154 squared, or a huge sum): the exact test decides.
_DOT = (np.dtype(np.float64), np.dtype(np.float32))
DOT_MAX = 8192


def _all_finite(a: np.ndarray) -> bool:
    if a.dtype.kind != "f":
        return True
    if a.dtype.itemsize > 8:
        # long double: the kernel runs in float64, where a value past 1.8e308 is
        # an infinity (as the first call's conversion refuses it)
        with np.errstate(over="ignore"):
            a = a.astype(np.float64)
    if a.dtype in _DOT and a.flags.c_contiguous:
        flat = a.reshape(-1)
        if flat.size <= DOT_MAX:
            try:
                if math.isfinite(flat @ flat):
                    return True
            except FloatingPointError:  # the caller's np.seterr(over="raise"): finite values may overflow
                pass  # (np.errstate here would cost more than the dot; the exact test decides)
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is decided below, not reported
                if math.isfinite(np.add.reduce(flat)):
                    return True
    return bool(np.isfinite(a).all())


def check_finite(inputs: dict, checks) -> None:
    """Refuse NaN or infinity, as ``evaluator.prepare_inputs`` does."""
    for name, path in checks:
        v = inputs[name]
        for k in path:
            v = v[k]
        if type(v) is np.ndarray:
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
