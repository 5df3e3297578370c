"""The NaN/infinity test of a call's inputs, compiled (issue #13 item 7: dispatch;
the "never a wrong answer" standard refuses non-finite inputs, paper Section 4.3).

A float is NaN or infinite exactly when its exponent bits are all ones.  The
scan reads the array's bits as integers and keeps the largest exponent field
seen: an integer ``max`` reduction, which LLVM vectorizes (a per-value
``isfinite``, or a float sum in a fixed order, does not), with no branch, no
early exit, and no overflow to tell apart from an infinity.  The bits are
read as *signed* integers: the masked field is never negative, and AVX2
compares signed 64-bit integers (an unsigned max did not vectorize: 11 us at
16000 values against 1.4).  Measured on this machine (one thread, float64,
medians, the call included): 0.25 us for a few values against 0.87 us for
the BLAS self-dot ``a @ a`` this replaces, 1.4 against 1.8-5.1 us at 16000
(the self-dot, or NumPy's pairwise sum under ``errstate`` past 8192 values),
86 against 158 us at 1e6, 0.64 against 0.84 ms at 4e6, and at memory speed
past that (4.2 against 4.4 ms at 16e6).  Session 9's compiled scan counted
bad values per block of 4096 with an early exit and did not vectorize (5.6
ms at 4e6).

One function per float type, each taking the 1-D contiguous float array (a
second argument, or a ``view`` in Python, costs 0.4 us a call).  Each is
compiled on its first call, which is a planned call's (the first call of a
signature validates through ``evaluator.prepare_inputs``), and kept in
Numba's disk cache.

A call that runs its kernel on k > 1 threads scans a large input on those
threads too (``PARALLEL_SCANS``, a ``prange`` max reduction; dispatch.py
decides).  The serial scan of a kernel's inputs otherwise caps its speed-up:
the 5-point Laplacian's loss at 1024² ran 0.9 ms in the kernel and 0.6 ms
in the scan of its two 8 MB inputs, so two threads gained 1.2x where the
kernel alone gained 1.6-1.8x.  Measured on the 2-core Xeon (session 15,
two threads against the serial scan, float64): 0.013 against 0.017 ms at
1e5 values, 0.032 against 0.094 at 3e5, 0.21 against 0.38 at 1e6, 0.78
against 1.48 at 4e6; below 1e5 the wake-up of the second thread costs more
than it saves (``PARALLEL_SCAN_MIN``).  A ``prange`` over two hand-made
chunks did not vectorize its body (0.54 ms at 1e6 on one thread); Numba's
own reduction does.  Its compilation (about 1 s, parallel=True) happens once
per machine, on the first large parallel call, and is kept in the disk cache.
"""

from __future__ import annotations

import numba
import numpy as np

from .warm_load import warm_loading


@warm_loading
@numba.njit(cache=True, nogil=True)
def finite64(a) -> bool:
    """Every value of the 1-D contiguous float64 array ``a`` is finite."""
    b = a.view(np.int64)
    top = 0
    for i in range(b.shape[0]):
        top = max(top, b[i] & 0x7FF0000000000000)
    return top != 0x7FF0000000000000


@warm_loading
@numba.njit(cache=True, nogil=True)
def finite32(a) -> bool:
    """Every value of the 1-D contiguous float32 array ``a`` is finite."""
    b = a.view(np.int32)
    top = np.int32(0)
    for i in range(b.shape[0]):
        top = max(top, b[i] & np.int32(0x7F800000))
    return top != np.int32(0x7F800000)


@warm_loading
@numba.njit(cache=True, nogil=True, parallel=True)
def finite64_parallel(a) -> bool:
    """``finite64`` on Numba's current thread count (a max reduction over ``prange``)."""
    b = a.view(np.int64)
    top = 0
    for i in numba.prange(b.shape[0]):
        top = max(top, b[i] & 0x7FF0000000000000)
    return top != 0x7FF0000000000000


@warm_loading
@numba.njit(cache=True, nogil=True, parallel=True)
def finite32_parallel(a) -> bool:
    """``finite32`` on Numba's current thread count."""
    b = a.view(np.int32)
    top = np.int32(0)
    for i in numba.prange(b.shape[0]):
        top = max(top, b[i] & np.int32(0x7F800000))
    return top != np.int32(0x7F800000)


SCANS = {np.dtype(np.float64): finite64, np.dtype(np.float32): finite32}
PARALLEL_SCANS = {np.dtype(np.float64): finite64_parallel, np.dtype(np.float32): finite32_parallel}
# values from which a scan on two threads beats one (module doc)
PARALLEL_SCAN_MIN = 1 << 17

__all__ = ["PARALLEL_SCANS", "PARALLEL_SCAN_MIN", "SCANS", "finite32", "finite32_parallel", "finite64",
           "finite64_parallel"]
