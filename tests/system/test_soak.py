"""Issue 15, Memory: a soak test.  Thousands of distinct programs are built,
differentiated, run and (a share of them) compiled in one process; memory
must stay bounded and everything tensorlang holds must be released.

Outside the default test run (it takes minutes).  Run it with::

    TENSORLANG_SOAK=1 python -m pytest tests/system/test_soak.py -q -s

``TENSORLANG_SOAK_PROGRAMS`` (default 2000) sets the number of programs and
``TENSORLANG_SOAK_COMPILE_EVERY`` (default 20) how often one is compiled
with Numba.  Numba never frees the machine code of a compiled function (its
MCJIT engine keeps every module it was given, ``numba/core/codegen.py``
``_add_module``), so each *newly compiled* kernel costs a fixed amount of
memory for the life of the process; the test measures that floor on its own
kernels and asserts that everything else (the front end, the derivatives,
the evaluator, the kernel table, ``sys.modules``) stays under 100 MB.
"""

from __future__ import annotations

import gc
import os
import sys
import weakref

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import cache

pytestmark = pytest.mark.skipif(not os.environ.get("TENSORLANG_SOAK"),
                                reason="soak test: set TENSORLANG_SOAK=1 (takes minutes)")

BUDGET_MB = 100.0


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _program(k: int):
    """A distinct program per k (a different constant and shape of loss)."""
    n = tl.size("n")
    x = tl.tensor("x", n)
    w = tl.tensor("w", n)
    a = 0.5 + k / 7.0
    if k % 3 == 0:
        loss = tl.sum(n, lambda i: tl.tanh(a * x[i]) * w[i])
        grad = lambda xv, wv: a * (1 - np.tanh(a * xv) ** 2) * wv  # noqa: E731
        value = lambda xv, wv: np.sum(np.tanh(a * xv) * wv)  # noqa: E731
    elif k % 3 == 1:
        y = tl.gen(n, lambda i: x[i] * w[i] + a)
        loss = tl.sum(n, lambda i: y[i] * y[i])
        grad = lambda xv, wv: 2 * (xv * wv + a) * wv  # noqa: E731
        value = lambda xv, wv: np.sum((xv * wv + a) ** 2)  # noqa: E731
    else:
        loss = tl.let(tl.sum(n, lambda i: x[i] * w[i]), lambda s: s * s * a)
        grad = lambda xv, wv: 2 * a * np.dot(xv, wv) * wv  # noqa: E731
        value = lambda xv, wv: a * np.dot(xv, wv) ** 2  # noqa: E731
    return loss, x, value, grad


def _run(k: int, compile_it: bool, rng):
    loss, x, value, grad = _program(k)
    xv, wv = rng.standard_normal(5), rng.standard_normal(5)
    v, g = tl.value_and_grad(loss, wrt=x)(x=xv, w=wv)
    assert np.isclose(v, value(xv, wv)) and np.allclose(g, grad(xv, wv))
    if compile_it:
        kern = tl.compile(loss, threads=1)
        assert np.isclose(kern(x=xv, w=wv), value(xv, wv))
        return weakref.ref(kern)
    return None


def test_soak_distinct_programs():
    total = int(os.environ.get("TENSORLANG_SOAK_PROGRAMS", "2000"))
    every = int(os.environ.get("TENSORLANG_SOAK_COMPILE_EVERY", "20"))
    rng = np.random.default_rng(0)
    for k in range(-6, 0):  # warm up every code path (imports, Numba's own first compile)
        _run(k, True, rng)
    gc.collect()
    # Numba's fixed cost of one newly compiled kernel, measured on kernels like the soak's
    before = rss_mb()
    probes = 10
    for k in range(10**6, 10**6 + probes):
        _run(k, True, rng)
    gc.collect()
    numba_floor = max(0.0, (rss_mb() - before) / probes)
    start = rss_mb()
    kernels = []
    compiled = 0
    for k in range(total):
        ref = _run(k, k % every == 0, rng)
        if ref is not None:
            kernels.append(ref)
            compiled += 1
    gc.collect()
    cache.clear_memory()
    grown = rss_mb() - start
    beyond_numba = grown - compiled * numba_floor
    print(f"\nsoak: {total} programs ({compiled} compiled): RSS +{grown:.1f} MB; Numba floor "
          f"{numba_floor * 1024:.0f} KB per new kernel; beyond it {beyond_numba:+.1f} MB (budget {BUDGET_MB:.0f} MB)")
    assert all(r() is None for r in kernels), "a dropped Kernel is still alive"
    assert len(cache._TABLE) <= cache.TABLE_SIZE
    assert not [m for m in sys.modules if m.startswith(cache._PREFIX)], "kernel modules left in sys.modules"
    assert beyond_numba < BUDGET_MB
