"""Kernels are compiled with LLVM's SLP vectorizer (backend/intrinsics.py,
``_SLPVectorizing``; issue #13 item 3), and it changes no result.

* A reduction's ``LANES`` partial sums become packed vector arithmetic in the
  serial kernel's optimised LLVM IR (scalar without the switch: Numba's
  default leaves SLP off and the loop vectorizer may not reassociate a sum).
* Every value and gradient is bit for bit the same with and without it:
  benchmark programs at small sizes, serial and on two threads, float64 and
  float32, each compiled twice into separate caches, once with the switch
  patched out.
* The switch does not leak: Numba's process-wide default is restored after a
  kernel compiles.
"""

import re

import numpy as np
import pytest
from numba.core import config

import tensorlang as tl
from benchmarks import workloads as W
from tensorlang.backend import cache, intrinsics


def _without_slp(monkeypatch):
    monkeypatch.setattr(intrinsics._SLPVectorizing, "_compile_core",
                        lambda self: super(intrinsics._SLPVectorizing, self)._compile_core())


def _fresh(monkeypatch, tmp_path, name):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path / name))
    cache.clear_memory()


def _dispatcher(k):
    plans = list(getattr(k, "_impl", k)._plans.values())
    assert plans
    return plans[0].fn


_VECTOR_ARITH = re.compile(r"= f(mul|add) <\d+ x double>")


def _gemv_ir(monkeypatch, tmp_path, name):
    _fresh(monkeypatch, tmp_path, name)
    n, m = tl.sizes("n m")
    A, v = tl.tensor("A", n, m), tl.tensor("v", m)
    k = tl.compile(tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * v[j])), threads=1)
    rng = np.random.default_rng(0)
    Av, vv = rng.normal(size=(40, 37)), rng.normal(size=37)
    np.testing.assert_allclose(k(A=Av, v=vv), Av @ vv, rtol=1e-13)
    return "\n".join(_dispatcher(k).inspect_llvm().values())


def test_reduction_lanes_become_vector_arithmetic(monkeypatch, tmp_path):
    with_slp = _gemv_ir(monkeypatch, tmp_path, "on")
    assert _VECTOR_ARITH.search(with_slp)
    _without_slp(monkeypatch)
    assert not _VECTOR_ARITH.search(_gemv_ir(monkeypatch, tmp_path, "off"))  # the control: scalar chains
    cache.clear_memory()


def test_numba_default_is_restored_after_a_kernel_compiles(monkeypatch, tmp_path):
    before = config.SLP_VECTORIZE
    _gemv_ir(monkeypatch, tmp_path, "restore")
    assert config.SLP_VECTORIZE == before
    cache.clear_memory()


# (program, threads, dtype): a convolution (tiles, lanes, the parallel chunks), a
# stencil (separated boundaries), pairs under [i < j] in float32, row loops over
# a matrix, a relation
_CASES = [("deconv-m16", 1, np.float64), ("deconv-m16", 2, np.float64), ("image", 1, np.float64),
          ("nbody", 1, np.float32), ("logreg", 1, np.float64), ("sparse", 1, np.float64)]


def _results(name, threads, dtype):
    w = W.BY_NAME[name]
    loss, inputs = w.program()
    d = w.make_data(dict(w.check), seed=3)
    d = {k: (v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v) for k, v in d.items()}
    g = tl.value_and_grad(loss, wrt=[inputs[k] for k in w.wrt], threads=threads)
    value, grads = g(**d)
    grads = grads if isinstance(grads, tuple) else (grads,)
    return [np.asarray(value)] + [np.asarray(x.toarray() if hasattr(x, "toarray") else x) for x in grads]


@pytest.mark.parametrize("name,threads,dtype", _CASES)
def test_slp_changes_no_bit(monkeypatch, tmp_path, name, threads, dtype):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")
    _fresh(monkeypatch, tmp_path, "on")
    on = _results(name, threads, dtype)
    _without_slp(monkeypatch)
    _fresh(monkeypatch, tmp_path, "off")
    off = _results(name, threads, dtype)
    cache.clear_memory()
    for x, y in zip(on, off):
        assert x.dtype == y.dtype == dtype and x.tobytes() == y.tobytes()
