"""A tanh that LLVM can vectorize, for kernels (issue #13 item 6).

Numba compiles ``np.tanh`` to a call of libm's ``tanh``: one opaque call per
element (about 19 ns here), which LLVM cannot vectorize; the tanh MLP's loss
spent about a third of its time there.  :func:`tanh` is the same function
written in arithmetic, comparisons and bit casts only, no calls and no
branches (LLVM selects), emitted as LLVM instructions by an intrinsic, so a loop
around it vectorizes
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

import math

import numpy as np
from llvmlite import ir as llvm_ir
from numba import types
from numba.extending import intrinsic, overload

_SHIFT = 6755399441055744.0  # 1.5·2^52: adding it rounds to an integer kept in the low bits
_SHIFT_BITS = 0x4338000000000000
_INV_LN2 = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split: k·_LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_TINY = 3.725290298461914e-09  # 2^-28
_HUGE = 22.0
_SMALL = 0.7  # below, k = 0 and r = 2|x| (no cancellation in 2^k·(e^r - 1) + 2^k - 1 with r < 0)
# 1/n!: e^r - 1 = r + r²·Σ_{n=2..17} r^(n-2)/n!, truncation below 2^-56 for |r| <= 0.7
_COEFF = {n: 1.0 / math.factorial(n) for n in range(2, 18)}


def tanh(x):
    """``np.tanh(x)``; in a Numba kernel, the vectorizable float64 version."""
    return np.tanh(x)


@overload(tanh, inline="always", jit_options={"error_model": "numpy"})
def _tanh_overload(x):
    if x == types.float64:
        return lambda x: _tanh64(x)
    if isinstance(x, types.Float):
        return lambda x: np.tanh(x)
    return None


def _tanh_ir(builder, x):
    """The LLVM instructions of tanh(x) for a float64 ``x`` (the algorithm of the
    module doc, step for step).  Emitted straight into the caller's function by
    the intrinsic :func:`_tanh64`: no Numba IR to inline and type at every call
    site (an inlined Python body cost about 0.5 s of compile time per site)."""
    f64, i64 = llvm_ir.DoubleType(), llvm_ir.IntType(64)

    def c(v):
        return llvm_ir.Constant(f64, v)

    add, sub, mul = builder.fadd, builder.fsub, builder.fmul

    def lt(a, b):  # Python's a < b on floats: ordered (False for NaN)
        return builder.fcmp_ordered("<", a, b)

    fabs = builder.module.declare_intrinsic("llvm.fabs", [f64], llvm_ir.FunctionType(f64, [f64]))
    fma = builder.module.declare_intrinsic("llvm.fma", [f64], llvm_ir.FunctionType(f64, [f64, f64, f64]))

    def two_sum(a, b):  # (s, e): s = fl(a + b), a + b = s + e exactly (Knuth)
        s = add(a, b)
        bb = sub(s, a)
        return s, add(sub(a, sub(s, bb)), sub(b, bb))

    a = builder.call(fabs, [x])
    a2 = builder.select(lt(a, c(_HUGE)), add(a, a), c(2.0 * _HUGE))  # 2|x|, clamped (NaN: handled last)
    y = add(mul(a2, c(_INV_LN2)), c(_SHIFT))
    small = lt(a2, c(_SMALL))
    kf = builder.select(small, c(0.0), sub(y, c(_SHIFT)))  # round(2|x| / ln 2), 0 <= k <= 64
    k = builder.select(small, llvm_ir.Constant(i64, 0),
                       builder.sub(builder.bitcast(y, i64), llvm_ir.Constant(i64, _SHIFT_BITS)))
    r = sub(sub(a2, mul(kf, c(_LN2_HI))), mul(kf, c(_LN2_LO)))
    # P(r) = Σ_{n=2..17} r^(n-2)/n! by Estrin's scheme: 5 dependent steps instead of
    # Horner's 15 (the loop is latency-bound: 4.0 -> 2.1 ms CPU for 2^19 values)
    r2 = mul(r, r)
    r4 = mul(r2, r2)
    r8 = mul(r4, r4)

    def pair(n):  # C_n + r·C_(n+1)
        return add(c(_COEFF[n]), mul(r, c(_COEFF[n + 1])))

    q = [add(pair(n), mul(r2, pair(n + 2))) for n in (2, 6, 10, 14)]
    p = add(add(q[0], mul(r4, q[1])), mul(r8, add(q[2], mul(r4, q[3]))))
    cc = mul(r2, p)
    er = add(r, cc)  # e^r - 1 = er + er_lo (Fast2Sum: |cc| < |r|)
    er_lo = sub(cc, sub(er, r))
    scale = builder.bitcast(builder.shl(builder.add(k, llvm_ir.Constant(i64, 1023)), llvm_ir.Constant(i64, 52)), f64)
    m = mul(scale, er)  # exact
    s1 = sub(scale, c(1.0))  # exact for k <= 53; beyond, tanh rounds to 1
    t, t_lo = two_sum(m, s1)  # e^(2|x|) - 1 = t + t_lo
    t_lo = add(t_lo, mul(scale, er_lo))
    d, d_lo = two_sum(t, c(2.0))  # e^(2|x|) + 1 = d + d_lo
    d_lo = add(d_lo, t_lo)
    inv = builder.fdiv(c(1.0), d)  # one division (the loop's slowest instruction)
    qt = mul(t, inv)
    rem = builder.fneg(builder.call(fma, [qt, d, builder.fneg(t)]))  # t - q·d exactly
    z = add(qt, mul(sub(add(rem, t_lo), mul(qt, d_lo)), inv))  # (t + t_lo)/(d + d_lo), one correction
    z = builder.select(builder.fcmp_ordered(">=", a, c(_HUGE)), c(1.0), z)  # infinities too
    z = builder.select(lt(x, c(0.0)), builder.fneg(z), z)
    z = builder.select(lt(a, c(_TINY)), x, z)  # keeps -0.0 and subnormals
    return builder.select(builder.fcmp_unordered("uno", x, x), x, z)  # NaN (the clamp made it 44)


@intrinsic
def _tanh64(typingctx, x):
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return _tanh_ir(builder, args[0])

    return types.float64(types.float64), codegen


__all__ = ["tanh"]
