"""Scalar functions in kernels: the black boxes of Fig. 3 as kernel-IR nodes.

Every function of the registry (``tensorlang.functions``) compiles:

* the built-ins become NumPy ufunc calls Numba knows (``exp``, ``log``, ...),
  except ``tanh``: ``vmath.tanh``, within 1 ulp of NumPy's and vectorizable;
  ``div`` is ``/`` and ``sigmoid`` its formula, both as the evaluator computes
  them;
* ``pow[k]`` is ``np.power(x, k)`` for every real ``k`` (huge, negative,
  ``inf``, ``nan``: NumPy's values), ``x·x`` for ``k = 2`` and ``1`` for
  ``k = 0`` (as ``np.power``);
* ``D[f]`` (rule 6.6) is expanded by the lowering from ``f``'s partials;
* any other function runs its ``FunctionDef.numba`` implementation (a plain
  Python scalar function), or else its NumPy callable, compiled by
  ``numba.njit``.  One that Numba cannot compile is an UnsupportedError at
  compile time naming it.

The machine code of a function whose code its source file fixes (a plain
module-level function: no closure, no default values, no global other than
modules; see :func:`cacheable`) is kept in Numba's on-disk cache, so a new
process does not compile it again.  Numba keys that cache by the source
file, the function's name and line, and drops the file's entries when the
file changes (its size or time stamp), so an edited function is compiled
again, never served stale; any other function is compiled in every process.
"""

from __future__ import annotations

import hashlib
import math
import os
import types

from ..errors import UnsupportedError
from ..functions import lookup
from . import kir as K

UNARY_UFUNCS = {"exp", "log", "sin", "cos", "tanh", "sqrt"}
VECTOR_TANH = "_tanh"  # the name codegen's header binds to vmath.tanh


def builtin(fn: str, args: tuple):
    """The kernel-IR node of a built-in application, or None for other functions."""
    if fn == "tanh":  # vmath.tanh: libm's tanh does not vectorize (issue #13 item 6)
        return K.FCall(VECTOR_TANH, args, numpy=False)
    if fn in UNARY_UFUNCS:
        return K.FCall(fn, args)
    if fn == "div":
        return K.FDiv(args[0], args[1])
    if fn == "sigmoid":
        return K.FDiv(K.Float(1.0), K.FSum((K.Float(1.0), K.FCall("exp", (K.FNeg(args[0]),)))))
    return None


# The value comparisons (conditionals.py): ``select_gt(a, b, e1, e2)`` tests
# ``a > b`` and ``select_ge`` tests ``a >= b``.  In a float32 kernel a
# constant operand printed as ``F(c)`` is rounded to nearest, so ``x >= 1e-46``
# became ``x >= 0`` and ``x > 0.1`` at ``x = float32(0.1)`` (0.10000000149...)
# became a tie: the branch taken, and the derivative of ``where``,
# ``maximum``, ``minimum`` at the point, differed from the evaluator's exact
# comparison of the same float32 value with c (and so changed with the size,
# where the auto runtime picks the evaluator).  :func:`compared_constants`
# rounds such a constant towards the side that keeps every float32 decision
# exact (tests/backend/test_float32_comparisons.py).
COMPARISONS = {"select_gt": ">", "select_ge": ">="}


def _float32_around(c: float):
    """(largest float32 <= c, smallest float32 >= c) as Python floats (±inf beyond the range)."""
    import numpy as np

    with np.errstate(over="ignore"):
        f = np.float32(c)
    if math.isnan(c) or float(f) == c:
        return float(f), float(f)
    if float(f) > c:
        return float(np.nextafter(f, np.float32(-np.inf))), float(f)
    return float(f), float(np.nextafter(f, np.float32(np.inf)))


def exact_in_float32(c: float) -> bool:
    """Is the constant c a float32 value (so ``F(c)`` keeps it in a float32 kernel)?"""
    lo, hi = _float32_around(c)
    return lo == hi and (lo == c or math.isnan(c))


def compared_constants(op: str, a, b):
    """The operands ``(a, b)`` of a float32 kernel's ``a op b`` (op ``>`` or
    ``>=``) with each constant (a ``K.Float``) replaced by a float32 value
    that decides every float32 operand as the exact comparison with the
    constant does: ``x > c`` iff ``x > floor32(c)``, ``x >= c`` iff
    ``x >= ceil32(c)``, and mirrored for a constant on the left.  Two
    constants: the comparison is decided here, as ``1 op 0`` or ``0 op 1``."""
    ca, cb = isinstance(a, K.Float), isinstance(b, K.Float)
    if ca and cb:
        holds = a.value > b.value if op == ">" else a.value >= b.value
        return (K.Float(1.0), K.Float(0.0)) if holds else (K.Float(0.0), K.Float(1.0))
    if cb:
        lo, hi = _float32_around(b.value)
        b = K.Float(lo if op == ">" else hi)
    if ca:
        lo, hi = _float32_around(a.value)
        a = K.Float(hi if op == ">" else lo)
    return a, b


