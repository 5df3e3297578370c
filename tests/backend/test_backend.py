"""Backend (issue 6): compiled kernels against NumPy and the reference
evaluator on hand programs, and loop-IR inspection (narrowed loops, fusion,
bounds proofs)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.kir import Int, Name, evaluate_int, is_const
from tensorlang.backend.loopir import Alloc, If, Loop, Store, loop_depth, loops, walk_stmts
from tensorlang.ir import (
    REAL,
    Access,
    Const,
    Gen,
    Iverson,
    Let,
    Mul,
    Sum,
    fresh_index,
    fresh_var,
    sym_aff,
    tensor_type,
)


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


n, m = tl.sizes("n m")
x = tl.tensor("x", n)
v = tl.tensor("v", n)
A = tl.tensor("A", n, n)
s = tl.scalar("s")
R = tl.relation("R", n, n)
N = 9
rng = np.random.default_rng(1)
X = rng.standard_normal(N)
V = rng.standard_normal(N)
AA = rng.standard_normal((N, N))
RR = rng.random((N, N)) < 0.3


def run(e, mode="sparse", **inputs):
    k = tl.compile(e, mode=mode, threads=1)
    return k, k(**inputs)


# -- values against NumPy -------------------------------------------------------------


def test_convolution_matches_numpy():
    nn, mm = tl.sizes("nn mm")
    xs = tl.tensor("xs", nn + mm - 1)
    c = tl.tensor("c", mm)
    y = tl.gen(nn, lambda i: tl.sum(mm, lambda j: xs[i - j + mm - 1] * c[j]))
    xv, cv = rng.standard_normal(20), rng.standard_normal(5)
    _, out = run(y, xs=xv, c=cv)
    np.testing.assert_allclose(out, np.convolve(xv, cv, mode="valid"), rtol=1e-12, atol=1e-12)


def test_matvec_transpose_triangular_against_numpy():
    lower_mv = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, A[i, j] * x[j])))
    _, out = run(lower_mv, A=AA, x=X)
    np.testing.assert_allclose(out, np.tril(AA) @ X, rtol=1e-12)
    tr = tl.gen(n, lambda i: tl.gen(n, lambda j: A[j, i]))
    _, out = run(tr, A=AA)
    np.testing.assert_array_equal(out, AA.T)


def test_spmv_relation_against_numpy():
    spmv = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(R(i, j), A[i, j] * v[j])))
    for mode in ("sparse", "naive"):
        _, out = run(spmv, mode, A=AA, v=V, R=RR)
        np.testing.assert_allclose(out, (AA * RR) @ V, rtol=1e-12)
    # coordinate rows are accepted as relation data too
    coords = np.argwhere(RR)
    _, out = run(spmv, A=AA, v=V, R=coords)
    np.testing.assert_allclose(out, (AA * RR) @ V, rtol=1e-12)


def test_functions_against_numpy():
    e = tl.gen(n, lambda i: tl.exp(x[i]) * tl.sin(x[i]) + tl.tanh(x[i]) / (1 + x[i] * x[i]) + x[i] ** 3)
    _, out = run(e, x=X)
    ref = np.exp(X) * np.sin(X) + np.tanh(X) / (1 + X * X) + X**3
    np.testing.assert_allclose(out, ref, rtol=1e-13)


# -- values against the reference evaluator ----------------------------------------------

CASES = {
    "diag": (tl.gen(n, lambda i: tl.gen(n, lambda j: tl.iverson(i == j, s))), dict(n=N, s=1.5)),
    "single_point": (tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j == i, x[j]))), dict(x=X)),
    "triangular": (tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, x[j]))), dict(x=X)),
    "empty_sum": (tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j < 0, x[j]))), dict(x=X)),
    "empty_gen": (tl.gen(n, lambda i: tl.iverson(i < 0, x[i])), dict(x=X)),
    "strided": (tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(2 * j == i, x[j]))), dict(x=X)),
    "guarded_shift": (tl.gen(n, lambda i: tl.iverson(i >= 1, x[i - 1]) + x[i]), dict(x=X)),
    "relation_sum": (tl.sum(n, lambda i: tl.sum(n, lambda j: tl.iverson(R(i, j), A[i, j]))), dict(A=AA, R=RR)),
    "relation_or": (
        tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(R(i, j) | (i == j), A[i, j]))),
        dict(A=AA, R=RR),
    ),
    "relation_transposed": (
        tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(R(j, i) & (j < i), A[j, i]))),
        dict(A=AA, R=RR),
    ),
    "exists_affine": (tl.gen(n, lambda i: tl.iverson(tl.exists(n, lambda k: 2 * k == i), x[i])), dict(x=X)),
    "exists_relation": (tl.gen(n, lambda i: tl.iverson(tl.exists(n, lambda k: R(i, k)), x[i])), dict(x=X, R=RR)),
    "mask": (tl.gen(n, lambda i: tl.gen(n, lambda j: tl.iverson(R(i, j), A[i, j]))), dict(A=AA, R=RR)),
    "pair_out": (tl.pair(tl.sum(n, lambda i: x[i]), tl.gen(n, lambda i: 2 * x[i])), dict(x=X)),
    "scalar_lets": (
        tl.let(tl.sum(n, lambda i: x[i] * x[i]), lambda q: tl.gen(n, lambda i: x[i] / q)),
        dict(x=X),
    ),
    "loss_square": (tl.sum(n, lambda i: (x[i] - v[i]) ** 2), dict(x=X, v=V)),
}


@pytest.mark.parametrize("mode", ["sparse", "naive"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_equals_evaluator(name, mode):
    e, inputs = CASES[name]
    _, out = run(e, mode, **inputs)
    ref = tl.evaluate(e, **inputs)
    if isinstance(ref, tuple):
        for a, b in zip(out, ref):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_pair_inputs_struct_of_arrays():
    t = tl.pair_type(tl.tensor_of([n]), tl.tensor_of([n]))
    p = tl.var("p", t)
    e = tl.gen(n, lambda i: tl.proj(p, 0)[i] * tl.proj(p, 1)[i])
    _, out = run(e, p=(X, V))
    np.testing.assert_allclose(out, X * V, rtol=1e-14)


# -- loop IR: narrowed loops --------------------------------------------------------------


def _loops_of(e, mode="sparse"):
    return tl.compile(e, mode=mode, threads=1).loop_ir


def test_trace_eye_adjoint_has_no_nested_loop():
    # trace(A) = sum[i] A[i][i]; its adjoint at dy is gen[i] gen[j] [i = j]·dy
    dy = tl.scalar("dy")
    adj = tl.gen(n, lambda i: tl.gen(n, lambda j: tl.iverson(i == j, dy)))
    ir = _loops_of(adj)
    assert loop_depth(ir.body) == 1
    assert loop_depth(_loops_of(adj, "naive").body) == 2  # the naive baseline tests inside
    _, out = run(adj, n=N, dy=2.0)
    np.testing.assert_array_equal(out, 2.0 * np.eye(N))


def test_single_point_sum_is_no_loop_and_empty_is_no_code():
    ir = _loops_of(CASES["single_point"][0])
    assert loop_depth(ir.body) == 1
    ir = _loops_of(CASES["empty_gen"][0])
    assert loops(ir.body) == []
    assert [a.zero for a in ir.allocs] == [True]  # nothing written: zeros


def _eval_bound(node, env):
    """A loop bound (kernel-IR integer expression) at given index values."""
    return evaluate_int(node, env)


def _sizes_env(k, **sizes):
    """Kernel names of the sizes (positional, allocator-made) -> values."""
    names = dict(zip(k.spec["sizes"], k.loop_ir.args))
    return {names[s]: v for s, v in sizes.items()}


def test_triangular_loops():
    k = tl.compile(CASES["triangular"][0], threads=1)
    ir = k.loop_ir
    outer = [lp for lp in loops(ir.body) if lp.kind == "gen"][0]
    inner = [lp for lp in loops(ir.body) if lp.kind == "sum"][0]
    for i in range(5):
        env = {outer.var: i, **_sizes_env(k, n=5)}
        assert (_eval_bound(inner.lo, env), _eval_bound(inner.hi, env)) == (0, i + 1)


def _deconvolution_gradient():
    """The adjoint of the deconvolution loss w.r.t. x, written as the paper's
    Section 2.1 gives it (with the Note's range predicate kept):
    dy = gen[i:n] 2·(sum[j:m] x[i-j+m-1]·c[j] - z[i]);
    dx = gen[k:n+m-1] sum[j:m] [0 <= k-(m-1)+j < n]·dy[k-(m-1)+j]·c[j]."""
    nn, mm = tl.sizes("n m")
    xs = tl.tensor("x", nn + mm - 1)
    c = tl.tensor("c", mm)
    z = tl.tensor("z", nn)
    dy_val = tl.gen(nn, lambda i: 2 * (tl.sum(mm, lambda j: xs[i - j + mm - 1] * c[j]) - z[i]))
    return tl.let(
        dy_val,
        lambda dy: tl.gen(
            nn + mm - 1,
            lambda k: tl.sum(mm, lambda j: tl.iverson((0 <= k - (mm - 1) + j) & (k - (mm - 1) + j < nn), dy[k - (mm - 1) + j] * c[j])),
        ),
    )


def _numpy_deconvolution_gradient(xv, cv, zv):
    y = np.convolve(xv, cv, mode="valid")
    dy = 2 * (y - zv)
    return np.correlate(dy, cv, mode="full")


def test_deconvolution_gradient_values_bounds_and_temporaries():
    g = _deconvolution_gradient()
    xv, cv, zv = rng.standard_normal(20), rng.standard_normal(5), rng.standard_normal(16)
    k = tl.compile(g, threads=1)
    np.testing.assert_allclose(k(x=xv, c=cv, z=zv), _numpy_deconvolution_gradient(xv, cv, zv), rtol=1e-12, atol=1e-12)
    ir = k.loop_ir
    # temporaries: dy (n) only; the output dx (n+m-1); no n x m buffer
    temps = [(a.binding, a.shape) for a in ir.allocs if a.role == "temporary"]
    outs = [a for a in ir.allocs if a.role == "output"]
    assert len(temps) == 1 and len(temps[0][1]) == 1 and len(outs) == 1 and len(outs[0].shape) == 1
    assert all(len(a.shape) == 1 for a in ir.allocs)
    # the correlation's loops visit j in [max(0, m-1-k), min(m, n+m-1-k)) for
    # each k, once each; dx is accumulated along k (stride 1, interchange.py)
    (out,) = ir.results
    nest = [s for s in ir.body if isinstance(s, Loop) and any(isinstance(x, Store) and x.array == out for x in walk_stmts(s.body))]
    assert len(nest) == 1 and nest[0].kind == "scatter"
    assert not any(isinstance(x, If) for x in walk_stmts(nest[0].body))
    for nn, mm in [(7, 3), (4, 4), (10, 1), (3000, 5)]:
        seen, zeros = Counter(), Counter()
        _visit(nest, _sizes_env(k, n=nn, m=mm), out, seen, zeros)
        want = Counter({kk: min(mm, nn + mm - 1 - kk) - max(0, mm - 1 - kk) for kk in range(nn + mm - 1)})
        assert seen == want
        assert zeros == Counter(range(nn + mm - 1))  # each element zeroed once, in its tile


def _visit(stmts, env, out, seen, zeros=None):
    """Run a loop nest's integer part, counting the points where ``out`` is
    written (its zeroing, a tile's slab zeroed as the tile starts, apart in ``zeros``)."""
    for s in stmts:
        if isinstance(s, Loop):
            for v in range(_eval_bound(s.lo, env), _eval_bound(s.hi, env), s.step):
                _visit(s.body, {**env, s.var: v}, out, seen, zeros)
        elif isinstance(s, Store) and s.array == out:
            at = tuple(_eval_bound(i, env) for i in s.index)[0]
            if is_const(s.value, 0.0):
                if zeros is not None:
                    assert at not in seen  # zeroed before any term is added
                    zeros[at] += 1
            else:
                seen[at] += 1


def test_ssa_convolution_is_fused_no_n_by_m_buffer():
    """Tensor SSA names the gather, the broadcast and the product as n x m
    tensors; the kernel allocates only the output."""
    nn, mm = tl.sizes("n m")
    xs = tl.tensor("x", nn + mm - 1)
    c = tl.tensor("c", mm)
    i, j = fresh_index("i"), fresh_index("j")
    ai, aj = sym_aff(i), sym_aff(j)
    t2 = tensor_type([nn, mm])
    X1, X2, X3 = fresh_var("X1", t2), fresh_var("X2", t2), fresh_var("X3", t2)
    Y = fresh_var("Y", tensor_type([nn]))
    prog = Let(
        X1,
        Gen(i, nn, Gen(j, mm, Access(xs, ai - aj + mm - 1))),
        Let(
            X2,
            Gen(i, nn, Gen(j, mm, Access(c, aj))),
            Let(
                X3,
                Gen(i, nn, Gen(j, mm, Mul(Access(Access(X1, ai), aj), Access(Access(X2, ai), aj)))),
                Let(Y, Gen(i, nn, Sum(j, mm, Access(Access(X3, ai), aj))), Y),
            ),
        ),
    )
    k = tl.compile(prog, threads=1)
    assert [(a.role, len(a.shape)) for a in k.loop_ir.allocs] == [("output", 1)]
    xv, cv = rng.standard_normal(12), rng.standard_normal(4)
    np.testing.assert_allclose(k(x=xv, c=cv), np.convolve(xv, cv, mode="valid"), rtol=1e-12)


def test_shared_intermediate_read_at_two_shifts_is_fused_without_duplicating_work():
    # w[i] = exp(x[i]) is read at i and i-1: substituted (backend/shifted.py), the
    # interior loop would compute it twice; rolled (backend/roll.py), once per point
    from tensorlang.backend.roll import roll_loops
    from tensorlang.backend.loopir import Loop, walk_stmts

    e = tl.let(tl.gen(n, lambda i: tl.exp(x[i])), lambda w: tl.gen(n, lambda i: w[i] + tl.iverson(i >= 1, w[i - 1])))
    k = tl.compile(e, threads=1)
    assert [a.role for a in k.loop_ir.allocs] == ["output"]
    exps = lambda m: sum(1 for s in m.body for v in [s.value] for c in _kir_nodes(v) if getattr(c, "fn", None) == "exp")
    for par in (False, True):
        inner = [m for m in walk_stmts(roll_loops(k.loop_ir, par).body) if isinstance(m, Loop)
                 and not any(isinstance(y, Loop) for y in walk_stmts(m.body))]
        assert max(exps(m) for m in inner) == 1
    ew = np.exp(X)
    for threads in (1, 2):
        got = tl.compile(e, threads=threads)(x=X)
        np.testing.assert_allclose(got, ew + np.concatenate([[0.0], ew[:-1]]), rtol=1e-14)


def _kir_nodes(e):
    from dataclasses import fields

    from tensorlang.backend import kir as K

    yield e
    if isinstance(e, K.KExpr) and not isinstance(e, (K.Int, K.Bool, K.Float, K.Name)):
        for f in fields(e):
            v = getattr(e, f.name)
            for y in (v if isinstance(v, tuple) else (v,)):
                if isinstance(y, K.KExpr):
                    yield from _kir_nodes(y)


# -- bounds proofs, errors -------------------------------------------------------------


def test_unprovable_access_is_rejected_naming_it():
    bad = tl.gen(n, lambda i: x[i + 1])
    with pytest.raises(tl.TensorLangError, match=r"x\[i \+ 1\]"):
        tl.compile(bad)
    with pytest.raises(tl.TensorLangError, match="in bounds"):
        tl.compile(tl.gen(n, lambda i: tl.sum(m, lambda j: x[j])))


def test_guarded_access_is_proven():
    ok = tl.gen(n, lambda i: tl.iverson(i + 1 < n, x[i + 1]))
    _, out = run(ok, x=X)
    np.testing.assert_array_equal(out, np.concatenate([X[1:], [0.0]]))


def test_inputs_validated_and_converted():
    e = tl.gen(n, lambda i: 2 * x[i])
    k = tl.compile(e, threads=1)
    out = k(x=X.astype(np.float32))  # float32 in, float32 kernel and result (#18)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, 2 * X.astype(np.float32))
    out = k(x=np.arange(N))  # integers are converted to float64
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, 2.0 * np.arange(N))
    with pytest.raises(tl.InputError):
        k()
    with pytest.raises(tl.InputError):
        k(x=X, y=X)
    with pytest.raises(tl.InputError):
        k(x=np.ones((2, 2)))


def test_unsupported_function_is_an_unsupported_error():
    from tensorlang.ir import Call

    e = tl.gen(n, lambda i: x[i])
    weird = Gen(i := fresh_index("i"), n, Call("nosuchfn", (Access(x, sym_aff(i)),)))
    with pytest.raises(tl.TensorLangError):
        tl.compile(weird)
    assert tl.compile(e, threads=1).source.count("def kernel_serial") == 1


def test_threads_setting_parallel_variant_agrees():
    e = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, A[i, j] * x[j])))
    k1 = tl.compile(e, threads=1)
    k2 = tl.compile(e, threads=2)
    assert "prange" in k2.source and "parallel=True" in k2.source
    np.testing.assert_array_equal(k1(A=AA, x=X), k2(A=AA, x=X))
    assert any(lp.parallel for lp in loops(k1.loop_ir.body))
    with pytest.raises(tl.TensorLangError):
        tl.compile(e, threads=0)
    with pytest.raises(tl.TensorLangError):
        tl.compile(e, mode="fast")


