"""Kernel results -> the program's values, and the precision a call runs in
(paper Section 4.3; split out of api.py, which calls the kernel).

A kernel returns a flat tuple of leaves (arrays and scalars, struct of
arrays); the program's value is a nest of pairs whose tensors of pairs the
evaluator represents as object arrays of tuples (``aos``).  ``builder``
makes, once per call plan, the function from the tuple to that value.
"""

from __future__ import annotations

import numpy as np

from ..ir import Expr, PairT, RealT, TensorT, input_vars
from ..relation_data import _is_scipy as is_scipy
from ..sparse import SparseData, unpack_outputs


def builder(out_spec, t, dtype):
    """A function from the kernel's result tuple to the program's value, made
    once per plan (what ``aos(rebuild(...))`` computes, without walking the
    spec on every call)."""
    if out_spec[0] == "pair" and isinstance(t, PairT):
        f, g = builder(out_spec[1], t.fst, dtype), builder(out_spec[2], t.snd, dtype)
        return lambda res: (f(res), g(res))
    if out_spec[0] == "leaf" and isinstance(t, RealT):
        k = out_spec[1]
        conv = float if dtype is np.float64 else np.float32
        return lambda res: conv(res[k])
    if out_spec[0] == "leaf" and isinstance(t, TensorT) and not _pairlike(t.elem):
        k = out_spec[1]
        return lambda res: res[k]
    return lambda res: aos(rebuild(out_spec, res, dtype), t, dtype)


def scalar_leaves(out_spec, t) -> set:
    """The result leaves of ``out_spec`` (``["pair", a, b]`` | ``["leaf", k]``) that
    are scalars of the program's type ``t``."""
    if isinstance(out_spec, (list, tuple)) and out_spec and out_spec[0] == "pair" and isinstance(t, PairT):
        return scalar_leaves(out_spec[1], t.fst) | scalar_leaves(out_spec[2], t.snd)
    if (isinstance(out_spec, (list, tuple)) and len(out_spec) == 2 and out_spec[0] == "leaf"
            and isinstance(t, RealT) and type(out_spec[1]) is int):
        return {out_spec[1]}
    return set()


def array_leaves(out_spec, t) -> set:
    """The result leaves of ``out_spec`` that are dense real arrays of the program's type ``t``."""
    if isinstance(out_spec, (list, tuple)) and out_spec and out_spec[0] == "pair" and isinstance(t, PairT):
        return array_leaves(out_spec[1], t.fst) | array_leaves(out_spec[2], t.snd)
    if (isinstance(out_spec, (list, tuple)) and len(out_spec) == 2 and out_spec[0] == "leaf"
            and isinstance(t, TensorT) and not _pairlike(t.elem) and type(out_spec[1]) is int):
        return {out_spec[1]}
    return set()


def type_of_expr(expr):
    from ..typecheck import type_of

    return type_of(expr)


def precision(expr: Expr, inputs: dict) -> str:
    """'float32' when every real input given as an array or NumPy scalar is
    float32 (Python numbers are weak), else 'float64'."""
    kinds = []

    def leaf(v):
        if isinstance(v, (bool, int, float)):
            return  # weak
        if isinstance(v, SparseData):
            kinds.append(v.values.dtype)
        elif is_scipy(v):
            kinds.append(v.dtype)
        elif isinstance(v, tuple) and len(v) == 2:  # a sparse tensor's (coords, values)
            kinds.append(np.asarray(v[1]).dtype)
        else:
            kinds.append(np.asarray(v).dtype)

    for var in input_vars(expr):
        val = inputs.get(var.name)
        if val is None:
            continue
        stack = [(val, var.type)]
        while stack:
            v, t = stack.pop()
            if isinstance(t, PairT) and isinstance(v, (tuple, list)) and len(v) == 2:
                stack += [(v[0], t.fst), (v[1], t.snd)]
            else:
                leaf(v)
    return "float32" if kinds and all(k == np.float32 for k in kinds) else "float64"


def as_float32(v):
    """A float64 result (the evaluator's) in float32: arrays, scalars, pairs."""
    if isinstance(v, tuple):
        return tuple(as_float32(a) for a in v)
    if isinstance(v, np.ndarray) and v.dtype == object:
        out = np.empty(v.shape, dtype=object)
        for k in np.ndindex(v.shape):
            out[k] = as_float32(v[k])
        return out
    return np.asarray(v, dtype=np.float32) if isinstance(v, np.ndarray) else np.float32(v)


def aos(val, t, dtype):
    """Struct-of-arrays results -> the evaluator's representation of a tensor of
    pairs (an object array of tuples), recursively."""
    if isinstance(t, PairT):
        return (aos(val[0], t.fst, dtype), aos(val[1], t.snd, dtype))
    if isinstance(t, TensorT) and _pairlike(t.elem):
        # a tensor of pairs has no packed form: components stored on a relation are densified
        a, b = unpack_outputs(val[0]), unpack_outputs(val[1])
        out = np.empty(len(a), dtype=object)
        for k in range(len(a)):
            out[k] = aos((a[k], b[k]), t.elem, dtype)
        return out
    if isinstance(t, RealT) and isinstance(val, np.ndarray):
        return _scalar(val, dtype)
    return val


def _scalar(v, dtype):
    """A scalar result: a Python float in float64, a np.float32 in float32."""
    return float(v) if dtype is np.float64 else np.float32(v)


def _pairlike(t) -> bool:
    while isinstance(t, TensorT):
        t = t.elem
    return isinstance(t, PairT)


def rebuild(spec, res, dtype):
    if spec[0] == "pair":
        return (rebuild(spec[1], res, dtype), rebuild(spec[2], res, dtype))
    v = res[spec[1]]
    if isinstance(v, (np.ndarray, SparseData)):
        return v
    return _scalar(v, dtype)
