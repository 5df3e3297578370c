"""Kernel IR regressions (issue 12): one test per class of failure the issue
lists, each checked against NumPy or the reference evaluator; and the float32
contract of issue 18 (item 2).

float32 tolerance: a float32 kernel computes every operation in float32, so
it agrees with the float64 result to ``rtol = 1e-5`` on these small, well
conditioned programs (a few tens of roundings of 2**-24 each) and
``atol = 1e-6`` times the result's magnitude near zero.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.backend import kir
from tensorlang.driver import python_kernel  # the route "compile", run as plain Python
from tensorlang.backend.loopir import AccAdd, Alloc, Assign, If, Loop, Store, walk_stmts
from tensorlang.ir import Const
from tests.strategies import programs


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


n = tl.size("n")
x = tl.tensor("x", n)
X5 = np.arange(1.0, 6.0)


def compiled(e, **inputs):
    return tl.compile(e, threads=1)(**inputs)


# -- hygiene ---------------------------------------------------------------------------------


def test_scalar_input_and_lambda_parameter_that_sanitize_alike():
    """The issue's example: input ``x_2`` and index ``a_x`` met as ``a_x_2``
    and gave [0, 2, 6, 12, 20]."""
    s = tl.scalar("x_2")
    e = tl.gen(n, lambda a_x: s * x[a_x])
    k = tl.compile(e, threads=1)
    np.testing.assert_array_equal(k(x=X5, x_2=10.0), [10.0, 20.0, 30.0, 40.0, 50.0])
    assert "x_2" not in k.source and "a_x" not in k.source  # no user text in kernels
    # the alpha-equivalent program written with `lambda i` shares the entry and is right
    k2 = tl.compile(tl.gen(n, lambda i: s * x[i]), threads=1)
    assert k2.key == k.key and k2.cache_hit and k2.source == k.source
    np.testing.assert_array_equal(k2(x=X5, x_2=10.0), [10.0, 20.0, 30.0, 40.0, 50.0])


def test_names_that_sanitize_alike_unicode_and_generated_prefixes():
    nn = tl.size("ñ")
    a, b = tl.tensor("xα", nn), tl.tensor("xβ", nn)  # both sanitized to x_ before
    c, d = tl.tensor("x0", nn), tl.tensor("np", nn)  # a generated name; the NumPy module's
    R1, R2 = tl.relation("R_α", nn, nn), tl.relation("R_β", nn, nn)
    s = tl.scalar("U")
    e = tl.gen(nn, lambda n0: tl.sum(nn, lambda i0: tl.iverson(R1(n0, i0), a[i0] * c[n0])
                                     + tl.iverson(R2(i0, n0) | (i0 == n0), b[i0] * d[i0] * s)))
    rng = np.random.default_rng(0)
    ins = {"xα": rng.standard_normal(4), "xβ": rng.standard_normal(4), "x0": rng.standard_normal(4),
           "np": rng.standard_normal(4), "R_α": rng.random((4, 4)) < 0.5, "R_β": rng.random((4, 4)) < 0.5, "U": 1.5}
    np.testing.assert_allclose(compiled(e, **ins), tl.evaluate(e, **ins), rtol=1e-13)


def test_source_is_a_function_of_the_canonical_program():
    """Positional names: alpha-equivalent programs print the same source."""
    y = tl.tensor("totally_different", n)
    e1 = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, x[j])))
    e2 = tl.gen(n, lambda q: tl.sum(n, lambda é: tl.iverson(é <= q, x[é])))
    assert python_kernel(e1).source == python_kernel(e2).source
    e3 = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, y[j])))
    assert python_kernel(e3).source == python_kernel(e1).source  # names map to positions


# -- the kernel IR is typed -------------------------------------------------------------------


def test_loop_ir_holds_typed_nodes_not_text():
    e = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson((j <= i) & (2 * j >= i), tl.exp(x[j]) * x[i] ** 3)))
    ir = tl.compile(e, threads=1).loop_ir
    for st in walk_stmts(ir.body):
        match st:
            case Loop(lo=lo, hi=hi):
                assert isinstance(lo, kir.KExpr) and isinstance(hi, kir.KExpr)
            case If(cond=c):
                assert isinstance(c, kir.KExpr)
            case Assign(value=v) | AccAdd(value=v) | Store(value=v):
                assert isinstance(v, kir.KExpr)
            case Alloc(shape=sh):
                assert all(isinstance(d, kir.KExpr) for d in sh)
    with pytest.raises(TypeError):
        kir.Float(1)  # constants are exact floats, nothing else


# -- scalar functions and constants --------------------------------------------------------------


@pytest.mark.parametrize("p", [np.inf, -np.inf, np.nan, 1e300, -1e300, -1, -2, 0.5, 2.5, 0, 1, 2, 2**70])
def test_power_with_any_real_exponent_follows_numpy(p):
    e = tl.gen(n, lambda i: x[i] ** p)
    xv = np.array([0.0, 0.5, 1.0, 2.0, -1.0, -0.5])
    with np.errstate(all="ignore"):
        want = np.power(xv, float(p))
    np.testing.assert_array_equal(compiled(e, x=xv), want)
    np.testing.assert_array_equal(python_kernel(e)(x=xv), want)


def test_division_and_negative_powers_at_zero_are_ieee_not_exceptions():
    e = tl.gen(n, lambda i: x[i] ** -1 + x[i] ** -2 + 1 / x[i])
    xv = np.array([0.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = tl.evaluate(e, x=xv)
    np.testing.assert_array_equal(ref, [np.inf, 0.5 + 0.25 + 0.5])
    np.testing.assert_array_equal(compiled(e, x=xv), ref)
    np.testing.assert_array_equal(python_kernel(e)(x=xv), ref)
    d = tl.gen(n, lambda i: 1 / x[i] - 1 / x[i])  # inf - inf = nan, as NumPy
    assert np.isnan(compiled(d, x=np.zeros(2))).all()


def test_constants_of_any_magnitude_are_exact():
    vals = [1e308, 5e-324, 2.0**70, 0.1, -123456789.123456789, float(2**70 + 1), 1 / 3]
    for v in vals:
        e = tl.gen(n, lambda i: Const(v) * x[i])
        assert compiled(e, x=np.ones(2)).tolist() == [v, v]  # bit-exact
    inf = tl.gen(n, lambda i: x[i] + Const(float("inf")) + Const(float("nan")) * 0)
    assert np.isnan(compiled(inf, x=np.ones(2))).all()
    with pytest.raises(tl.TensorLangError, match="does not fit"):
        tl.compile(tl.gen(n, lambda i: Const(10**400) * x[i]))


def test_huge_offset_in_a_guard_is_decided_at_compile_time():
    # offsets beyond int64 are refused at construction (indices are 64-bit, |c| <= 2**62) ...
    with pytest.raises(tl.TensorLangError, match="too large"):
        tl.iverson(n + 2**70 > 0, x[0])
    # ... and the largest legal ones, far beyond any size, are decided by isl, never printed
    e = tl.gen(n, lambda i: tl.iverson(i + 2**62 < n, x[i]) + tl.iverson(i < n + 2**62, 2 * x[i]))
    np.testing.assert_array_equal(compiled(e, x=X5), 2 * X5)
    np.testing.assert_array_equal(tl.evaluate(e, x=X5), 2 * X5)
    with pytest.raises(tl.InputError, match="exceeds"):
        tl.compile(tl.gen(n, lambda i: Const(1.0)), threads=1)(n=2**41)


def test_user_function_compiles_with_numba_or_its_numpy_callable():
    def mix(a, b):
        return np.sin(a) * b

    f = tl.register_function("kir_mix", 2, mix, lambda a, b: a, lambda a, b: (tl.cos(a) * b, tl.sin(a)), replace=True)
    g = tl.register_function(
        "kir_cube", 1, lambda a: np.power(a, 3), lambda a: a**3, lambda a: (3 * a * a,),
        numba=lambda a: a * a * a, replace=True)
    loss = tl.sum(n, lambda i: f(x[i], g(x[i])))
    xv = np.linspace(-1, 1, 7)
    k = tl.compile(loss, threads=1)
    np.testing.assert_allclose(k(x=xv), np.sum(np.sin(xv) * xv**3), rtol=1e-13)
    # its gradient (the D[f] expansion) compiles too, and equals the formula
    G = tl.grad(loss, wrt=x)
    gk = tl.compile(G.program, threads=1)
    want = np.cos(xv) * xv**3 + np.sin(xv) * 3 * xv**2
    np.testing.assert_allclose(gk(x=xv), want, rtol=1e-12)


def test_function_numba_cannot_compile_is_refused_at_compile_time():
    def opaque(a):
        return float(np.asarray([a], dtype=object)[0])  # object arrays: not Numba

    h = tl.register_function("kir_opaque", 1, opaque, lambda a: a, lambda a: (Const(1.0) + 0 * a,), replace=True)
    e = tl.gen(n, lambda i: h(x[i]))
    np.testing.assert_array_equal(tl.evaluate(e, x=X5), X5)  # the evaluator runs it
    with pytest.raises(tl.UnsupportedError, match="kir_opaque.*numba="):
        tl.compile(e)


# -- sizes of programs -------------------------------------------------------------------------------


def test_sum_of_hundreds_of_terms_and_nesting_hundreds_deep():
    x3 = tl.tensor("x", 3)
    terms = x3[0]
    for k in range(1, 600):
        terms = terms + x3[k % 3] * k
    xv = np.array([0.5, -1.25, 2.0])
    assert compiled(terms, x=xv) == tl.evaluate(terms, x=xv)
    right = x3[0]
    for k in range(1, 400):  # right-nested: a + (b + (c + ...))
        right = x3[k % 3] * k + right
    np.testing.assert_allclose(compiled(right, x=xv), tl.evaluate(right, x=xv), rtol=1e-14)
    deep = x3[0]
    for _ in range(300):
        deep = tl.tanh(deep) * 1.0001 + x3[1] * 0.1
    np.testing.assert_allclose(compiled(deep, x=xv), tl.evaluate(deep, x=xv), rtol=1e-12)

    def chain(v):
        for _ in range(250):
            v = tl.sin(v) + 0.5
        return v

    looped = tl.gen(n, lambda j: chain(x[j]))  # deep inside a loop too
    np.testing.assert_allclose(compiled(looped, x=X5), tl.evaluate(looped, x=X5), rtol=1e-12)


# -- no fallback -------------------------------------------------------------------------------------


def test_runtime_options_are_explicit(monkeypatch):
    from tensorlang.runtime import EvaluatorKernel, LazyKernel, make_callable

    e = tl.gen(n, lambda i: 2 * x[i])
    assert isinstance(make_callable(e, runtime="evaluator"), EvaluatorKernel)
    f = make_callable(e, runtime="compiled")
    np.testing.assert_array_equal(f(x=X5), 2 * X5)
    assert isinstance(f, LazyKernel) and f.compiled
    monkeypatch.setenv("TENSORLANG_RUNTIME", "evaluator")
    assert isinstance(make_callable(e), EvaluatorKernel)
    monkeypatch.setenv("TENSORLANG_RUNTIME", "fast")
    with pytest.raises(tl.TensorLangError, match="runtime"):
        make_callable(e)
    monkeypatch.delenv("TENSORLANG_RUNTIME")
    with pytest.raises(tl.TensorLangError, match="runtime"):
        make_callable(e, runtime="fallback")


def test_a_program_the_backend_refuses_is_an_error_not_a_slow_evaluator(monkeypatch):
    from tensorlang.runtime import make_callable

    def opaque(a):
        return float(np.asarray([a], dtype=object)[0])

    h = tl.register_function("kir_opaque2", 1, opaque, lambda a: a, lambda a: (Const(1.0) + 0 * a,), replace=True)
    f = make_callable(tl.gen(n, lambda i: h(x[i])), runtime="compiled")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs on the evaluator instead" warning either
        with pytest.raises(tl.UnsupportedError):
            f(x=X5)


# -- float32 (issue 18, item 2) ----------------------------------------------------------------------


def test_float32_inputs_give_float32_kernels_and_results():
    A = tl.tensor("A", n, n)
    e = tl.pair(tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, A[i, j] * tl.exp(x[j])))),
                tl.sum(n, lambda i: x[i] ** 2))
    rng = np.random.default_rng(3)
    a64, x64 = rng.standard_normal((6, 6)), rng.standard_normal(6)
    k = tl.compile(e, threads=1)
    v32, s32 = k(A=a64.astype(np.float32), x=x64.astype(np.float32))
    assert v32.dtype == np.float32 and isinstance(s32, np.float32)
    assert "F = np.float32" in k.variant("float32").source
    assert k.variant("float32").key != k.key  # the cache keys on the precision
    v64, s64 = k(A=a64.astype(np.float32).astype(np.float64), x=x64.astype(np.float32).astype(np.float64))
    assert v64.dtype == np.float64 and isinstance(s64, float)
    np.testing.assert_allclose(v32, v64, rtol=1e-5, atol=1e-6 * np.abs(v64).max())
    np.testing.assert_allclose(s32, s64, rtol=1e-5)
    vm, _ = k(A=a64.astype(np.float32), x=x64)  # mixed: float64, as NumPy promotes
    assert vm.dtype == np.float64
    vw, _ = tl.compile(tl.pair(tl.gen(n, lambda i: 2.5 * x[i]), tl.scalar("s") * 1), threads=1)(x=x64.astype(np.float32), s=2.0)
    assert vw.dtype == np.float32  # a Python float is weak


def test_float32_gradient():
    loss = tl.sum(n, lambda i: tl.iverson(i >= 1, (x[i] - x[i - 1]) ** 2))
    g = tl.grad(loss, wrt=x)
    xv = np.random.default_rng(4).standard_normal(100)
    g32 = g(x=xv.astype(np.float32))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g(x=xv.astype(np.float32).astype(np.float64)), rtol=1e-5, atol=1e-5)
    assert g(x=xv[:5].astype(np.float32)).dtype == np.float32  # small sizes (auto runtime) too


def _f32(v, relation: bool):
    if relation:
        return v
    if isinstance(v, tuple):
        return tuple(_f32(a, False) for a in v)
    return np.asarray(v, dtype=np.float32) if isinstance(v, np.ndarray) else np.float32(v)


def _close32(a, b, bound, dtype):
    if isinstance(b, tuple):
        return all(_close32(x, y, bound, dtype) for x, y in zip(a, b))
    if isinstance(b, np.ndarray) and b.dtype == object:
        return all(_close32(x, y, bound, dtype) for x, y in zip(a, b))
    got = np.asarray(a)
    return got.dtype == dtype and np.allclose(got, b, rtol=1e-5, atol=1e-5 * max(1.0, bound), equal_nan=True)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(prog=programs())
def test_float32_random_programs_within_tolerance(prog):
    """Every result of a float32 run is float32 and within the documented
    tolerance of the float64 evaluator on the same (float32-rounded) inputs."""
    ins32 = {k: _f32(v, k in prog.relation_names) for k, v in prog.inputs.items()}
    ref = tl.evaluate(prog.expr, **ins32, **prog.sizes)
    real_inputs = [k for k in ins32 if k not in prog.relation_names]
    dtype = np.float32 if real_inputs else np.float64  # no real input: nothing asks for float32
    assert _close32(python_kernel(prog.expr)(**ins32, **prog.sizes), ref, prog.bound, dtype)