def test_gather_only_every_store_writes_its_own_gen_point():
    """No kernel writes a location computed by another iteration: every Store
    indexes exactly the gen block's own dimensions."""
    for e, _ in CASES.values():
        ir = _loops_of(e)
        for st in walk_stmts(ir.body):
            if isinstance(st, Store):
                assert len(set(st.index)) == len(st.index)
                assert all(isinstance(ix, Name) for ix in st.index)


def test_source_is_python_with_njit():
    k = tl.compile(CASES["triangular"][0], threads=1)
    assert "numba.njit" in k.source and "fastmath" not in k.source
    compile(k.source, "<kernel>", "exec")
    assert isinstance(k.loop_ir.allocs[0], Alloc) and isinstance(loops(k.loop_ir.body)[0], Loop)


def test_runtime_make_callable_uses_compiled_kernels(monkeypatch):
    from tensorlang.runtime import make_callable

    f = make_callable(CASES["triangular"][0])
    np.testing.assert_allclose(f(x=X), np.cumsum(X), rtol=1e-13)
    assert f._impl is None  # small sizes: the evaluator, no compilation
    big = rng.standard_normal(100)
    np.testing.assert_allclose(f(x=big), np.cumsum(big), rtol=1e-12)
    assert f.compiled and "kernel_serial" in f.source
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")
    g = make_callable(CASES["triangular"][0])
    np.testing.assert_allclose(g(x=X), np.cumsum(X), rtol=1e-13)
    assert g._impl is not None and g.compiled


