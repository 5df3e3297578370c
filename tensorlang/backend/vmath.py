"""A tanh that LLVM can vectorize, for kernels (issue #13 item 6).

Numba compiles ``np.tanh`` to a call of libm's ``tanh``: one opaque call per
element (about 19 ns here), which LLVM cannot vectorize; the tanh MLP's loss
spent about a third of its time there.  :func:`tanh` is the same function
written in arithmetic, comparisons and bit casts only, no calls and no
branches (selects through :func:`_select`), so a loop around it vectorizes
(AVX2: 4 lanes, about 4 ns an element; issue #13's "LLVM will not vectorize
libm calls").

Float64 (float32 arguments keep ``np.tanh``, the float32 kernels' semantics):

* ``|x| < 2^-28``: ``tanh(x) = x`` (the next term, ``x³/3``, is below half an
  ulp); keeps ``-0.0`` and subnormals;
* ``|x| >= 22``: ``±1`` (``1 - tanh(22) < 2^-62``); infinities too;
* NaN gives NaN;
* else ``tanh|x| = (e^a - 1)/(e^a + 1)``, ``a = 2|x|``, from
  ``e^a = 2^k·(1 + e^r - 1)``, ``a = k·ln 2 + r`` (Cody-Waite with fdlibm's
  split of ln 2; ``k = 0`` below ``a = 0.7``, so the ``2^k - 1`` term never
  cancels), ``e^r - 1 = r + r²·P(r)``, ``P`` the Taylor series to ``r^17``
  (truncation below ``2^-56`` relative), evaluated by Estrin's scheme.
  Numerator and denominator are carried as double-doubles (TwoSum) and the
  quotient gets one FMA correction step, so the result is within 1 ulp of
  the correctly rounded value.

Checked against NumPy (glibc) over every binade of float64 and the edge values
(within 1 ulp, 87% identical) and against mpmath at 60 digits (within 1 ulp):
tests/backend/test_vmath.py.  ``k`` and ``2^k`` come from the bits of a
shifted double (``a/ln 2 + 1.5·2^52`` holds ``k`` in its low bits), through
bit casts: integer arithmetic that vectorizes, where a float-to-int64
conversion does not on AVX2.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir as llvm_ir
from numba import types
from numba.extending import intrinsic, overload, register_jitable

_SHIFT = 6755399441055744.0  # 1.5·2^52: adding it rounds to an integer kept in the low bits
_SHIFT_BITS = 0x4338000000000000
_INV_LN2 = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split: k·_LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_TINY = 3.725290298461914e-09  # 2^-28
_HUGE = 22.0
_SMALL = 0.7  # below, k = 0 and r = 2|x| (no cancellation in 2^k·(e^r - 1) + 2^k - 1 with r < 0)
# 1/n!: e^r - 1 = r + r²·Σ_{n=2..17} r^(n-2)/n!, truncation below 2^-56 for |r| <= 0.7
_C2 = 1.0 / 2
_C3 = 1.0 / 6
_C4 = 1.0 / 24
_C5 = 1.0 / 120
_C6 = 1.0 / 720
_C7 = 1.0 / 5040
_C8 = 1.0 / 40320
_C9 = 1.0 / 362880
_C10 = 1.0 / 3628800
_C11 = 1.0 / 39916800
_C12 = 1.0 / 479001600
_C13 = 1.0 / 6227020800
_C14 = 1.0 / 87178291200
_C15 = 1.0 / 1307674368000
_C16 = 1.0 / 20922789888000
_C17 = 1.0 / 355687428096000


@intrinsic
def _bits(typingctx, x):
    """The IEEE bits of a float64 as an int64 (an LLVM bitcast: no instruction)."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llvm_ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, i):
    """The float64 whose IEEE bits are the int64 ``i``."""
    if i != types.int64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llvm_ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """``a·b + c`` rounded once (``llvm.fma``: the FMA instruction where the CPU has one,
    else libm's exact ``fma``)."""
    if not (a == b == c == types.float64):
        return None

    def codegen(context, builder, sig, args):
        f64 = llvm_ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f64], llvm_ir.FunctionType(f64, [f64, f64, f64]))
        return builder.call(fn, args)

    return types.float64(types.float64, types.float64, types.float64), codegen


@intrinsic
def _select(typingctx, test, a, b):
    """``a if test else b`` as an LLVM ``select`` (no branch, so no basic block in
    Numba's IR: the loop around an inlined :func:`tanh` stays one block and vectorizes)."""
    if not isinstance(test, types.Boolean) or a != b:
        return None

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])

    return a(test, a, b), codegen


@register_jitable(inline="always")
def _two_sum(a, b):
    """``(s, e)``: ``s = fl(a + b)`` and ``a + b = s + e`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def tanh(x):
    """``np.tanh(x)``; in a Numba kernel, the vectorizable float64 version."""
    return np.tanh(x)


@overload(tanh, inline="always", jit_options={"error_model": "numpy"})
def _tanh_overload(x):
    if x == types.float64:
        return _tanh_impl
    if isinstance(x, types.Float):
        return lambda x: np.tanh(x)
    return None


def _tanh_impl(x):
    a = abs(x)
    a2 = _select(a < _HUGE, a + a, 2.0 * _HUGE)  # 2|x|, clamped so expm1 stays finite (NaN: handled last)
    y = a2 * _INV_LN2 + _SHIFT
    small = a2 < _SMALL
    kf = _select(small, 0.0, y - _SHIFT)  # round(2|x| / ln 2), 0 <= k <= 64
    k = _select(small, np.int64(0), _bits(y) - _SHIFT_BITS)
    r = (a2 - kf * _LN2_HI) - kf * _LN2_LO
    # P(r) = Σ_{n=2..17} r^(n-2)/n! by Estrin's scheme: 5 dependent steps instead of
    # Horner's 15 (the loop is latency-bound: 4.0 -> 2.1 ms CPU for 2^19 values)
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    q0 = (_C2 + r * _C3) + r2 * (_C4 + r * _C5)
    q1 = (_C6 + r * _C7) + r2 * (_C8 + r * _C9)
    q2 = (_C10 + r * _C11) + r2 * (_C12 + r * _C13)
    q3 = (_C14 + r * _C15) + r2 * (_C16 + r * _C17)
    p = (q0 + r4 * q1) + r8 * (q2 + r4 * q3)
    c = r2 * p
    er = r + c  # e^r - 1 = er + er_lo (Fast2Sum: |c| < |r|)
    er_lo = c - (er - r)
    scale = _from_bits((k + 1023) << 52)  # 2^k, exact
    m = scale * er  # exact
    s1 = scale - 1.0  # exact for k <= 53; beyond, tanh rounds to 1
    t, t_lo = _two_sum(m, s1)  # e^(2|x|) - 1 = t + t_lo
    t_lo = t_lo + scale * er_lo
    d, d_lo = _two_sum(t, 2.0)  # e^(2|x|) + 1 = d + d_lo
    d_lo = d_lo + t_lo
    inv = 1.0 / d  # one division (the loop's slowest instruction)
    q = t * inv
    rem = -_fma(q, d, -t)  # t - q·d exactly
    z = q + ((rem + t_lo) - q * d_lo) * inv  # (t + t_lo) / (d + d_lo), one correction step
    z = _select(a >= _HUGE, 1.0, z)  # infinities too
    z = _select(x < 0.0, -z, z)
    z = _select(a < _TINY, x, z)  # keeps -0.0 and subnormals
    return _select(x != x, x, z)  # NaN (the clamp above made it 44)


__all__ = ["tanh"]
