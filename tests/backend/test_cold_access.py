"""Cold compile latency from the generated code's side (issue #14 item 6;
paper Section 4.3): serial kernels read and write array elements through the
``load``/``store`` intrinsics and compile with ``intrinsics.KernelCompiler``
(Numba's pipeline without the closure-inlining and SSA passes).

Checked against NumPy: every rank, float32/float64/bool elements, index
types Numba may give an index (int64, int32, uint64, literals), and a value
stored into an array of another type; that the serial variant of a stencil
kernel prints no subscript for a proven access (one intrinsic call each) and
names the pipeline; that a kernel whose locals are assigned on several paths
(what SSA would version) computes what NumPy does under the pipeline.
"""

import numba
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.intrinsics import KernelCompiler, load, store

_OPTS = dict(nogil=True, error_model="numpy", no_cfunc_wrapper=True, no_rewrites=True, pipeline_class=KernelCompiler)


@numba.njit(**_OPTS)
def _copy_shifted_2d(a, out, n, m):
    for i in range(1, n):
        for j in range(0, m - 1):
            store(out, load(a, i - 1, j + 1) * 2.0, i, j)
    return out


@numba.njit(**_OPTS)
def _ranks(a1, a3, a4):
    s = 0.0
    for i in range(a1.shape[0]):
        s += load(a1, i)
    for i in range(a3.shape[0]):
        for j in range(a3.shape[1]):
            for k in range(a3.shape[2]):
                s += load(a3, i, j, k) * (i + 1)
    s += load(a4, 1, 0, 2, 1)
    store(a4, s, 0, 0, 0, 0)
    return s


@numba.njit(**_OPTS)
def _index_types(a, i32, u64):
    return load(a, i32, u64) + load(a, np.int32(1), 2) + load(a, 0, np.uint64(0))


@numba.njit(**_OPTS)
def _mask_and_cast(mask, x, out):
    for i in range(x.shape[0]):
        if load(mask, i):
            store(out, load(x, i), i)  # float64 value into a float32 array, as out[i] = v
        else:
            store(out, 1, i)  # an integer into a float array
    return out


@numba.njit(**_OPTS)
def _reassigned(x, n):
    acc = 0.0
    for i in range(n):
        v = 0.0
        if i >= 1:
            v = load(x, i - 1)
        k = i
        if k + 2 == n:
            k = n - 1
        acc += v * load(x, k)
    return acc


def test_load_store_match_numpy_subscripts():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6))
    out = np.zeros_like(a)
    _copy_shifted_2d(a, out, 5, 6)
    want = np.zeros_like(a)
    want[1:, :-1] = 2.0 * a[:-1, 1:]
    np.testing.assert_array_equal(out, want)


def test_every_rank_and_the_stored_value():
    rng = np.random.default_rng(1)
    a1, a3, a4 = rng.standard_normal(7), rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 2, 3, 2))
    want = a1.sum() + sum(a3[i].sum() * (i + 1) for i in range(2)) + a4[1, 0, 2, 1]
    got = _ranks(a1, a3, a4.copy())
    assert got == pytest.approx(want, rel=1e-14)
    b = a4.copy()
    _ranks(a1, a3, b)
    assert b[0, 0, 0, 0] == got
    b[0, 0, 0, 0] = a4[0, 0, 0, 0]
    np.testing.assert_array_equal(b, a4)  # nothing else written


def test_index_types():
    a = np.arange(12.0).reshape(3, 4)
    assert _index_types(a, np.int32(2), np.uint64(3)) == a[2, 3] + a[1, 2] + a[0, 0]


def test_bool_elements_and_value_casts():
    mask = np.array([True, False, True, False])
    x = np.array([0.5, 2.0, 1.0 / 3.0, 4.0])
    out = np.zeros(4, dtype=np.float32)
    _mask_and_cast(mask, x, out)
    np.testing.assert_array_equal(out, np.where(mask, x, 1.0).astype(np.float32))


def test_locals_assigned_on_several_paths_without_ssa():
    x = np.linspace(-1.0, 2.0, 9)
    n = len(x)
    want = 0.0
    for i in range(n):
        v = x[i - 1] if i >= 1 else 0.0
        want += v * x[n - 1 if i + 2 == n else i]
    assert _reassigned(x, n) == want


def test_pipeline_drops_only_the_named_passes():
    from numba.core.compiler import DefaultPassBuilder, Flags, StateDict

    def fresh():
        st = StateDict()
        st.flags, st.func_ir = Flags(), None
        return st

    state = fresh()
    default = [p.__name__ for p, _ in DefaultPassBuilder.define_nopython_pipeline(state).passes]
    state = fresh()
    kc = KernelCompiler.__new__(KernelCompiler)
    kc.state = state
    (pm,) = kc.define_pipelines()
    got = [p.__name__ for p, _ in pm.passes]
    assert [p for p in default if p not in KernelCompiler.SKIP] == got
    assert "NativeLowering" in got and "NopythonTypeInference" in got
    assert state.flags.enable_ssa is False


def test_stencil_kernel_prints_intrinsic_accesses_and_matches_numpy():
    n = tl.size("n")
    x = tl.tensor("x", n)
    lap = tl.gen(n, lambda i: tl.iverson((i >= 1) & (i + 2 <= n), x[i - 1] - 2.0 * x[i] + x[i + 1]))
    k = tl.compile(lap, threads=1)
    serial = k.source.split("def kernel_parallel")[0]
    assert "pipeline_class=_SLPKernelCompiler" in serial  # the pipeline without the passes, with SLP (a short block)
    assert "_ld(x0" in serial or "_ld(x" in serial
    assert "[U(" not in serial  # every proven access is one intrinsic call
    xv = np.random.default_rng(2).standard_normal(10)
    want = np.zeros(10)
    want[1:-1] = xv[:-2] - 2.0 * xv[1:-1] + xv[2:]
    np.testing.assert_allclose(k(x=xv), want, rtol=1e-15, atol=1e-15)
