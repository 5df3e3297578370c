"""The worked examples of Sections 1 and 2 of the paper (RULES.md Sections 1-2)
evaluate to what NumPy computes.

The paper indexes the convolution's input over ``k ∈ [-m+1, n)``; tensorlang
arrays start at 0, so (RULES.md Note on 2.1) ``x[i - j]`` is written
``x[i - j + m - 1]`` with ``x : [n + m - 1]ℝ``.  The adjoint keeps its range
predicate ``[0 ≤ k + j < n]`` (the Note on the convolution adjoint).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl

n, m = tl.sizes("n m")
rng = np.random.default_rng(2020)


def conv_matrix(c: np.ndarray, N: int) -> np.ndarray:
    """The (N, N+M-1) matrix of the valid convolution with kernel c, built
    column by column from np.convolve of unit vectors (an independent oracle)."""
    M = len(c)
    cols = [np.convolve(np.eye(N + M - 1)[q], c, mode="valid") for q in range(N + M - 1)]
    return np.stack(cols, axis=1)


# -- 2.1 A convoluted example --------------------------------------------------


def conv_of(x, c):
    return tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))


def test_1d_convolution_is_numpy_valid_convolution():
    x, c = tl.tensor("x", n + m - 1), tl.tensor("c", m)
    xv, cv = rng.normal(size=11), rng.normal(size=4)
    got = tl.evaluate(conv_of(x, c), x=xv, c=cv)
    assert got.shape == (8,)
    np.testing.assert_allclose(got, np.convolve(xv, cv, mode="valid"), rtol=1e-12)


def test_one_hot_probe_gives_a_jacobian_column():
    """Df(x, gen[k] [k = 2]·1) = gen[i:n] [0 ≤ i-2 < m]·c[i-2] (offset domain):
    the column of the Jacobian for x[2]."""
    N, M = 7, 3
    c = tl.tensor("c", m)
    cv = rng.normal(size=M)
    p = 2 + (M - 1)  # the paper's k = 2, stored at position k + m - 1
    dx = tl.gen(n + m - 1, lambda k: tl.iverson(k == 2 + m - 1, 1))
    probe = tl.gen(n, lambda i: tl.sum(m, lambda j: dx[i - j + m - 1] * c[j]))
    closed_form = tl.gen(n, lambda i: tl.iverson((0 <= i - 2) & (i - 2 < m), c[i - 2]))
    column = conv_matrix(cv, N)[:, p]
    np.testing.assert_allclose(tl.evaluate(probe, c=cv, n=N), column, rtol=1e-12)
    np.testing.assert_allclose(tl.evaluate(closed_form, c=cv, n=N), column, rtol=1e-12)
    # the intermediate form with the range moved into the predicate
    moved = tl.gen(n, lambda i: tl.sum(m, lambda j: tl.iverson(j == i - 2, c[j])))
    np.testing.assert_allclose(tl.evaluate(moved, c=cv, n=N), column, rtol=1e-12)


def test_deconvolution_loss_and_its_gradient_formula():
    """l(x) = sum[i:n] (f(x)[i] - z[i])² and the paper's gradient
    let dy = gen[i:n] 2·(f(x)[i] - z[i]) in gen[k] sum[j:m] [0 ≤ k+j < n]·dy[k+j]·c[j]."""
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    f = conv_of(x, c)
    loss = tl.sum(n, lambda i: (f[i] - z[i]) ** 2)
    grad = tl.let(
        tl.gen(n, lambda i: 2 * (f[i] - z[i])),
        lambda dy: tl.gen(n + m - 1, lambda k: tl.sum(
            m, lambda j: tl.iverson((0 <= k + j - (m - 1)) & (k + j - (m - 1) < n), dy[k + j - (m - 1)] * c[j]))),
    )
    N, M = 9, 4
    xv, cv, zv = rng.normal(size=N + M - 1), rng.normal(size=M), rng.normal(size=N)
    J = conv_matrix(cv, N)
    r = J @ xv - zv
    assert tl.evaluate(loss, x=xv, c=cv, z=zv) == pytest.approx(float(r @ r), rel=1e-12)
    np.testing.assert_allclose(tl.evaluate(grad, x=xv, c=cv, z=zv), 2 * J.T @ r, rtol=1e-10)
    # finite differences of the loss agree with the gradient formula
    g = tl.evaluate(grad, x=xv, c=cv, z=zv)
    h = 1e-6
    for q in (0, 5, N + M - 2):
        e = np.zeros_like(xv)
        e[q] = h
        fd = (tl.evaluate(loss, x=xv + e, c=cv, z=zv) - tl.evaluate(loss, x=xv - e, c=cv, z=zv)) / (2 * h)
        assert fd == pytest.approx(g[q], rel=1e-6, abs=1e-6)


def test_the_adjoint_of_a_convolution_is_a_correlation():
    """<dy | Df(x, dx)> = <DTf(x, dy) | dx> with DTf = gen[k] sum[j] [0 ≤ k+j < n]·dy[k+j]·c[j]."""
    dx, c, dy = tl.tensor("dx", n + m - 1), tl.tensor("c", m), tl.tensor("dy", n)
    df = conv_of(dx, c)
    dtf = tl.gen(n + m - 1, lambda k: tl.sum(
        m, lambda j: tl.iverson((0 <= k + j - (m - 1)) & (k + j - (m - 1) < n), dy[k + j - (m - 1)] * c[j])))
    N, M = 6, 3
    dxv, cv, dyv = rng.normal(size=N + M - 1), rng.normal(size=M), rng.normal(size=N)
    lhs = float(dyv @ tl.evaluate(df, dx=dxv, c=cv))
    rhs = float(tl.evaluate(dtf, dy=dyv, c=cv, m=M) @ dxv)
    assert lhs == pytest.approx(rhs, rel=1e-12)
    got = tl.evaluate(dtf, dy=dyv, c=cv, m=M)
    np.testing.assert_allclose(got, conv_matrix(cv, N).T @ dyv, rtol=1e-12)
    # a correlation: convolution with the reversed kernel, over the full range
    np.testing.assert_allclose(got, np.convolve(dyv, cv[::-1], mode="full"), rtol=1e-12)


# -- 2.2 Zero costs --------------------------------------------------------------


def trace(A, size):
    return tl.sum(size, lambda i: A[i, i])


def eye(x, size):
    return tl.gen([size, size], lambda i, j: tl.iverson(i == j, x))


def test_trace_of_eye_is_n_times_x():
    s = tl.scalar("s")
    e = trace(eye(s, n), n)
    assert tl.evaluate(e, s=1.5, n=7) == pytest.approx(np.trace(np.eye(7) * 1.5))
    np.testing.assert_array_equal(tl.evaluate(eye(s, n), s=2.0, n=3), 2.0 * np.eye(3))


def test_trace_and_eye_are_each_others_adjoint():
    """DT trace(A, dx) = eye(dx) and DT eye(x, dA) = trace(dA): <dA, eye(dx)> = <trace(dA), dx>."""
    dA, dx = tl.tensor("dA", n, n), tl.scalar("dx")
    dAv, dxv = rng.normal(size=(5, 5)), 0.7
    lhs = float(np.sum(dAv * tl.evaluate(eye(dx, n), dx=dxv, n=5)))
    rhs = tl.evaluate(trace(dA, n), dA=dAv) * dxv
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_two_readings_of_a_sum_of_squares_agree():
    x = tl.tensor("x", n)
    direct = tl.sum(n, lambda i: x[i] * x[i])
    via_map = tl.let(tl.gen(n, lambda i: x[i] * x[i]), lambda y: tl.sum(n, lambda i: y[i]))
    xv = rng.normal(size=6)
    assert tl.evaluate(direct, x=xv) == pytest.approx(float(xv @ xv))
    assert tl.evaluate(via_map, x=xv) == pytest.approx(float(xv @ xv))


def test_dead_lets_evaluate_to_their_body():
    x = tl.scalar("x")
    e = tl.let(x, lambda z0: tl.let(x, lambda z1: tl.let(x, lambda z2: 2 * x)))
    assert tl.evaluate(e, x=1.25) == 2.5


def test_linear_dag_and_its_transpose():
    """let a = 2x + 3y in let b = 4x + a in let z = 8x in let w = 5a + 6b in (z, w),
    and its transpose (x, y) as functions of (z, w): <(dz, dw), F(dx, dy)> = <FT(dz, dw), (dx, dy)>."""
    x, y = tl.scalar("x"), tl.scalar("y")
    F = tl.let(2 * x + 3 * y, lambda a: tl.let(4 * x + a, lambda b: tl.let(
        8 * x, lambda z: tl.let(5 * a + 6 * b, lambda w: tl.pair(z, w)))))
    zin, win = tl.scalar("z"), tl.scalar("w")
    FT = tl.let(6 * win, lambda b: tl.let(5 * win + b, lambda a: tl.let(
        2 * a + 4 * b + 8 * zin, lambda xx: tl.let(3 * a, lambda yy: tl.pair(xx, yy)))))
    Fm = np.array([[8.0, 0.0], [5 * 2 + 6 * (4 + 2), 5 * 3 + 6 * 3]])  # by hand
    xv, yv, zv, wv = 0.3, -1.2, 0.9, 2.0
    got = tl.evaluate(F, x=xv, y=yv)
    assert isinstance(got, tuple)
    np.testing.assert_allclose(got, Fm @ [xv, yv])
    np.testing.assert_allclose(tl.evaluate(FT, z=zv, w=wv), Fm.T @ [zv, wv])


def test_sparse_sum_skipping_one_entry_and_its_adjoint():
    """x[0] + x[2] + x[3] + ... and its sparsity-tracked adjoint
    gen[i:n] ([i = 0]·dy + [i = 2]·dy + ...) = [dy, 0, dy, dy, ...]."""
    N = 7
    x, dy = tl.tensor("x", n), tl.scalar("dy")
    skip = [k for k in range(N) if k != 1]
    e = x[skip[0]]
    for k in skip[1:]:
        e = e + x[k]
    xv = rng.normal(size=N)
    assert tl.evaluate(e, x=xv) == pytest.approx(float(xv.sum() - xv[1]))

    def body(i):
        out = tl.iverson(i == skip[0], dy)
        for k in skip[1:]:
            out = out + tl.iverson(i == k, dy)
        return out

    adj = tl.gen(n, body)
    want = np.full(N, 0.5)
    want[1] = 0.0
    np.testing.assert_array_equal(tl.evaluate(adj, dy=0.5, n=N), want)
    # the same vector written with one bracket, as a program over all n
    one = tl.gen(n, lambda i: tl.iverson((i < 1) | (1 < i), dy))
    np.testing.assert_array_equal(tl.evaluate(one, dy=0.5, n=N), want)


# -- Section 1: pathological examples ------------------------------------------------


def test_k_traces_of_a_diagonal_matrix():
    x = tl.tensor("x", n)
    diag = tl.gen([n, n], lambda i, j: tl.iverson(i == j, x[i]))
    k = 4
    e = tl.let(diag, lambda A: _repeat_sum([trace(A, n)] * k))
    xv = rng.normal(size=6)
    assert tl.evaluate(e, x=xv) == pytest.approx(k * np.trace(np.diag(xv)))


def test_dot_of_first_column_and_first_row_of_diag():
    x = tl.tensor("x", n)
    diag = tl.gen([n, n], lambda i, j: tl.iverson(i == j, x[i]))
    e = tl.let(diag, lambda A: tl.sum(n, lambda i: A[i, 0] * A[0, i]))
    xv = rng.normal(size=5)
    D = np.diag(xv)
    assert tl.evaluate(e, x=xv) == pytest.approx(float(D[:, 0] @ D[0, :]))


def _repeat_sum(terms):
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


# -- 2.3 Normalizing code: the batched, let-lifted loss ----------------------------------


def batched_oracle(xv, zv, wv):
    B, N = zv.shape
    M = len(wv)
    loss, grad = 0.0, np.zeros(M)
    for k in range(B):
        X = np.stack([[xv[k, i - j + M - 1] for j in range(M)] for i in range(N)])  # X[i, j] = x[k, i-j]
        r = X @ wv - zv[k]
        loss += float(r @ r)
        grad += 2 * X.T @ r
    return loss, grad


def test_batched_loss_gradient_nested_and_let_lifted():
    b = tl.size("b")
    x, z, w = tl.tensor("x", b, n + m - 1), tl.tensor("z", b, n), tl.tensor("w", m)

    def f(k, i):
        return tl.sum(m, lambda j: x[k, i - j + m - 1] * w[j])

    loss = tl.sum([b, n], lambda k, i: (f(k, i) - z[k, i]) ** 2)
    # DTf(x; w, dy) = gen[j:m] sum[i:n] x[i-j]·dy[i], one let per batch element (let inside a loop)
    nested = tl.gen(m, lambda j: tl.sum(b, lambda k: tl.let(
        tl.gen(n, lambda i: 2 * (f(k, i) - z[k, i])),
        lambda dy: tl.sum(n, lambda i: x[k, i - j + m - 1] * dy[i]))))
    # let-lifted: dy becomes a [b][n] tensor bound once outside the loops
    lifted = tl.let(
        tl.gen([b, n], lambda k, i: 2 * (f(k, i) - z[k, i])),
        lambda dy: tl.gen(m, lambda j: tl.sum([b, n], lambda k, i: x[k, i - j + m - 1] * dy[k, i])))
    B, N, M = 3, 6, 3
    xv, zv, wv = rng.normal(size=(B, N + M - 1)), rng.normal(size=(B, N)), rng.normal(size=M)
    want_loss, want_grad = batched_oracle(xv, zv, wv)
    assert tl.evaluate(loss, x=xv, z=zv, w=wv) == pytest.approx(want_loss, rel=1e-12)
    np.testing.assert_allclose(tl.evaluate(nested, x=xv, z=zv, w=wv), want_grad, rtol=1e-10)
    np.testing.assert_allclose(tl.evaluate(lifted, x=xv, z=zv, w=wv), want_grad, rtol=1e-10)


def test_deconvolution_example_script_matches_numpy(capsys):
    from examples import deconvolution

    deconvolution.main(N=2000, M=5, naive_N=64)  # sizes that compile (auto runtime); the script checks NumPy and finite differences itself
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.rstrip().endswith("OK")


@pytest.mark.parametrize(
    "name, sizes",
    [("image_denoising", dict(H=4, W=5)), ("batched_kernel_fit", dict(B=3, N=7, M=3)),
     ("sparse_factorization", dict(N=6, M=5, K=2, density=0.3))],
)
def test_examples_match_their_numpy_reference(name, sizes):
    import importlib

    mod = importlib.import_module(f"examples.{name}")
    data = mod.random_inputs(**sizes, seed=3)
    assert tl.evaluate(mod.loss, **data) == pytest.approx(mod.reference(data), rel=1e-12)