def test_const_iverson_constructs():
    i = fresh_index("i")
    e = Gen(i, n, Iverson(sym_aff(i) < 3, Const(2.5)))
    _, out = run(e, n=6)
    np.testing.assert_array_equal(out, [2.5, 2.5, 2.5, 0, 0, 0])
    assert REAL is not None


def test_fusion_keeps_the_cost_models_count():
    from tensorlang.driver import prepare  # the route "compile" up to the kernel
    from tensorlang.backend.lower import fused_program

    nn, mm = tl.sizes("n m")
    xs = tl.tensor("x", nn + mm - 1)
    c = tl.tensor("c", mm)
    z = tl.tensor("z", nn)
    y = tl.gen(nn, lambda i: tl.sum(mm, lambda j: xs[i - j + mm - 1] * c[j]))
    loss = tl.sum(nn, lambda i: (y[i] - z[i]) ** 2)
    for e, ssa in [(tl.normalize(y), True), (tl.normalize(loss), True), (_deconvolution_gradient(), False)]:
        p = prepare(e)
        f = fused_program(p)
        if ssa:  # tensor SSA: gathers, broadcasts and products were fused
            assert len(tl.ir.lets(f)[0]) < len(tl.ir.lets(p)[0])
        for sizes in [dict(n=50, m=7), dict(n=3, m=5)]:
            assert tl.cost(tl.explicit_sharing(f), **sizes) == tl.cost(tl.explicit_sharing(e), **sizes)


