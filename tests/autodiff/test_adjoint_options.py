"""Issue #13 item 8: the naive baseline's two choices, apart.

``adjoint="naive"`` (dense one-hot transposition, paper Section 6's
comparison) and ``loops="box"`` (every loop over its full box, predicates
tested inside) are separate options of ``tl.grad``, ``tl.value_and_grad``,
``tl.vjp``, ``tl.jvp`` and ``tl.compile``; ``mode="naive"`` keeps meaning
both.  The naive adjoint compiles with the same backend and isl-narrowed
loops as the sparse one.  Values are checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.backend.api as backend_api


@pytest.fixture
def kernels(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")
    built = []
    orig = backend_api.compile

    def keep(expr, *a, **k):
        built.append(orig(expr, *a, **k))
        return built[-1]

    monkeypatch.setattr(backend_api, "compile", keep)
    return built


def deconv(N=30, M=4):
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    rng = np.random.default_rng(5)
    d = dict(x=rng.standard_normal(N + M - 1), c=rng.standard_normal(M), z=rng.standard_normal(N))
    r = 2 * (np.convolve(d["x"], d["c"], mode="valid") - d["z"])
    want = (np.convolve(r, d["c"][::-1], mode="full"), np.correlate(d["x"], r, mode="valid")[::-1])
    return loss, (x, c), d, want


@pytest.mark.parametrize("kw, adjoint, loops", [
    ({}, "sparse", "sparse"),
    ({"adjoint": "naive"}, "naive", "sparse"),
    ({"loops": "box"}, "sparse", "box"),
    ({"adjoint": "naive", "loops": "box"}, "naive", "box"),
    ({"mode": "naive"}, "naive", "box"),
    ({"mode": "sparse"}, "sparse", "sparse"),
])
def test_grad_options_compile_the_chosen_adjoint_with_the_chosen_loops(kernels, kw, adjoint, loops):
    loss, wrt, d, want = deconv()
    g = tl.grad(loss, wrt=list(wrt), **kw)
    got = g(**d)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    (k,) = kernels
    assert k.mode == ("naive" if loops == "box" else "sparse")  # the lowering's loops
    # the program is the chosen adjoint: the naive one is unsimplified and costlier
    sparse_prog = tl.grad(loss, wrt=list(wrt)).program
    naive_prog = tl.grad(loss, wrt=list(wrt), adjoint="naive").program
    assert tl.alpha_eq(g.program, naive_prog if adjoint == "naive" else sparse_prog)
    assert not tl.alpha_eq(naive_prog, sparse_prog)


def test_naive_adjoint_with_sparse_loops_narrows_its_loops():
    """isl narrows the naive adjoint's one-hot brackets into loop bounds: its
    kernel visits far fewer points than the same adjoint over full boxes."""
    loss, wrt, d, _ = deconv()
    prog = tl.grad(loss, wrt=list(wrt), adjoint="naive").program
    sizes = {"n": 30, "m": 4}
    sparse_k = tl.compile(prog, threads=1)
    box_k = tl.compile(prog, loops="box", threads=1)
    visits = []
    for k in (sparse_k, box_k):
        py = backend_api.python_kernel(prog, k.mode)
        visits.append(_count_iterations(py, sizes, d))
    print("iterations, sparse loops vs box loops:", visits)
    assert visits[0] * 4 < visits[1], visits


def _count_iterations(py_kernel, sizes, data) -> int:
    """Run the plain-Python kernel with ``range`` counting its iterations."""
    import builtins

    count = [0]
    real = builtins.range

    class counting:
        def __init__(self, *a):
            self.r = real(*a)

        def __iter__(self):
            for v in self.r:
                count[0] += 1
                yield v

    mod_globals = py_kernel.module.kernel_serial.__globals__
    mod_globals["range"] = counting
    try:
        py_kernel(**{k: v for k, v in data.items()})
    finally:
        del mod_globals["range"]
    return count[0]


def test_value_and_grad_vjp_jvp_take_the_options(kernels):
    loss, (x, c), d, want = deconv()
    v, (gx, gc) = tl.value_and_grad(loss, wrt=[x, c], adjoint="naive")(**d)
    np.testing.assert_allclose(gx, want[0], rtol=1e-10, atol=1e-10)
    assert v == pytest.approx(tl.evaluate(loss, **d), rel=1e-12)
    ct = tl.vjp(loss, wrt=c, adjoint="naive", loops="box")(**d, dy=1.0)
    np.testing.assert_allclose(ct, want[1], rtol=1e-10, atol=1e-10)
    _, tan = tl.jvp(loss, wrt=c, loops="box")(**d, dc=np.ones(4))
    assert tan == pytest.approx(float(np.sum(want[1])), rel=1e-10)
    assert [k.mode for k in kernels] == ["sparse", "naive", "naive"]


def test_compile_loops_and_mode_agree():
    loss, _, d, _ = deconv()
    a, b = tl.compile(loss, loops="box"), tl.compile(loss, mode="naive")
    assert a.key == b.key and a.mode == "naive"
    assert a(**d) == pytest.approx(tl.compile(loss)(**d), rel=1e-12)


@pytest.mark.parametrize("kw", [
    {"mode": "naive", "adjoint": "sparse"},
    {"mode": "sparse", "loops": "box"},
    {"adjoint": "dense"},
    {"loops": "full"},
    {"mode": "fast"},
])
def test_bad_or_contradictory_options_are_refused(kw):
    loss, wrt, _, _ = deconv()
    with pytest.raises(tl.TensorLangError):
        tl.grad(loss, wrt=list(wrt), **kw)


def test_compile_refuses_contradictory_loops():
    loss, _, _, _ = deconv()
    with pytest.raises(tl.TensorLangError, match="contradicts"):
        tl.compile(loss, mode="naive", loops="sparse")
    with pytest.raises(tl.TensorLangError, match="loops"):
        tl.compile(loss, loops="dense")
