"""The values a loop derivative's callable takes and returns (issue #17;
split from loop_autodiff.py): states are arrays, floats or (nested) tuples
of them; the tangents and cotangent a caller gives are checked by name at
the primal's sizes; results follow the compiled calls' precision rule."""

from __future__ import annotations

import numpy as np

from .errors import UnsupportedError
from .ir import Var



def _tadd(a, b):
    if isinstance(a, tuple):
        return (_tadd(a[0], b[0]), _tadd(a[1], b[1]))
    return a + b


def _tzeros(t, sizes):
    from .ir import PairT, RealT, TensorT

    if isinstance(t, PairT):
        return (_tzeros(t.fst, sizes), _tzeros(t.snd, sizes))
    if isinstance(t, RealT):
        return 0.0
    shape = []
    while isinstance(t, TensorT):
        shape.append(t.extent.evaluate(sizes))
        t = t.elem
    if not isinstance(t, RealT):
        raise UnsupportedError(f"loop: a zero cotangent of the array-of-structs type {t} is not supported")
    return np.zeros(tuple(shape))


def _unpack(val, n: int) -> list:
    if n == 1:
        return [val]
    out = []
    for _ in range(n - 1):
        a, val = val
        out.append(a)
    out.append(val)
    return out


def _check_given(given: dict, types: dict, sizes: dict, internal=frozenset(), memo=None) -> None:
    """Validate the tangents or the cotangent a caller gives (``given``: name
    -> value, ``types``: name -> type) at the primal's ``sizes``: rank,
    lengths, a real dtype and (except the ``internal`` ones, an earlier
    loop's values) finite values, refused by name.  Without it they reached
    the parts' kernels under the loop's own names (``loop_dstate``), or,
    in the Numba sweeps, none at all (a short cotangent was read past its
    end).  ``memo``: the callable's validated signatures (with the sizes),
    for which only the values' finiteness is checked again."""
    from .backend.dispatch import check_finite, finite_checks, remember, signature
    from .evaluator import prepare_inputs
    from .ir import Pair, size_vars

    kw = {nm: given[nm] for nm in types}
    sig = signature(kw) if memo is not None else None
    key = None if sig is None else (sig, tuple(sizes.items()))
    checks = memo.get(key) if key is not None else None
    if checks is not None:  # this signature was validated: only the values' finiteness is left
        check_finite(kw, checks)
        return
    prog = None
    for nm, t in types.items():
        v = Var(nm, 0, t)
        prog = v if prog is None else Pair(prog, v)
    if prog is None:
        return
    kw.update({s.name: sizes[s.name] for s in size_vars(prog) if s.name in sizes})  # others: from the values
    prepare_inputs(prog, kw, exact=False, finite_elsewhere=internal)
    if key is not None:
        remember(memo, key, tuple(c for c in finite_checks(prog, kw) if c[0] not in internal))


def _has_float32(v) -> bool:
    if isinstance(v, (tuple, list)):
        return any(_has_float32(x) for x in v)
    return getattr(v, "dtype", None) == np.float32


def _in_precision(out, expr, inputs: dict, given=None):
    """``out`` in float32 when the call's inputs (with the tangents or the
    cotangent ``given``: name -> type) are float32 (``results.precision``,
    the rule of every compiled call): the sweeps accumulate some cotangents
    and tangents (a forcing input's rows, a tangent starting at zero) in
    float64, which came back as float64 beside float32 ones."""
    from .backend.results import precision
    from .ir import Pair

    if not any(_has_float32(v) for v in inputs.values()):  # the common case, decided without a walk
        return out
    prog = expr
    for nm, t in (given or {}).items():
        prog = Pair(prog, Var(nm, 0, t))
    if precision(prog, inputs) != "float32":
        return out
    return _float32(out)


def _float32(v):
    if isinstance(v, tuple):
        return tuple(_float32(x) for x in v)
    if isinstance(v, np.ndarray) and v.dtype == np.float64:
        return v.astype(np.float32)
    if isinstance(v, (float, np.float64)):
        return np.float32(v)
    return v


__all__ = ["_tadd", "_tzeros", "_unpack", "_check_given", "_in_precision", "_float32"]