def test_proofs_that_need_positive_sizes_fall_back_for_empty_inputs():
    last = tl.gen(m, lambda i: x[n - 1])  # in bounds for n >= 1 only
    k = tl.compile(last, threads=1)
    assert k.spec["needs_positive_sizes"]
    np.testing.assert_array_equal(k(x=X, m=3), [X[-1]] * 3)
    with pytest.raises(tl.TensorLangError):  # n = 0: the evaluator reports the bad access
        k(x=np.zeros(0), m=2)
    np.testing.assert_array_equal(k(x=np.zeros(0), m=0), np.zeros(0))


def test_grad_returns_compiled_kernels_at_size():
    nn, mm = tl.sizes("n m")
    xs = tl.tensor("x", nn + mm - 1)
    c = tl.tensor("c", mm)
    z = tl.tensor("z", nn)
    y = tl.gen(nn, lambda i: tl.sum(mm, lambda j: xs[i - j + mm - 1] * c[j]))
    loss = tl.sum(nn, lambda i: (y[i] - z[i]) ** 2)
    g = tl.grad(loss, wrt=xs)
    xv, cv, zv = rng.standard_normal(203), rng.standard_normal(4), rng.standard_normal(200)
    np.testing.assert_allclose(g(x=xv, c=cv, z=zv), _numpy_deconvolution_gradient(xv, cv, zv), rtol=1e-11, atol=1e-11)
    k = tl.compile(g.program, threads=1)
    temps = [a for a in k.loop_ir.allocs if a.role == "temporary"]
    # y (accumulated along i, interchange.py) and dY: no n x m buffer
    assert len(temps) <= 2 and all(len(a.shape) == 1 for a in temps)


