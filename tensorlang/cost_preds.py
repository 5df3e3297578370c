"""Predicates over index points, vectorized (Figure 5's semantics of
predicates, as the cost model's counting of Figure 6 needs it).

Shared by ``costmodel`` (counting a domain's points by enumeration) and
``cost_relations`` (relation count symbols evaluated on data): it sits below
both, so neither imports the other for it.
"""

from __future__ import annotations

import weakref

import numpy as np

from .errors import TensorLangError, UnsupportedError
from .ir import And, BoolLit, Cmp, Exists, IndexVar, Or, Pred, Rel, SizeVar, walk

_HAS_REL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # this module's memo (issue #14 item 4)


def has_relation(p: Pred) -> bool:
    r = _HAS_REL.get(p)
    if r is None:
        r = _HAS_REL[p] = any(isinstance(x, Rel) for x in walk(p))
    return r


ENUM_LIMIT = 20_000_000


class _TooMany(UnsupportedError):
    """A relational domain too large to enumerate."""


def _aff_vec(a, env: dict, sizes: dict, N: int):
    if a.const == 0 and len(a.terms) == 1 and a.terms[0][1] == 1 and not isinstance(a.terms[0][0], SizeVar):
        return env[a.terms[0][0]]  # a plain index: no arithmetic, no copy
    v = np.full(N, a.const, dtype=np.int64)
    for s, c in a.terms:
        if isinstance(s, SizeVar):
            v += c * sizes[s.name]
        else:
            v += c * env[s]
    return v


def _pred_vec(p: Pred, env: dict, sizes: dict, rels: dict, N: int) -> np.ndarray:
    """Signature: Pred × (IndexVar -> int array) -> bool array (Fig. 5, vectorized)."""
    match p:
        case BoolLit(value=v):
            return np.full(N, v, dtype=bool)
        case Cmp(op=op, lhs=a, rhs=b):
            x, y = _aff_vec(a, env, sizes, N), _aff_vec(b, env, sizes, N)
            return x < y if op == "<" else (x <= y if op == "<=" else x == y)
        case And(lhs=a, rhs=b):
            return _pred_vec(a, env, sizes, rels, N) & _pred_vec(b, env, sizes, rels, N)
        case Or(lhs=a, rhs=b):
            return _pred_vec(a, env, sizes, rels, N) | _pred_vec(b, env, sizes, rels, N)
        case Rel(rel=r, args=args):
            data = rels[r.name]
            ks = [_aff_vec(a, env, sizes, N) for a in args]
            ok = np.ones(N, dtype=bool)
            for k, n in zip(ks, data.shape):
                ok &= (k >= 0) & (k < n)
            out = np.zeros(N, dtype=bool)
            if ok.any():
                out[ok] = data[tuple(k[ok] for k in ks)]
            return out
        case Exists(var=i, extent=n, body=b):
            env2, rows, M = _expand(env, i, _aff_vec(n, env, sizes, N), N)
            vals = _pred_vec(b, env2, sizes, rels, M)
            return np.bincount(rows[vals], minlength=N) > 0
        case _:
            raise TensorLangError(f"not a predicate: {p!r}")


def _expand(env: dict, i: IndexVar, ext: np.ndarray, N: int):
    """Every point of ``env`` extended with ``i ∈ [0, ext)`` (ext per point)."""
    ext = np.maximum(ext, 0)
    total = int(ext.sum())
    if total > ENUM_LIMIT:
        raise _TooMany(
            f"counting a relational domain needs {total} index points; use smaller sizes or symbolic_cost"
        )
    rows = np.repeat(np.arange(N), ext)
    starts = np.cumsum(ext) - ext
    ks = np.arange(total, dtype=np.int64) - np.repeat(starts, ext)
    env2 = {k: v[rows] for k, v in env.items()}
    env2[i] = ks
    return env2, rows, total

