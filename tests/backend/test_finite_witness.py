"""Finiteness witnesses (issue #13: the NaN/inf scan of a large input; backend/blas.py).

The matrix of a matrix-vector product ``y = A v`` over dense inputs, past
``blas.WITNESS_MIN`` elements, is not scanned for NaN/inf before a planned
call: the kernel's own loops compute ``y`` and return ``w = sum_i (y[i] -
y[i])``, NaN exactly when some ``y[i]`` is not finite, which a non-finite
``A[i, k]`` forces (IEEE: inf·0 = NaN, a sum with a non-finite term is
non-finite).  A smaller matrix keeps BLAS and a NaN witness: it is scanned
after the call.  Structure and behaviour, not time: the kernel IR and spec
carry the witness, the planned call does not scan a large ``A`` (counted),
and every non-finite ``A`` (also where ``v`` is 0) is still an InputError
naming the input, in the loss, the gradient and value_and_grad, on both
paths; a finite ``A`` whose product overflows keeps its answer.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.blas import WITNESS_MIN, Gemm
from tensorlang.backend.loopir import AccAdd, If, Loop
from tensorlang.errors import InputError


def _logreg():
    n, d = tl.sizes("n d")
    X, s, w = tl.tensor("X", n, d), tl.tensor("s", n), tl.tensor("w", d)
    z = tl.gen(n, lambda i: tl.sum(d, lambda k: X[i, k] * w[k]))
    loss = tl.let(z, lambda z: tl.sum(n, lambda i: tl.softplus(-s[i] * z[i]))) + 0.005 * tl.sum(d, lambda k: w[k] * w[k])
    return loss, X, w


def _ref(X, s, w):
    m = -s * (X @ w)
    loss = float(np.logaddexp(0.0, m).sum() + 0.005 * w @ w)
    sig = 0.5 * (1.0 + np.tanh(0.5 * m))
    return loss, X.T @ (-s * sig) + 0.01 * w


BIG = (WITNESS_MIN // 64, 64)  # the loops' side of the witness: X not scanned


def _data(n=300, d=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    return {"X": X, "s": np.where(rng.normal(size=n) > 0, 1.0, -1.0), "w": 0.1 * rng.normal(size=d)}


def _walk(stmts):
    for s in stmts:
        yield s
        for sub in (getattr(s, "body", ()), getattr(s, "then", ()), getattr(s, "orelse", ())):
            yield from _walk(sub)


def test_the_kernel_returns_a_witness_of_the_matrix():
    loss, _, _ = _logreg()
    k = tl.compile(loss)
    spec = k.spec
    assert [w[:2] for w in spec["witnesses"]] == [["X", []]]
    (idx,) = [w[2] for w in spec["witnesses"]]
    ir = k.loop_ir
    assert idx == len(ir.results) - 1 and len(ir.results) == 2  # the loss, then the witness
    # BLAS only below WITNESS_MIN (a BLAS gemv may skip zero multipliers); the
    # witness sums y[i] - y[i] where the loops computed y
    (choice,) = [s for s in _walk(ir.body) if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then)]
    from tensorlang.backend.kir import evaluate_int

    size = {nm: ir.args[p] for p, nm in enumerate(spec["sizes"])}
    assert evaluate_int(choice.cond, {size["n"]: 300, size["d"]: 40})
    assert not evaluate_int(choice.cond, {size["n"]: BIG[0], size["d"]: BIG[1]})
    acc = ir.results[idx]
    (loop,) = [s for s in _walk(ir.body) if isinstance(s, Loop) and any(
        isinstance(b, AccAdd) and b.target == acc for b in s.body)]
    assert loop.kind == "sum"


@pytest.mark.parametrize("shape", [BIG, (300, 40)])
def test_planned_calls_scan_only_what_the_witness_does_not_cover(scanned, shape):
    loss, X, w = _logreg()
    d = _data(*shape)
    f = tl.compile(loss)
    g = tl.grad(loss, wrt=w)
    ref_loss, ref_grad = _ref(**d)
    for _ in range(3):
        assert f(**d) == pytest.approx(ref_loss, rel=1e-12)
        np.testing.assert_allclose(g(**d), ref_grad, rtol=1e-10, atol=1e-14)
    scanned.clear()
    f(**d)
    g(**d)
    # the witness stands for a large X's scan; a small X is scanned (after the call)
    assert (d["X"].shape in scanned) == (shape != BIG)
    assert d["w"].shape in scanned and d["s"].shape in scanned  # the vectors are scanned as before


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("shape", [BIG, (300, 40)])
def test_a_non_finite_matrix_is_still_refused(bad, shape):
    loss, X, w = _logreg()
    d = _data(*shape)
    makers = {"loss": tl.compile(loss), "grad": tl.grad(loss, wrt=w), "value_and_grad": tl.value_and_grad(loss, wrt=w)}
    for name, fn in makers.items():
        fn(**d)  # plans the signature
        fn(**d)
        for row, col in [(0, 0), (shape[0] - 1, shape[1] - 1)]:
            X2, w2 = d["X"].copy(), d["w"].copy()
            w2[col] = 0.0  # inf·0 = NaN: still seen
            X2[row, col] = bad
            with pytest.raises(InputError, match="input X contains NaN or infinity"):
                fn(X=X2, s=d["s"], w=w2)
        assert np.isfinite(np.asarray(fn(**d)[0] if name == "value_and_grad" else fn(**d), dtype=float)).all()


def test_an_overflowing_product_of_finite_inputs_keeps_its_answer():
    loss, _, _ = _logreg()
    d = _data()
    f = tl.compile(loss)
    f(**d)
    X2 = d["X"].copy()
    X2[5, :] = 1e300  # finite, but X w overflows: the witness is NaN, the scan clears X
    want, _ = _ref(X2, d["s"], d["w"])
    got = f(X=X2, s=d["s"], w=d["w"])
    assert got == pytest.approx(want, rel=1e-12) or (np.isinf(want) and got == want)


def test_a_non_finite_vector_is_refused_before_the_kernel_runs():
    loss, _, _ = _logreg()
    d = _data()
    f = tl.compile(loss)
    f(**d)
    w2 = d["w"].copy()
    w2[3] = np.nan
    with pytest.raises(InputError, match="input w contains NaN or infinity"):
        f(X=d["X"], s=d["s"], w=w2)


def test_witnesses_only_cover_dense_matrix_inputs_of_a_gemv():
    n = tl.size("n")
    A, x = tl.tensor("A", n, n), tl.tensor("x", n)
    # A^T x reads A by columns: BLAS keeps it, no witness
    loss = tl.let(tl.gen(n, lambda i: tl.sum(n, lambda k: A[k, i] * x[k])), lambda y: tl.sum(n, lambda i: y[i] * y[i]))
    assert tl.compile(loss).spec["witnesses"] == []
    # A x: a witness for A; x is scanned
    loss2 = tl.let(tl.gen(n, lambda i: tl.sum(n, lambda k: A[i, k] * x[k])), lambda y: tl.sum(n, lambda i: y[i] * y[i]))
    k2 = tl.compile(loss2)
    assert [w[:2] for w in k2.spec["witnesses"]] == [["A", []]]
    rng = np.random.default_rng(1)
    for m in (70, 2100):  # BLAS and the loops
        A0, x0 = rng.normal(size=(m, m)), rng.normal(size=m)
        assert k2(A=A0, x=x0) == pytest.approx(float(np.sum((A0 @ x0) ** 2)), rel=1e-12)
        A0[m - 1, m // 2] = np.inf
        with pytest.raises(InputError, match="input A"):
            k2(A=A0, x=x0)


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_inputs_run_the_float32_kernel_from_the_first_call(threads):
    """The first call of a signature passed the evaluator's validated copies
    (float64) to a float32 kernel taking the caller's arrays as they are
    (``_direct``): a Numba typing error in np.dot.  Now the caller's arrays."""
    loss, X, w = _logreg()
    d = {k: v.astype(np.float32) for k, v in _data(*BIG).items()}
    f = tl.compile(loss, threads=threads)
    ref, _ = _ref(*(d[k].astype(np.float64) for k in ("X", "s", "w")))
    for _ in range(2):
        got = f(**d)
        assert isinstance(got, np.float32) and got == pytest.approx(ref, rel=1e-4)