def test_spmv_adjoint_runs_over_the_relation_in_its_own_order():
    """dv[j] = sum[i] [R(i, j)]·A[i][j]·dy[i]: gathering would read R by
    columns (CSC order); the kernel instead runs over R's coordinates in their
    own (row) order and adds each term into dv[j] (backend/scatter.py)."""
    dy = tl.tensor("dy", n)
    adj = tl.gen(n, lambda j: tl.sum(n, lambda i: tl.iverson(R(i, j), A[i, j] * dy[i])))
    k = tl.compile(adj, threads=1)
    assert [perm for _, perm, _, _ in k.spec["relations"]] == [[0, 1]]  # no transposed structure
    assert k.spec["relation_orders"] == []  # and no permutation of values
    assert not any(lp.parallel for lp in loops(k.loop_ir.body))  # accumulations never race
    dyv = rng.standard_normal(N)
    np.testing.assert_allclose(k(A=AA, dy=dyv, R=RR), (AA * RR).T @ dyv, rtol=1e-12)
    vjp = tl.vjp(tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(R(i, j), A[i, j] * v[j]))), wrt=v)
    np.testing.assert_allclose(vjp(A=AA, v=V, R=RR, dy=dyv), (AA * RR).T @ dyv, rtol=1e-12)


def test_pooled_temporaries_are_reused_and_zeroed_per_call():
    # a temporary whose domain does not cover it (zeroed in the kernel each call)
    w = tl.let(tl.gen(n, lambda i: tl.iverson(i >= 2, tl.exp(x[i]))), lambda t: tl.gen(n, lambda i: t[i] * t[i] + t[n - 1 - i]))
    k = tl.compile(w, threads=1)
    assert [a.pooled for a in k.loop_ir.allocs] == [True, False]
    ew = np.where(np.arange(N) >= 2, np.exp(X), 0.0)
    want = ew * ew + ew[::-1]
    first = k(x=X)
    np.testing.assert_allclose(first, want, rtol=1e-14)
    np.testing.assert_allclose(k(x=-X), np.where(np.arange(N) >= 2, np.exp(-X), 0) ** 2 + np.where(np.arange(N) >= 2, np.exp(-X), 0)[::-1], rtol=1e-14)
    np.testing.assert_allclose(first, want, rtol=1e-14)  # the returned array is not the pool's
    small = X[:4]
    es = np.where(np.arange(4) >= 2, np.exp(small), 0.0)
    np.testing.assert_allclose(k(x=small), es * es + es[::-1], rtol=1e-14)