def power_exponent(fn: str):
    """``k`` of ``pow[k]`` (any real, as printed by functions.power_name), else None."""
    if fn.startswith("pow[") and fn.endswith("]"):
        return float(fn[4:-1])
    return None


_COMPILED: dict = {}


def _impl(name: str):
    fd = lookup(name)
    return fd, (fd.numba if fd.numba is not None else fd.numpy)


def fingerprint(name: str) -> str:
    """What the cache key needs of a user function: its implementation's code,
    and its partial derivatives (rule 6.6: a kernel computing ``D[f]`` runs
    the expansion the lowering builds from them), as the IR they build on
    placeholder arguments and the fingerprints of the functions they call,
    recursively.  So a changed partial, or a changed function reached only
    through one, is a new key for a program that names only ``f``."""
    return _fingerprint(name, set())


def _is_builtin(fn: str) -> bool:
    return fn in UNARY_UFUNCS or fn in ("div", "sigmoid") or power_exponent(fn) is not None


def _base(fn: str) -> str:
    while fn.startswith("D[") and fn.endswith("]"):  # D[g] runs g's partials: g's fingerprint covers them
        fn = fn[2:-1]
    return fn


def _fingerprint(name: str, seen: set) -> str:
    from ..ir import Call, Var, walk
    from ..ir.types import REAL
    from .cache import node_hash

    seen.add(name)
    fd, f = _impl(name)
    code = getattr(f, "__code__", None)
    parts = [repr((fd.arity, code.co_code, code.co_consts, code.co_names)) if code is not None else repr(f)]
    args = tuple(Var(f"_a{j}", 0, REAL) for j in range(fd.arity))
    partials = tuple(fd.partials(*args))
    parts += [node_hash(p) for p in partials]
    # built-ins (NumPy ufuncs, div, sigmoid, the pow[k] family, whose
    # partials name pow[k-1] without end) are kernel-IR nodes, not called code
    called = sorted({g for p in partials for n in walk(p) if isinstance(n, Call)
                     for g in [_base(n.fn)] if not _is_builtin(g)} - seen)
    parts += [f"{g}={_fingerprint(g, seen)}" for g in called]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def cacheable(f) -> bool:
    """Does ``f``'s source file determine its compiled code (see the module doc)?"""
    code = getattr(f, "__code__", None)
    if code is None or getattr(f, "__closure__", None) or f.__defaults__ or f.__kwdefaults__:
        return False
    if any(isinstance(c, types.CodeType) for c in code.co_consts):  # nested functions or lambdas
        return False
    if not os.path.isfile(code.co_filename):  # <stdin>, exec'd text: no file to validate against
        return False
    g = getattr(f, "__globals__", {})
    # a global value (not a module) may change without the file changing: not cached
    return all(isinstance(g[n], types.ModuleType) for n in code.co_names if n in g)


def code_fixed(name: str) -> bool:
    """Is the machine code of the registered function ``name`` decided by its
    :func:`fingerprint` alone (:func:`cacheable`), so that a kernel calling it
    may be kept in Numba's disk cache under a key holding the fingerprint?"""
    return cacheable(_impl(name)[1])


def check_compiles(name: str) -> None:
    """Compile the function for float64 arguments now, so a function Numba
    cannot compile is refused at compile time, not when a kernel runs."""
    kernel_function(name, None)


def kernel_function(name: str, dtype=None):
    """The njit-compiled implementation of a registered function (memoised
    per implementation); generated kernel modules bind it by name."""
    import numba

    from .selects import intrinsic_for
    from .warm_load import warm_loading

    fd, f = _impl(name)
    inline = intrinsic_for(name, f)  # a built-in comparison or select: typed and lowered in the kernel
    if inline is not None:
        return inline
    got = _COMPILED.get((name, id(f)))
    if got is not None:
        return got[1]
    try:
        jf = warm_loading(numba.njit(f, error_model="numpy", cache=cacheable(f)))
        jf.compile((numba.float64,) * fd.arity)
    except Exception as exc:  # Numba's typing/lowering errors have no common base
        raise UnsupportedError(
            f"the scalar function {name!r} does not compile with Numba ({type(exc).__name__}); "
            "register it with tl.register_function(..., numba=<a plain Python scalar function>)"
        ) from None
    _COMPILED[(name, id(f))] = (f, jf)  # f kept alive so its id stays unique
    return jf
