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
* A kernel with a straight-line block longer than ``codegen.SLP_MAX_BLOCK``
  floating-point operations compiles without it (LLVM's SLP pass grows
  faster than linearly in a block's length), counted by hand on small blocks.
"""

import re

import numpy as np
import pytest
from numba.core import config

import tensorlang as tl
from benchmarks import workloads as W
from tensorlang.backend import cache, codegen, intrinsics
from tensorlang.backend import kir as K
from tensorlang.backend.loopir import Assign, Loop, Store


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
    fn = _dispatcher(k)
    return "\n".join(fn.inspect_llvm().values()), fn


def test_reduction_lanes_become_vector_arithmetic(monkeypatch, tmp_path):
    with_slp, fn = _gemv_ir(monkeypatch, tmp_path, "on")
    assert fn._compiler.pipeline_class is intrinsics.SLPKernelCompiler
    assert _VECTOR_ARITH.search(with_slp)
    _without_slp(monkeypatch)
    assert not _VECTOR_ARITH.search(_gemv_ir(monkeypatch, tmp_path, "off")[0])  # the control: scalar chains
    cache.clear_memory()


def test_numba_default_is_restored_after_a_kernel_compiles(monkeypatch, tmp_path):
    before = config.SLP_VECTORIZE
    _gemv_ir(monkeypatch, tmp_path, "restore")
    assert config.SLP_VECTORIZE == before
    cache.clear_memory()


# (program, threads, dtype): a convolution (tiles, lanes), a stencil (separated
# boundaries), pairs under [i < j] in float32, row loops over a matrix (serial, and
# the parallel variant's reductions), a relation
_CASES = [("deconv-m16", 1, np.float64), ("image", 1, np.float64), ("nbody", 1, np.float32),
          ("logreg", 1, np.float64), ("logreg", 2, np.float64), ("sparse", 1, np.float64)]


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


def test_largest_block_counts_floating_point_operations():
    a, b = K.Load("x", (K.Int(0),)), K.Name("v")
    tanh = K.FCall(codegen.VECTOR_TANH, (a,), numpy=False)  # vmath's, inlined
    body = [Assign("v", K.FSum((a, a, K.FMul(a, b)))),  # 2 additions, 1 product
            Loop("i", K.Int(0), K.Name("n"), 1, (Store("t", (K.Name("i"),), K.FCall("exp", (tanh,))),), "gen"),
            Assign("w", K.FNeg(b))]
    # the loop body: exp (a call) + tanh (inlined); the blocks around it are counted apart
    assert codegen._largest_block(body) == max(3, 1 + codegen.TANH_OPS, 1)


def test_long_straight_line_blocks_compile_without_slp(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, "long")
    x = tl.tensor("x", 3)
    e = x[0]
    for _ in range(codegen.SLP_MAX_BLOCK // codegen.TANH_OPS + 2):
        e = tl.tanh(e) * 1.0001 + x[1] * 0.1
    k = tl.compile(e, threads=1)
    xv = np.array([0.5, -1.25, 2.0])
    np.testing.assert_allclose(k(x=xv), tl.evaluate(e, x=xv), rtol=1e-12)
    assert _dispatcher(k)._compiler.pipeline_class is intrinsics.KernelCompiler
    cache.clear_memory()