def test_adjoints_from_tl_adjoint_lower_to_narrow_loops():
    """The derivative engine's own outputs: trace's adjoint is one loop; the
    convolution's adjoint is the correlation with bounds
    j in [max(0, m-1-k), min(m, n+m-1-k))."""
    nn, mm = tl.sizes("n m")
    AA_ = tl.tensor("A", nn, nn)
    tr = tl.sum(nn, lambda i: AA_[i, i])
    ir = tl.compile(tl.adjoint(tr, wrt=[AA_]), threads=1).loop_ir
    assert loop_depth(ir.body) == 1
    xs = tl.tensor("x", nn + mm - 1)
    c = tl.tensor("c", mm)
    y = tl.gen(nn, lambda i: tl.sum(mm, lambda j: xs[i - j + mm - 1] * c[j]))
    k = tl.compile(tl.adjoint(y, wrt=[xs]), threads=1)
    # accumulated along k (stride 1, interchange.py): each (k, j) of the range once
    (out,) = k.loop_ir.results
    # (besides the loops zeroing each tile's slab of the output as the tile starts)
    zeroing = {lp.var for lp in loops(k.loop_ir.body) if all(
        isinstance(t, Loop) or (isinstance(t, Store) and is_const(t.value, 0.0)) for t in walk_stmts(lp.body))}
    assert {lp.kind for lp in loops(k.loop_ir.body) if lp.var not in zeroing} == {"scatter"}
    for nv, mv in [(7, 3), (2, 5)]:
        seen, zeros = Counter(), Counter()
        _visit(k.loop_ir.body, _sizes_env(k, n=nv, m=mv), out, seen, zeros)
        assert seen == Counter({kk: min(mv, nv + mv - 1 - kk) - max(0, mv - 1 - kk) for kk in range(nv + mv - 1)})
        assert zeros == Counter(range(nv + mv - 1))
    dyv, cv = rng.standard_normal(7), rng.standard_normal(3)
    np.testing.assert_allclose(k(dy=dyv, c=cv), np.correlate(dyv, cv, mode="full"), rtol=1e-13)


