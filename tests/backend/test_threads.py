"""Issue 15, Threads: interning, building, differentiating, compiling and
calling from many threads at once is safe.  Eight threads build the same and
different programs, differentiate them and run them (reference evaluator and
compiled kernels); every result is checked against NumPy."""

from __future__ import annotations

import sys
import threading

import numpy as np

import tensorlang as tl

THREADS = 8


def _run_threads(work, switch=None):
    barrier = threading.Barrier(THREADS)
    errors, results = [], [None] * THREADS

    def main(t):
        try:
            barrier.wait()
            results[t] = work(t)
        except BaseException as exc:  # reported below, with the thread
            errors.append((t, exc))

    threads = [threading.Thread(target=main, args=(t,)) for t in range(THREADS)]
    old = sys.getswitchinterval()
    if switch:
        sys.setswitchinterval(switch)  # switch threads often: races show up in a short test
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=600)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    return results


def test_interning_gives_one_object_per_term_across_threads():
    def work(t):
        out = []
        for k in range(1500):
            n = tl.size(f"n{k}")
            x = tl.tensor(f"x{k}", n)
            out.append((n, x))
        return out

    results = _run_threads(work, switch=1e-6)
    for k in range(1500):
        assert all(r[k][0] is results[0][k][0] for r in results)
        assert all(r[k][1] is results[0][k][1] for r in results)


def _check(t: int):
    """Build, differentiate and run one shared and one thread-specific program."""
    rng = np.random.default_rng(t)
    n, m = tl.sizes("n m")
    x = tl.tensor("x", n + m - 1)
    c = tl.tensor("c", m)
    z = tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)  # the same program in every thread
    mine = tl.sum(n, lambda i: (t + 1.5) * tl.tanh(x[i]) * z[i])  # a different one per thread
    N, M = 40 + t, 5
    xv, cv, zv = rng.standard_normal(N + M - 1), rng.standard_normal(M), rng.standard_normal(N)
    yv = np.convolve(xv, cv, mode="valid")
    r = yv - zv
    want_loss = float(np.sum(r ** 2))
    want_gc = np.array([2 * np.sum(r * xv[M - 1 - j: M - 1 - j + N]) for j in range(M)])
    want_gx = np.zeros_like(xv)
    for j in range(M):
        want_gx[M - 1 - j: M - 1 - j + N] += 2 * r * cv[j]
    got = []
    for _ in range(3):
        assert np.isclose(tl.evaluate(loss, x=xv, c=cv, z=zv), want_loss)
        v, (gx, gc) = tl.value_and_grad(loss, wrt=[x, c])(x=xv, c=cv, z=zv)
        assert np.isclose(v, want_loss)
        np.testing.assert_allclose(gc, want_gc, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(gx, want_gx, rtol=1e-10, atol=1e-10)
        k = tl.compile(loss, threads=1)
        assert np.isclose(k(x=xv, c=cv, z=zv), want_loss)
        km = tl.compile(mine, threads=1)
        assert np.isclose(km(x=xv, z=zv), (t + 1.5) * np.sum(np.tanh(xv[:N]) * zv))
        gm = tl.grad(mine, wrt=x)(x=xv, z=zv)
        want_gm = np.zeros_like(xv)
        want_gm[:N] = (t + 1.5) * (1 - np.tanh(xv[:N]) ** 2) * zv
        np.testing.assert_allclose(gm, want_gm, rtol=1e-10, atol=1e-12)
        got.append(k)
    return got


def test_eight_threads_build_differentiate_compile_and_run():
    results = _run_threads(_check)
    # the shared program is one kernel key in every thread
    assert len({k.key for r in results for k in r}) == 1


def test_one_kernel_called_from_eight_threads():
    n = tl.size("n")
    x = tl.tensor("x", n)
    A = tl.tensor("A", n, n)
    prog = tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[j]) + tl.let(x[i], lambda v: v * v))
    k = tl.compile(prog, threads=1)

    def work(t):
        rng = np.random.default_rng(100 + t)
        for size in (3, 17, 64, 5):
            Av, xv = rng.standard_normal((size, size)), rng.standard_normal(size)
            np.testing.assert_allclose(k(x=xv, A=Av), Av @ xv + xv * xv, rtol=1e-12, atol=1e-12)
        return True

    assert all(_run_threads(work))


def test_derived_function_definitions_are_shared_across_threads():
    """Powers (and their derivatives) are defined on first use: threads using a
    new exponent at once must all succeed and agree."""
    n = tl.size("n")
    x = tl.tensor("x", n)
    xv = np.array([0.5, 1.5, 2.0])

    def work(t):
        out = []
        for k in range(40):
            p = 3.0 + k / 8.0 + 0.0001  # a fresh exponent for every k
            e = tl.sum(n, lambda i: x[i] ** p)
            out.append(tl.grad(e, wrt=x)(x=xv))
            np.testing.assert_allclose(out[-1], p * xv ** (p - 1), rtol=1e-12)
        return out

    _run_threads(work, switch=1e-6)
