"""Large kernel arrays on transparent huge pages (issue #13: kernel speed; paper Section 4.3).

A kernel allocates its outputs (``np.empty`` inside the Numba function, from
Numba's runtime allocator, i.e. ``malloc``).  The first write to each 4 KB
page faults; writing a fresh 128 MB array (the quadratic form's n x n
gradient at n = 4000) cost 160 ms of faults on this machine against 40 ms for
the same array from NumPy, which asks the kernel for huge pages
(``madvise(MADV_HUGEPAGE)``: one fault per 2 MB) when transparent huge pages
are in ``madvise`` mode.  :func:`advise_huge` does the same for an array the
kernel just allocated, before anything is written to it: advice only, it
changes no value.  It calls the C library's ``madvise`` by symbol name (no
address baked into the compiled code, so Numba still caches the kernel).
Elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import sys

import numba
from numba import types

from .warm_load import warm_loading

HUGE_MIN_BYTES = 4 << 20  # two huge pages: smaller arrays gain nothing
MADV_HUGEPAGE = 14  # Linux <sys/mman.h>
PAGE = 4096

if sys.platform.startswith("linux"):
    _madvise = types.ExternalFunction("madvise", types.int32(types.intp, types.intp, types.int32))

    @warm_loading
    @numba.njit(cache=True, nogil=True)
    def advise_huge(a):
        """Advise huge pages for the page-aligned part of ``a``'s buffer (no effect on values)."""
        nbytes = a.size * a.itemsize
        if nbytes >= HUGE_MIN_BYTES:
            p = a.ctypes.data
            lo = (p + (PAGE - 1)) & ~(PAGE - 1)
            hi = (p + nbytes) & ~(PAGE - 1)
            if hi > lo:
                _madvise(lo, hi - lo, MADV_HUGEPAGE)  # a refusal (EINVAL) only leaves small pages
        return 0

else:  # pragma: no cover - not Linux

    @warm_loading
    @numba.njit(cache=True, nogil=True)
    def advise_huge(a):
        return 0


__all__ = ["advise_huge", "HUGE_MIN_BYTES"]