@pytest.mark.parametrize("name", ["mask", "diag", "exists_affine", "relation_transposed"])
def test_parallel_variant_equals_evaluator(name):
    e, inputs = CASES[name]
    k = tl.compile(e, threads=2)
    # a transposed relation's sum accumulates in the relation's own order
    # (backend/scatter.py); its parallel variant uses per-thread partial
    # outputs (tests/backend/test_parallel_scatter.py), the serial loop at this size
    assert "kernel_parallel" in k.source
    np.testing.assert_allclose(k(**inputs), tl.evaluate(e, **inputs), rtol=1e-12, atol=1e-12)


def test_strided_domain_gives_a_strided_loop():
    ir = _loops_of(CASES["exists_affine"][0])  # [exists k. 2k = i]·x[i]: even i only
    (lp,) = loops(ir.body)
    assert lp.step == 2 and lp.lo == Int(0)


@pytest.mark.parametrize("mode", ["sparse", "naive"])
def test_regression_or_inside_and_keeps_its_parentheses(mode):
    """A hoisted [p ∨ q] bracket tested inside a conjunction: `a and (b or c)`,
    not `a and b or c` (which read x1[n] here)."""
    x0 = tl.tensor("x0", n, n)
    x2 = tl.tensor("x2", m)
    R1 = tl.relation("R1", n, n)
    e = tl.gen(m + n - 1, lambda i: tl.iverson(
        R(i, i) & (i == 0) & R1(i, i - 1),
        tl.iverson(i < n, x0[i, i]) + tl.iverson(i + 1 < n, x[i + 1]) + tl.iverson(i < m, x2[i])))
    from tensorlang.driver import python_kernel

    for r0, r1 in [(False, False), (True, True)]:
        ins = dict(x0=np.ones((1, 1)), x=np.ones(1), x2=np.ones(1), R=np.array([[r0]]), R1=np.array([[r1]]))
        np.testing.assert_array_equal(python_kernel(e, mode)(**ins), tl.evaluate(e, **ins))


def test_tensor_of_pairs_on_a_relation_is_returned_dense():
    """Found by the hypothesis backend test: a gen of pairs guarded by a
    relation is computed on the relation's non-zeros (packed outputs), and the
    tensor of pairs has no packed form; it used to raise a TypeError after the
    kernel ran.  Checked against the evaluator."""
    from tensorlang.ir import PairT

    n = tl.size("n")
    R0, R1 = tl.relation("R0", n, n), tl.relation("R1", n)
    p0 = tl.var("p0", PairT(REAL, REAL))
    e = tl.gen(n, lambda i: tl.iverson(tl.exists(n, lambda k: R0(k, i)), tl.iverson(R1(i), p0)))
    f = tl.compile(e)
    for size, r0, r1 in [(1, [[False]], [False]), (3, np.eye(3, dtype=bool)[::-1], [True, False, True])]:
        ins = dict(p0=(1.5, -2.0), R0=np.asarray(r0), R1=np.asarray(r1), n=size)
        got, want = f(**ins), tl.evaluate(e, **ins)
        assert [tuple(map(float, g)) for g in got] == [tuple(map(float, w)) for w in want]
