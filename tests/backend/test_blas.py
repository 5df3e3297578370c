"""Dense contractions lowered to BLAS calls (backend/blas.py; issue #13 item 6).

Every product is checked against NumPy (``np.einsum``, an independent
computation) on both sides of the run-time size choice (sizes 0, 1 and small
keep the loops; larger ones take the BLAS call), in float64 and float32, with
non-contiguous inputs; the kernel IR is inspected for which contractions
became a :class:`~tensorlang.backend.blas.Gemm` and which did not (guards,
offsets, partial ranges).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.backend.blas import HAVE_BLAS, Gemm
from tensorlang.backend.loopir import If, Loop, walk_stmts

if not HAVE_BLAS:  # Numba's np.dot needs SciPy's BLAS; without it products keep their loops
    pytest.skip("SciPy is not installed", allow_module_level=True)

SIZES = (0, 1, 3, 24)  # 24³ = 13824 multiply-adds: past BLAS_MIN_WORK, so the BLAS branch runs


def gemms(kernel) -> list:
    return [s for s in walk_stmts(kernel.loop_ir.body) if isinstance(s, Gemm)]


def _mat(name, rows, cols):
    return tl.tensor(name, rows, cols)


# index roles of the two operands: 'ik' is A[i, k], 'ki' is A[k, i], ...
def product(left: str, right: str, out: str = "ij"):
    """``gen[out] sum[k] L[left]·R[right]`` over sizes m (i), q (j), p (k)."""
    m, q, p = tl.sizes("m q p")
    ext = {"i": m, "j": q, "k": p}
    L = tl.tensor("L", *[ext[c] for c in left])
    R = tl.tensor("R", *[ext[c] for c in right])

    def body(env):
        return tl.sum(p, lambda k: L[tuple({**env, "k": k}[c] for c in left)] * R[tuple({**env, "k": k}[c] for c in right)])

    outs = [c for c in out]
    if len(outs) == 1:
        expr = tl.gen(ext[outs[0]], lambda a: body({outs[0]: a}))
    else:
        expr = tl.gen([ext[outs[0]], ext[outs[1]]], lambda a, b: body({outs[0]: a, outs[1]: b}))
    return expr, L, R


def reference(left, right, out, Lv, Rv):
    return np.einsum(f"{left},{right}->{out}", Lv, Rv)


def _data(left, right, sizes, rng, dtype=np.float64):
    ext = dict(zip("ijk", sizes))
    return (rng.normal(size=[ext[c] for c in left]).astype(dtype),
            rng.normal(size=[ext[c] for c in right]).astype(dtype))


CASES = [  # (left, right, out, expected views (lhs array, lhs.T, rhs array, rhs.T) as L/R)
    ("ik", "k", "i", ("L", False, "R", False)),  # A x
    ("ki", "k", "i", ("R", False, "L", False)),  # Aᵀ x = x A (the adjoint's transposed GEMV)
    ("k", "ik", "i", ("R", False, "L", False)),  # x[k]·A[i, k]: the operands in either order
    ("ik", "kj", "ij", ("L", False, "R", False)),  # A B
    ("ki", "kj", "ij", ("L", True, "R", False)),  # Aᵀ B
    ("ik", "jk", "ij", ("L", False, "R", True)),  # A Bᵀ
    ("ki", "jk", "ij", ("L", True, "R", True)),  # Aᵀ Bᵀ
    ("ik", "kj", "ji", ("R", True, "L", True)),  # (A B)ᵀ = Bᵀ Aᵀ
    ("jk", "ik", "ij", ("R", False, "L", True)),  # the operand holding i is the left one
]


@pytest.mark.parametrize("left,right,out,views", CASES)
def test_products_match_numpy_and_use_blas(left, right, out, views):
    expr, L, R = product(left, right, out)
    k = tl.compile(expr)
    (g,) = gemms(k)
    names = {a: k.spec["inputs"][p][0] for p, a in enumerate(x for x in k.loop_ir.args if x.startswith("x"))}
    assert (names[g.lhs.array], g.lhs.trans, names[g.rhs.array], g.rhs.trans) == views
    rng = np.random.default_rng(0)
    for sizes in [(a, b, c) for a in SIZES for b in SIZES for c in SIZES if (a, b, c) in _SOME]:
        Lv, Rv = _data(left, right, sizes, rng)
        got = k(L=Lv, R=Rv)
        np.testing.assert_allclose(got, reference(left, right, out, Lv, Rv), rtol=1e-12, atol=1e-12)


# sizes 0 and 1 in every position, small (loops) and large (BLAS) products
_SOME = {(0, 3, 3), (3, 0, 3), (3, 3, 0), (1, 1, 1), (1, 24, 24), (24, 1, 24), (24, 24, 1), (3, 3, 3),
         (24, 24, 24), (0, 24, 24), (24, 24, 0)}


def test_float32_and_noncontiguous_inputs():
    expr, L, R = product("ki", "jk", "ij")
    k = tl.compile(expr)
    rng = np.random.default_rng(1)
    big = rng.normal(size=(60, 80))
    Lv, Rv = big[::2, 1:49:2], np.asfortranarray(rng.normal(size=(30, 30)))  # strided and Fortran order
    np.testing.assert_allclose(k(L=Lv, R=Rv), Lv.T @ Rv.T, rtol=1e-12)
    L32, R32 = Lv.astype(np.float32), Rv.astype(np.float32)
    got = k(L=L32, R=R32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, L32.T.astype(np.float64) @ R32.T.astype(np.float64), rtol=2e-5, atol=2e-5)


def test_parallel_variant_agrees():
    expr, L, R = product("ik", "kj", "ij")
    rng = np.random.default_rng(2)
    Lv, Rv = _data("ik", "kj", (40, 30, 50), rng)
    for threads in (1, 2):
        got = tl.compile(expr, threads=threads)(L=Lv, R=Rv)
        np.testing.assert_allclose(got, Lv @ Rv, rtol=1e-12)


def _not_matched(expr, inputs, ref):
    k = tl.compile(expr)
    assert gemms(k) == []
    np.testing.assert_allclose(k(**inputs), ref, rtol=1e-12, atol=1e-12)


def test_guarded_offset_and_partial_sums_are_not_products():
    n = tl.size("n")
    A, x = tl.tensor("A", n, n), tl.tensor("x", n)
    rng = np.random.default_rng(3)
    Av, xv = rng.normal(size=(30, 30)), rng.normal(size=30)
    # a guard inside the sum: an upper-triangular product
    _not_matched(tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(i < j, A[i, j] * x[j]))),
                 {"A": Av, "x": xv}, np.triu(Av, 1) @ xv)
    # an offset read: a shifted product over n - 1 columns
    _not_matched(tl.gen(n, lambda i: tl.sum(n - 1, lambda j: A[i, j + 1] * x[j])),
                 {"A": Av, "x": xv}, Av[:, 1:] @ xv[:-1])
    # a sum over part of the array's extent
    m = tl.size("m")
    B, y = tl.tensor("B", n, m + 1), tl.tensor("y", m + 1)
    Bv, yv = rng.normal(size=(30, 21)), rng.normal(size=21)
    _not_matched(tl.gen(n, lambda i: tl.sum(m, lambda j: B[i, j] * y[j])), {"B": Bv, "y": yv}, Bv[:, :20] @ yv[:20])
    # the diagonal A[i, i]·x[i] summed over nothing of a product; a factor constant in k
    _not_matched(tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, i] * x[j])), {"A": Av, "x": xv}, np.diag(Av) * xv.sum())
    # three factors
    _not_matched(tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[j] * x[j])), {"A": Av, "x": xv}, Av @ (xv * xv))


def test_products_inside_a_consumer_are_computed_apart():
    """Tensor-SSA fusion puts ``A x`` inside its consumer; the lowering takes it out again."""
    n, m = tl.sizes("n m")
    A, x, b = tl.tensor("A", n, m), tl.tensor("x", m), tl.tensor("b", n)
    expr = tl.gen(n, lambda i: tl.tanh(tl.sum(m, lambda k: A[i, k] * x[k]) + b[i]))
    k = tl.compile(expr)
    assert len(gemms(k)) == 1
    rng = np.random.default_rng(4)
    for n_, m_ in ((0, 5), (1, 1), (4, 3), (70, 90)):
        Av, xv, bv = rng.normal(size=(n_, m_)), rng.normal(size=m_), rng.normal(size=n_)
        np.testing.assert_allclose(k(A=Av, x=xv, b=bv), np.tanh(Av @ xv + bv), rtol=1e-12, atol=1e-14)
    # a product under a bracket stays in the loops (the bracket may skip most points)
    guarded = tl.gen(n, lambda i: tl.iverson(i < 2, tl.sum(m, lambda k: A[i, k] * x[k])))
    assert gemms(tl.compile(guarded)) == []


def test_blas_is_chosen_at_run_time_by_size():
    expr, L, R = product("ik", "k", "i")
    k = tl.compile(expr)
    choice = next(s for s in walk_stmts(k.loop_ir.body) if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then))
    from tensorlang.backend.kir import evaluate_int

    size = {nm: k.loop_ir.args[p] for p, nm in enumerate(k.spec["sizes"])}
    env = lambda m, p: {size["m"]: m, size["p"]: p}  # noqa: E731
    assert not evaluate_int(choice.cond, env(3, 3)) and not evaluate_int(choice.cond, env(0, 10 ** 6))
    assert evaluate_int(choice.cond, env(100, 100))


def test_the_loops_behind_a_gemm_are_printed_plainly():
    """The loops a GEMM falls back to run only below BLAS_MIN_WORK multiply-adds
    or at an extent 0: the printer gives them no partial-sum lanes, which only
    cost compile time there (loopir.If.cold; issue #14 item 6).  Values on
    both sides of the choice against NumPy."""
    expr, L, R = product("ik", "kj", "ij")
    k = tl.compile(expr)
    choice = next(s for s in walk_stmts(k.loop_ir.body) if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then))
    assert choice.cold and any(isinstance(s, Loop) and s.kind == "sum" for s in walk_stmts(choice.orelse))
    serial = k.source.split("def kernel_parallel")[0]
    assert "_a1" not in serial  # no lanes anywhere in this kernel: its only reduction is the cold one
    rng = np.random.default_rng(5)
    for m, p, q in [(3, 4, 5), (0, 3, 2), (3, 0, 2), (40, 50, 60)]:
        a, b = rng.normal(size=(m, p)), rng.normal(size=(p, q))
        np.testing.assert_allclose(k(**{L.name: a, R.name: b}), a @ b, rtol=1e-12, atol=1e-12)


def test_gradients_use_blas():
    """The quadratic form's and the MLP's gradients: every dense product a Gemm."""
    from benchmarks.dense import mlp_program
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["quadform"]
    loss, v = w.program()
    g = tl.grad(loss, wrt=[v["x"], v["A"]])
    k = tl.compile(g.program)
    # y = A x, and the adjoint's Aᵀ dY (as dY·A: no transpose at all)
    assert [(s.lhs.trans, s.rhs.trans) for s in gemms(k)] == [(False, False)] * 2
    loss, v = mlp_program()
    g = tl.grad(loss, wrt=[v[n] for n in ("W1", "b1", "W2", "b2", "w3")])
    k = tl.compile(g.program)
    # the matrix-matrix products: forward X W1, H1 W2; adjoint H1ᵀ dZ2, dZ2 W2ᵀ, Xᵀ dZ1.  (The
    # output layer's H2 w3 and H2ᵀ dy are fused by fusion.py into one pass over H2's rows,
    # which never stores H2: O(B h) work, left to the loops.)
    assert len(gemms(k)) == 5
    assert sum(s.lhs.trans for s in gemms(k)) == 2 and sum(s.rhs.trans for s in gemms(k)) == 1
    d = BY_NAME["mlp"].make_data({"B": 40, "d": 30, "h": 20})
    got = g(**{n: d[n] for n in v})
    ref = BY_NAME["mlp"].grad_ref(d)
    for name, val in zip(("W1", "b1", "W2", "b2", "w3"), got):
        np.testing.assert_allclose(val, ref[name], rtol=1e-10, atol=1e-12)


SHAPES = st.sampled_from([(left, right, out) for left, right, out, _ in CASES] + [("ik", "k", "i"), ("kj", "k", "j")])


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(SHAPES, st.tuples(*[st.sampled_from((0, 1, 2, 5, 17, 33)) for _ in range(3)]), st.booleans(),
       st.integers(0, 2 ** 16))
def test_random_dense_products_match_numpy(shape, sizes, swap, seed):
    left, right, out = shape
    if swap:
        left, right = right, left
    if len(out) == 1 and out not in left + right:
        return
    expr, L, R = product(left, right, out)
    Lv, Rv = _data(left, right, sizes, np.random.default_rng(seed))
    got = tl.compile(expr)(L=Lv, R=Rv)
    np.testing.assert_allclose(got, reference(left, right, out, Lv, Rv), rtol=1e-11, atol=1e-11)


def _calls(stmts, fn: str) -> int:
    """How many ``fn(...)`` kernel-IR calls the statements evaluate (each printed once)."""
    from dataclasses import fields

    from tensorlang.backend import kir as K
    from tensorlang.backend.loopir import AccAdd, Assign, Store

    def count(e) -> int:
        if isinstance(e, tuple):
            return sum(count(x) for x in e)
        if not isinstance(e, K.KExpr) or isinstance(e, (K.Int, K.Bool, K.Float, K.Name)):
            return 0
        own = int(isinstance(e, K.FCall) and e.fn == fn)
        return own + sum(count(getattr(e, f.name)) for f in fields(e))

    return sum(count(s.value) for s in walk_stmts(stmts) if isinstance(s, (Assign, AccAdd, Store)))


def test_adjoint_reads_stored_elements_back():
    """elements.py: the MLP gradient evaluates tanh once per layer and element (the
    forward pass's); its derivative reads the stored activations back (the values
    are checked against NumPy's gradient in test_gradients_use_blas)."""
    from benchmarks.dense import mlp_program

    loss, v = mlp_program()
    g = tl.grad(loss, wrt=[v[n] for n in ("W1", "b1", "W2", "b2", "w3")])
    from tensorlang.backend.scalars import VECTOR_TANH  # kernels' tanh (backend/vmath.py)

    assert _calls(tl.compile(g.program).loop_ir.body, VECTOR_TANH) == 2
    # an element is reused only at the same point: a transposed read computes its own
    n = tl.size("n")
    x = tl.tensor("x", n, n)
    xv = np.random.default_rng(5).normal(size=(7, 7))
    prog = tl.let(tl.gen([n, n], lambda i, j: tl.exp(x[i, j])), lambda e: tl.let(
        tl.gen([n, n], lambda i, j: e[j, i] * tl.exp(x[j, i]) + e[i, j]), lambda f: tl.sum(
            [n, n], lambda i, j: f[i, j] * e[i, j])))
    k = tl.compile(prog)
    np.testing.assert_allclose(k(x=xv), float(((np.exp(xv.T) ** 2 + np.exp(xv)) * np.exp(xv)).sum()), rtol=1e-12)
