"""Finiteness witnesses from scalar results (backend/strict.py; issue #13).

A planned call skips the NaN/inf scan of an input its scalar result is
strict in, and checks the result after the call.  Checked here: which inputs
the analysis takes (and the ones it must not: bracketed, function-wrapped,
partly read, under a bracketed sum, behind a BLAS call); that every NaN and
infinity, at every position of a witnessed input, is still refused on
planned calls of ``tl.compile`` and ``tl.value_and_grad``, against
np.isfinite; that finite inputs whose loss overflows keep the computed
answer; and, on random programs, that a non-finite value injected anywhere
into any input is refused by every planned call.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.backend.blas import Gemm
from tensorlang.backend.loopir import walk_stmts
from tensorlang.runtime import make_callable
from tests.strategies import scalar_exprs

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
BAD = (np.nan, np.inf, -np.inf)


pytestmark = pytest.mark.usefixtures("compiled_runtime")  # the kernel at every size, not the evaluator


def witnessed(expr, data) -> set:
    """The inputs a planned call of ``expr`` checks through its scalar result."""
    f = make_callable(expr, threads=1)
    f(**data)
    f(**data)
    (plan,) = f._get()._plans.values()
    return {n for n, _, _ in plan.witness}


def laplacian():
    n = tl.size("n")
    u, f = tl.tensor("u", n, n), tl.tensor("f", n, n)
    inner = lambda i, j: (i >= 1) & (i < n - 1) & (j >= 1) & (j < n - 1)  # noqa: E731
    lap = lambda i, j: 4 * u[i, j] - u[i - 1, j] - u[i + 1, j] - u[i, j - 1] - u[i, j + 1]  # noqa: E731
    return tl.sum([n, n], lambda i, j: tl.iverson(inner(i, j), lap(i, j) ** 2) + (u[i, j] - f[i, j]) ** 2), (u, f)


def deconvolution():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    return tl.sum(n, lambda i: (y[i] - z[i]) ** 2), (x, c, z)


def _refuses_every_bad_value(fn, data: dict) -> None:
    """NaN, +inf and -inf at every position of every input of ``data``: refused, naming the input."""
    for name in data:
        for pos in range(len(data[name])):
            for bad in BAD:
                d = {k: v.copy() for k, v in data.items()}
                d[name][pos] = bad
                with pytest.raises(tl.TensorLangError, match=f"input {name} contains NaN or infinity"):
                    fn(**d)


def _injected_bad_values_refused(fn, prog, names, data) -> None:
    """A NaN or infinity at a drawn position of each input in ``names``: refused by ``fn``."""
    for name in names:
        arr = prog.inputs[name]
        pos = data.draw(st.integers(0, arr.size - 1), label=f"position in {name}")
        bad = data.draw(st.sampled_from(BAD), label="value")
        d = dict(prog.inputs)
        d[name] = arr.copy()
        d[name].flat[pos] = bad
        with pytest.raises(tl.TensorLangError, match="NaN or infinity"):
            fn(**d, **prog.sizes)


def test_which_inputs_are_witnessed():
    """Full, strict reads witness; brackets, functions, partial reads and
    products with a bracketed sum do not (module doc of strict.py)."""
    rng = np.random.default_rng(0)
    loss, _ = laplacian()
    assert witnessed(loss, dict(u=rng.normal(size=(6, 6)), f=rng.normal(size=(6, 6)))) == {"u", "f"}
    loss, _ = deconvolution()
    data = dict(x=rng.normal(size=9), c=rng.normal(size=3), z=rng.normal(size=7))
    assert witnessed(loss, data) == {"c", "x", "z"}  # x[i - j + m - 1], i < n, j < m: all n + m - 1 read

    n = tl.size("n")
    x, y = tl.tensor("x", n), tl.tensor("y", n)
    xs, ys = rng.normal(size=5), rng.normal(size=5)
    cases = {
        "bracket": (tl.sum(n, lambda i: tl.iverson(i < n - 1, x[i] * x[i]) + y[i]), {"y"}),
        "tanh": (tl.sum(n, lambda i: tl.tanh(x[i]) + y[i] * y[i]), {"y"}),
        "partial": (tl.sum(n - 1, lambda i: x[i] * y[i + 1]), set()),
        "bracketed sum factor": (tl.sum(n, lambda i: x[i] * tl.sum(n, lambda j: tl.iverson(j < i, y[j]))), set()),
        "exp": (tl.sum(n, lambda i: tl.exp(x[i])) + tl.sum(n, lambda i: 2 * y[i]), {"y"}),
        "zero factor": (tl.sum(n, lambda i: x[i] * y[i]) + tl.sum(n, lambda i: 0 * x[i]), {"x", "y"}),
        "reversed": (tl.sum(n, lambda i: x[n - 1 - i] * y[i]), {"x", "y"}),
        "shifted": (tl.sum(n - 1, lambda i: x[i + 1] * x[i + 1]) + tl.sum(n, lambda i: y[i]), {"y"}),  # x[0] unread
    }
    for name, (expr, want) in cases.items():
        assert witnessed(expr, dict(x=xs, y=ys)) == want, name
    # unit steps over two sums: x[i + j] reads all 2n - 1 elements of an x of that extent, not of 2n
    for extent, want in ((2 * n - 1, {"x"}), (2 * n, set())):
        x2 = tl.tensor("x", extent)
        expr = tl.sum(n, lambda i: tl.sum(n, lambda j: x2[i + j] * x2[i + j]))
        assert witnessed(expr, dict(x=rng.normal(size=9 if want else 10))) == want  # n = 5
    x2 = tl.tensor("x", 2 * n)  # stride 2: the even elements only
    assert witnessed(tl.sum(n, lambda i: x2[2 * i] * x2[2 * i]), dict(x=rng.normal(size=10))) == set()
    A = tl.tensor("A", n, n)  # one sum index for two dimensions: the diagonal only
    assert witnessed(tl.sum(n, lambda i: A[i, i] * A[i, i]), dict(A=rng.normal(size=(5, 5)))) == set()


def test_a_blas_product_witnesses_nothing():
    """x^T A x on a matrix large enough for BLAS: A may meet zero multipliers
    that BLAS skips, so the scalar result witnesses nothing here."""
    n = tl.size("n")
    A, x = tl.tensor("A", n, n), tl.tensor("x", n)
    ax = tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[j]))
    loss = tl.sum(n, lambda i: x[i] * ax[i])
    rng = np.random.default_rng(1)
    data = dict(A=rng.normal(size=(300, 300)), x=rng.normal(size=300))
    f = make_callable(loss, threads=1)
    np.testing.assert_allclose(f(**data), data["x"] @ data["A"] @ data["x"], rtol=1e-10)
    k = f._get()
    assert any(isinstance(s, Gemm) for s in walk_stmts(k.loop_ir.body))  # a BLAS call in the kernel
    assert k.spec["strict_witnesses"] == []
    bad = dict(data, A=data["A"].copy(), x=data["x"].copy())
    bad["x"][7] = 0.0
    bad["A"][3, 7] = np.nan  # multiplied only by the zero x[7]
    with pytest.raises(tl.TensorLangError, match="NaN or infinity"):
        f(**bad)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_bad_value_of_a_witnessed_input_is_refused(dtype, scanned):
    """The Laplacian loss at n = 5: NaN, +inf and -inf at each of the 25
    positions of u and of f (corners and edges, read only by the data term)
    refused on planned calls; finite planned calls scan neither input."""
    loss, _ = laplacian()
    rng = np.random.default_rng(2)
    u, f = rng.normal(size=(5, 5)).astype(dtype), rng.normal(size=(5, 5)).astype(dtype)
    fn = tl.compile(loss, threads=1)
    want = fn(u=u, f=f)
    scanned.clear()
    assert fn(u=u, f=f) == want and scanned == []
    for name in ("u", "f"):
        for pos in np.ndindex(5, 5):
            for bad in BAD:
                data = {"u": u.copy(), "f": f.copy()}
                data[name][pos] = bad
                assert not np.isfinite(data[name]).all()
                with pytest.raises(tl.TensorLangError, match=f"input {name} contains NaN or infinity"):
                    fn(**data)


@pytest.mark.parametrize("n,m", [(1, 1), (7, 3), (12, 5)])
def test_deconvolution_loss_refuses_bad_values_everywhere_in_x_unscanned(n, m, scanned):
    """x[i - j + m - 1] over i < n, j < m reads every element of x (n + m - 1 of
    them, the first and last once): NaN, +inf and -inf at each position of each
    input refused on planned calls; finite planned calls scan nothing."""
    loss, _ = deconvolution()
    rng = np.random.default_rng(4)
    data = dict(x=rng.normal(size=n + m - 1), c=rng.normal(size=m), z=rng.normal(size=n))
    fn = tl.compile(loss, threads=1)
    want = float(np.sum((np.convolve(data["x"], data["c"], mode="valid") - data["z"]) ** 2))
    assert abs(fn(**data) - want) <= 1e-12 * max(1.0, want)
    scanned.clear()
    fn(**data)
    assert scanned == []
    _refuses_every_bad_value(fn, data)


@pytest.mark.parametrize("n,m", [(1, 1), (7, 3), (12, 5)])
def test_deconvolution_gradient_checks_its_filter_cotangent_not_its_inputs(n, m, scanned):
    """tl.grad of the deconvolution: dc[j] = sum_i x[i - j + m - 1]·2(y[i] - z[i]) is
    strict in every element of x, c and z, so a finite call scans only dc's m
    values after the kernel; NaN, +inf and -inf at each position of each input
    are refused; finite calls agree with NumPy."""
    loss, (x, c, z) = deconvolution()
    g = tl.grad(loss, wrt=[x, c], threads=1)
    rng = np.random.default_rng(5)
    data = dict(x=rng.normal(size=n + m - 1), c=rng.normal(size=m), z=rng.normal(size=n))
    r = 2 * (np.convolve(data["x"], data["c"], mode="valid") - data["z"])
    gx, gc = g(**data)
    np.testing.assert_allclose(gx, np.convolve(r, data["c"][::-1], mode="full"), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gc, np.correlate(data["x"], r, mode="valid")[::-1], rtol=1e-12, atol=1e-12)
    scanned.clear()
    g(**data)
    assert scanned == [(m,)]
    _refuses_every_bad_value(g, data)


def test_an_array_witness_larger_than_its_input_is_not_taken(scanned):
    """grad of sum_i x[i]·w (w a scalar-like 1-element input read at every i):
    the gradient in x, n elements, is strict in w's one element, but scanning it
    would cost more than scanning w: w is scanned before the call."""
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", 1)
    loss = tl.sum(n, lambda i: x[i] * w[0] * x[i])
    g = tl.grad(loss, wrt=x, threads=1)
    data = dict(x=np.arange(1.0, 41.0), w=np.array([0.5]))
    np.testing.assert_allclose(g(**data), 2 * 0.5 * data["x"])
    scanned.clear()
    g(**data)
    assert (1,) in scanned
    bad = dict(data, w=np.array([np.inf]))
    with pytest.raises(tl.TensorLangError, match="input w contains NaN or infinity"):
        g(**bad)


def test_an_overflowing_loss_of_finite_inputs_keeps_its_value():
    """Finite inputs whose squares overflow: the result is inf (as NumPy's),
    the witnessed inputs are scanned and found finite, no error."""
    loss, _ = laplacian()
    fn = tl.compile(loss, threads=1)
    u, f = np.full((4, 4), 1e200), np.zeros((4, 4))
    fn(u=np.ones((4, 4)), f=f)  # plan
    with np.errstate(over="ignore"):
        want = float(np.sum((u - f) ** 2))
    assert want == np.inf and fn(u=u, f=f) == np.inf


def test_value_and_grad_refuses_bad_values_of_witnessed_inputs():
    """value_and_grad of the deconvolution: the value witnesses x, c and z; a
    NaN or infinity anywhere in them is refused on planned calls, and finite
    calls agree with NumPy."""
    loss, (x, c, z) = deconvolution()
    vg = tl.value_and_grad(loss, wrt=[x, c])
    rng = np.random.default_rng(3)
    n, m = 12, 4
    data = dict(x=rng.normal(size=n + m - 1), c=rng.normal(size=m), z=rng.normal(size=n))
    r = np.convolve(data["x"], data["c"], mode="valid") - data["z"]
    for _ in range(2):
        val, (gx, gc) = vg(**data)
        np.testing.assert_allclose(val, np.sum(r * r), rtol=1e-12)
    _refuses_every_bad_value(vg, data)


def _float_inputs(prog):
    return [k for k, v in prog.inputs.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size]


@settings(max_examples=30, **SETTINGS)
@given(prog=scalar_exprs(pairs=False, relations=False, max_depth=3), data=st.data())
def test_random_programs_refuse_every_injected_bad_value(prog, data):
    """A random loss, compiled and planned: NaN or infinity injected at a
    random position of any float input is refused, whatever the analysis
    took as witnessed."""
    names = _float_inputs(prog)
    if not names:
        return
    fn = tl.compile(prog.expr, threads=1)
    fn(**prog.inputs, **prog.sizes)
    fn(**prog.inputs, **prog.sizes)
    _injected_bad_values_refused(fn, prog, names, data)


@settings(max_examples=30, **SETTINGS)
@given(prog=scalar_exprs(pairs=False, relations=False, max_depth=3), data=st.data())
def test_random_gradients_refuse_every_injected_bad_value(prog, data):
    """The gradient of a random loss in its float array inputs, compiled and
    planned: NaN or infinity at a random position of any float input is refused,
    whichever results the analysis took as witnesses."""
    names = _float_inputs(prog)
    wrt = [v for v in tl.ir.input_vars(prog.expr) if v.name in names and tl.ir.shape_of(v.type)]
    if not wrt:
        return
    try:
        g = tl.grad(prog.expr, wrt=wrt, threads=1)
        g(**prog.inputs, **prog.sizes)
    except tl.TensorLangError:
        return  # a program the gradient refuses (not this test's subject)
    g(**prog.inputs, **prog.sizes)
    _injected_bad_values_refused(g, prog, names, data)


TERMS = ("u*f", "u*u", "[i<n-1] u", "tanh u", "u*sum_j f", "u*sum_j [j<i] f", "u[i-1]*f", "2*f")


def _term(kind, u, f, n, i):
    match kind:
        case "u*f":
            return u[i] * f[i]
        case "u*u":
            return u[i] * u[i]
        case "[i<n-1] u":
            return tl.iverson(i < n - 1, u[i])
        case "tanh u":
            return tl.tanh(u[i])
        case "u*sum_j f":
            return u[i] * tl.sum(n, lambda j: f[j])
        case "u*sum_j [j<i] f":
            return u[i] * tl.sum(n, lambda j: tl.iverson(j < i, f[j]))
        case "u[i-1]*f":
            return tl.iverson(i >= 1, u[i - 1] * f[i])
        case "2*f":
            return 2 * f[i]


@settings(max_examples=25, **SETTINGS)
@given(kinds=st.lists(st.sampled_from(TERMS), min_size=1, max_size=3), N=st.integers(1, 6), data=st.data())
def test_random_polynomial_losses_refuse_every_injected_bad_value(kinds, N, data):
    """Losses built of terms the analysis takes and terms it must not: a bad
    value at a random position of u or f is refused by planned calls of
    tl.compile and tl.value_and_grad."""
    n = tl.size("n")
    u, f = tl.tensor("u", n), tl.tensor("f", n)
    loss = tl.sum(n, lambda i: sum((_term(k, u, f, n, i) for k in kinds[1:]), _term(kinds[0], u, f, n, i)))
    rng = np.random.default_rng(N)
    vals = dict(u=rng.normal(size=N), f=rng.normal(size=N))
    read = {v.name for v in tl.ir.input_vars(loss)}
    vals = {k: v for k, v in vals.items() if k in read}
    fns = [tl.compile(loss, threads=1)]
    # the terms that read a whole input strictly: the analysis must take it (so the
    # injections below test the witness path, not only the scan)
    surely = {"u*f": {"u", "f"}, "u*u": {"u"}, "2*f": {"f"}, "u*sum_j f": {"u", "f"}}
    want = set().union(*(surely.get(k, set()) for k in kinds))
    assert want <= witnessed(loss, vals)
    if "u" in vals:  # and the gradients, whose array results may witness (strict.py)
        fns += [tl.value_and_grad(loss, wrt=u), tl.grad(loss, wrt=u)]
        if "f" in vals:
            fns.append(tl.grad(loss, wrt=[u, f]))
    for fn in fns:
        fn(**vals)
        fn(**vals)
        for name in vals:
            d = {k: v.copy() for k, v in vals.items()}
            d[name][data.draw(st.integers(0, N - 1))] = data.draw(st.sampled_from(BAD))
            with pytest.raises(tl.TensorLangError, match="NaN or infinity"):
                fn(**d)
