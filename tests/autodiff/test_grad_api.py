"""The gradient API (tl.grad, value_and_grad, vjp, jvp, derivative, adjoint) end to end.

Programs go through tl.normalize (Section 5) and the derivative rules.
Oracles: central finite differences in float64, the dot-product test
<D e(dx), dy> = <dx, DT e(dy)>, the naive transposition, NumPy (qform
Hessian), and the cost model for Theorems 6.1 and 6.55.
"""

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import tensorlang as tl
from tensorlang.costmodel import io_cost, type_cost_at
from tensorlang.ir import PairT, Var, input_vars
from tensorlang.passes.adjoint import transpose
from tensorlang.passes.simplify import simplify
from tensorlang.passes.total_derivative import tangent_inputs, total_derivative
from tests import ssa_examples as ex
from tests.strategies import programs

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _wrt(expr):
    return [v for v in input_vars(expr)]


def _perturb(vals, name, direction, h):
    v = vals[name]
    return ex.unflat_like(ex.flat(v) + h * ex.flat(direction), v)


def _fd_dir(prog, dxs, h=1e-6):
    """(f(x + h dx) - f(x - h dx)) / 2h over all inputs in ``dxs``, flattened."""
    plus = dict(prog.inputs)
    minus = dict(prog.inputs)
    for k, d in dxs.items():
        plus[k] = _perturb(prog.inputs, k, d, h)
        minus[k] = _perturb(prog.inputs, k, d, -h)
    fp = ex.flat(tl.evaluate(prog.expr, **plus, **prog.sizes))
    fm = ex.flat(tl.evaluate(prog.expr, **minus, **prog.sizes))
    return (fp - fm) / (2 * h)


def _directions(rng, prog, wrt):
    return {x.name: ex.unflat_like(rng.normal(size=ex.flat(prog.inputs[x.name]).size), prog.inputs[x.name]) for x in wrt}


# -- the paper's examples ------------------------------------------------------


def _deconv():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    return tl.sum(n, lambda i: (y[i] - z[i]) ** 2), x, c, z


def test_grad_of_deconvolution_loss_matches_numpy_and_is_the_section_2_1_pipeline():
    loss, x, c, z = _deconv()
    rng = np.random.default_rng(0)
    xv, cv, zv = rng.normal(size=12), rng.normal(size=4), rng.normal(size=9)
    gx, gc = tl.grad(loss, wrt=[x, c])(x=xv, c=cv, z=zv)
    r = 2 * (np.convolve(xv, cv, mode="valid") - zv)
    ref_x = np.zeros(12)
    for i in range(9):
        ref_x[i:i + 4] += r[i] * cv[::-1]
    ref_c = np.array([r @ xv[3 - j:3 - j + 9] for j in range(4)])
    np.testing.assert_allclose(gx, ref_x, rtol=1e-12)
    np.testing.assert_allclose(gc, ref_c, rtol=1e-12)
    gx_only = tl.grad(loss, wrt=x)(x=xv, c=cv, z=zv)
    np.testing.assert_allclose(gx_only, ref_x, rtol=1e-12)
    v, g = tl.value_and_grad(loss, wrt=x)(x=xv, c=cv, z=zv)
    assert v == pytest.approx(float(((r / 2) ** 2).sum()))
    np.testing.assert_allclose(g, ref_x, rtol=1e-12)
    gn = tl.grad(loss, wrt=[x, c], mode="naive")(x=xv, c=cv, z=zv)
    np.testing.assert_allclose(gn[0], ref_x, rtol=1e-12)
    np.testing.assert_allclose(gn[1], ref_c, rtol=1e-12)


def test_grad_refuses_non_scalar_losses_and_bad_arguments():
    n = tl.size("n")
    x = tl.tensor("x", n)
    vec = tl.gen(n, lambda i: x[i] * x[i])
    with pytest.raises(tl.TensorLangError, match="scalar"):
        tl.grad(vec, wrt=x)
    with pytest.raises(tl.TensorLangError, match="mode"):
        tl.grad(tl.sum(n, lambda i: x[i]), wrt=x, mode="fast")
    with pytest.raises(tl.TensorLangError, match="inputs"):
        tl.grad(tl.sum(n, lambda i: x[i]), wrt=vec)


def test_vjp_and_jvp_of_a_vector_function():
    n = tl.size("n")
    x = tl.tensor("x", n)
    f = tl.gen(n, lambda i: tl.sin(x[i]) * tl.iverson(i > 0, x[i - 1]))
    xv = np.array([0.3, -1.2, 0.7, 2.0])
    dyv = np.array([1.0, 2.0, -1.0, 0.5])
    dxv = np.array([0.1, 0.2, -0.3, 0.4])
    J = np.zeros((4, 4))
    for i in range(4):
        if i > 0:
            J[i, i] = np.cos(xv[i]) * xv[i - 1]
            J[i, i - 1] = np.sin(xv[i])
    np.testing.assert_allclose(tl.vjp(f, wrt=x)(x=xv, dy=dyv), J.T @ dyv, rtol=1e-12)
    np.testing.assert_allclose(tl.vjp(f, wrt=x, mode="naive")(x=xv, dy=dyv), J.T @ dyv, rtol=1e-12)
    val, tan = tl.jvp(f, wrt=x)(x=xv, dx=dxv)
    np.testing.assert_allclose(val, np.sin(xv) * np.r_[0, xv[:-1]], rtol=1e-12)
    np.testing.assert_allclose(tan, J @ dxv, rtol=1e-12)


def test_adjoint_expression_has_the_cotangent_input():
    loss, x, c, z = _deconv()
    adj = tl.adjoint(loss, wrt=[x])
    ins = {v.name: v for v in input_vars(adj)}
    assert ins["dy"].type is tl.Real
    adj2 = tl.adjoint(loss, wrt=[x], cotangent="seed")
    assert "seed" in {v.name for v in input_vars(adj2)}
    with pytest.raises(tl.TensorLangError, match="cotangent"):
        tl.adjoint(loss, wrt=[x], cotangent="z")


def _qform():
    n = tl.size("n")
    x, A = tl.tensor("x", n), tl.tensor("A", n, n)
    return tl.sum(n, lambda i: x[i] * tl.sum(n, lambda j: A[i, j] * x[j])), x, A


def test_hessian_vector_product_of_qform_by_composition():
    q, x, A = _qform()
    g = tl.adjoint(q, wrt=[x])  # DT q (x, dy)
    hv = tl.derivative(g, wrt=[x])  # D(DT q)(x, dx): inputs x, A, dy, dx
    rng = np.random.default_rng(4)
    Av, xv, vv = rng.normal(size=(5, 5)), rng.normal(size=5), rng.normal(size=5)
    got = tl.evaluate(hv, A=Av, dy=1.0, dx=vv, **({"x": xv} if "x" in {v.name for v in input_vars(hv)} else {}))
    np.testing.assert_allclose(got, (Av + Av.T) @ vv, rtol=1e-12)
    grad = tl.grad(q, wrt=x)(x=xv, A=Av)
    np.testing.assert_allclose(grad, (Av + Av.T) @ xv, rtol=1e-12)


# -- the pathological programs of §1 ------------------------------------------------


def _degree(expr, var="N"):
    e = sympy.sympify(expr)
    if isinstance(e, sympy.Piecewise):
        e = e.args[0][0] if e.args[0][1] is not sympy.true or len(e.args) == 1 else e.args[-2][0]
    return sympy.Poly(sympy.expand(e), sympy.Symbol(var, integer=True)).degree()


def _trace_program(k):
    N = tl.size("N")
    x = tl.tensor("x", N)
    body = lambda A: sum((tl.sum(N, lambda i: A[i, i]) for _ in range(k - 1)), tl.sum(N, lambda i: A[i, i]))  # noqa: E731
    return tl.let(tl.gen([N, N], lambda i, j: tl.iverson(i == j, x[i])), body), x


def _dot_program():
    N = tl.size("N")
    x = tl.tensor("x", N)
    return tl.let(tl.gen([N, N], lambda i, j: tl.iverson(i == j, x[i])),
                  lambda A: tl.sum(N, lambda i: A[i, 0] * A[0, i])), x


@pytest.mark.parametrize("make", [lambda: _trace_program(1), lambda: _trace_program(4), _dot_program],
                         ids=["trace1", "trace4", "dot"])
def test_pathological_programs_sparse_linear_naive_quadratic(make):
    prog, x = make()
    sparse = tl.adjoint(prog, wrt=[x])
    naive = tl.adjoint(prog, wrt=[x], mode="naive")
    cs, cn, c0 = tl.symbolic_cost(sparse), tl.symbolic_cost(naive), tl.symbolic_cost(prog)
    print("program:", c0, " sparse adjoint:", cs, " naive adjoint:", cn)
    assert _degree(cs) <= 1
    assert _degree(cn) == 2
    for N in (1, 4, 7):
        xv = np.arange(1.0, N + 1)
        a = ex.run(sparse, dict(N=N), x=xv, dy=1.0)
        b = ex.run(naive, dict(N=N), x=xv, dy=1.0)
        np.testing.assert_allclose(a, b, rtol=1e-12)


# -- hypothesis programs ------------------------------------------------------------


def _scalar_wrt(prog):
    return [v for v in _wrt(prog.expr) if v.name in prog.inputs and v.name not in prog.relation_names]


@settings(max_examples=40, **SETTINGS)
@given(programs(smooth=True, output="scalar"))
def test_grad_matches_central_finite_differences(prog):
    wrt = _scalar_wrt(prog)
    assume(wrt)
    g = tl.grad(prog.expr, wrt=wrt)(**prog.inputs, **prog.sizes)
    rng = np.random.default_rng(0)
    for _ in range(2):
        dxs = _directions(rng, prog, wrt)
        fd = float(_fd_dir(prog, dxs)[0])
        got = sum(float(ex.flat(gk) @ ex.flat(dxs[x.name])) for x, gk in zip(wrt, g if len(wrt) > 1 else (g,)))
        scale = max(1.0, prog.bound) * sum(np.abs(ex.flat(d)).sum() for d in dxs.values())
        assert got == pytest.approx(fd, rel=1e-5, abs=1e-6 * scale)


@settings(max_examples=20, **SETTINGS)
@given(programs(smooth=True), st.integers(0, 2**31))
def test_dot_product_test_and_naive_equals_sparse(prog, seed):
    # The derivative calculus is under test here, so the derived programs run
    # on the reference evaluator (three Numba compiles per example took 140 s
    # of CI); test_backend_hypothesis checks compiled gradients against it.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TENSORLANG_RUNTIME", "evaluator")
        _dot_product_and_naive(prog, seed)


def _dot_product_and_naive(prog, seed):
    wrt = _scalar_wrt(prog)
    assume(wrt)
    assume(not _array_of_structs(tl.type_of(prog.expr)))  # a cotangent input must be a struct of arrays
    rng = np.random.default_rng(seed)
    y = prog.evaluate()
    dyv = ex.unflat_like(rng.normal(size=ex.flat(y).size), y)
    dxs = _directions(rng, prog, wrt)
    val, tan = tl.jvp(prog.expr, wrt=wrt)(**prog.inputs, **prog.sizes, **{"d" + k: v for k, v in dxs.items()})
    lhs = float(ex.flat(tan) @ ex.flat(dyv))
    outs = []
    for mode in ("sparse", "naive"):
        cot = tl.vjp(prog.expr, wrt=wrt, mode=mode)(**prog.inputs, **prog.sizes, dy=dyv)
        cot = cot if len(wrt) > 1 else (cot,)
        outs.append(np.concatenate([ex.flat(c) for c in cot]))
        rhs = sum(float(ex.flat(c) @ ex.flat(dxs[x.name])) for x, c in zip(wrt, cot))
        scale = max(1.0, prog.bound) * (1 + np.abs(ex.flat(dyv)).sum()) * (1 + sum(np.abs(ex.flat(d)).sum() for d in dxs.values()))
        assert rhs == pytest.approx(lhs, rel=1e-9, abs=1e-10 * scale)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-9, atol=1e-10 * max(1.0, prog.bound) * (1 + np.abs(ex.flat(dyv)).sum()))
    np.testing.assert_allclose(ex.flat(val), ex.flat(y), rtol=1e-12, atol=1e-12)


def _jvp_cost(fn: str) -> int:
    """Cost of D⟦f(a, …)⟧[a ↦ da, …]."""
    from tensorlang.functions import lookup

    arity = lookup(fn).arity
    args = [tl.scalar(f"a{k}") for k in range(arity)]
    sigma = {a: tl.scalar("d" + a.name) for a in args}
    return tl.cost(total_derivative(tl.ir.Call(fn, tuple(args)), sigma))


def test_every_black_box_derivative_is_one_application():
    # Rule 6.6: D⟦f(e0, …)⟧σ = Df(e0, …; de0, …), one black-box application
    # (cost 1 by rule 4.26), whatever the cost of f's expanded partials
    # (tanh' = 1 - tanh², div's two partials, ...).
    for f in ["exp", "log", "sin", "cos", "sqrt", "pow[2]", "pow[3]", "tanh", "sigmoid", "div", "strat_mix"]:
        assert _jvp_cost(f) == 1, f


def _array_of_structs(t, under=False):
    if isinstance(t, PairT):
        return under or _array_of_structs(t.fst) or _array_of_structs(t.snd)
    if isinstance(t, tl.ir.TensorT):
        return _array_of_structs(t.elem, True)
    return False


def _cost_kw(prog, e):
    sizes = {z.name for z in tl.ir.size_vars(e)}
    rels = {r.name for r in tl.ir.relations_of(e)}
    return {k: v for k, v in {**prog.sizes, **prog.inputs}.items() if k in sizes or k in rels}


@settings(max_examples=40, derandomize=True, database=None, **SETTINGS)
@given(programs(smooth=True), st.integers(1, 9), st.integers(1, 9))
def test_theorems_6_1_and_6_55_on_random_programs(prog, n, m):
    from tensorlang.passes.pipeline import normalize

    wrt = _scalar_wrt(prog)
    assume(wrt)
    assume(not _array_of_structs(tl.type_of(prog.expr)))  # outside pair elimination's precondition
    ssa = normalize(prog.expr)
    D = total_derivative(ssa, tangent_inputs(ssa, wrt))
    seed = Var("dy", 0, tl.type_of(ssa))
    assume("dy" not in {v.name for v in input_vars(ssa)})
    adj = simplify(transpose(ssa, wrt, seed))
    # $_IO(e) = $⟦e⟧ + $(T_I) + $(T_O) with T_I the program's inputs (normalization may
    # drop an input the derivative still has to return a zero cotangent for)
    ins = [v for v in input_vars(prog.expr)]
    checks = [(_cost_kw(prog, prog.expr), {**prog.sizes})]
    if not prog.relation_names:  # also at other sizes
        checks.append(({k: v for k, v in {"n": n, "m": m}.items() if k in prog.sizes}, {"n": n, "m": m}))
    for kw, sizes in checks:
        def only(e):
            names = {z.name for z in tl.ir.size_vars(e)} | {r.name for r in tl.ir.relations_of(e)}
            return {k: v for k, v in kw.items() if k in names}

        c = tl.cost(ssa, **only(ssa))
        assert tl.cost(D, **only(D)) <= 4 * c
        t_i = sum(type_cost_at(v.type, sizes) for v in ins)
        t_o = type_cost_at(tl.type_of(ssa), sizes)
        t_adj_in = t_i + t_o  # the adjoint's inputs: the program's and the cotangent dy
        t_adj_out = sum(type_cost_at(v.type, sizes) for v in wrt)
        assert tl.cost(adj, **only(adj)) + t_adj_in + t_adj_out <= 4 * (c + t_i + t_o)


@pytest.mark.parametrize("make", [lambda: _deconv()[0], lambda: _qform()[0], lambda: _trace_program(3)[0], lambda: _dot_program()[0]],
                         ids=["deconv", "qform", "trace3", "dot"])
def test_theorem_6_55_symbolically_on_the_paper_examples(make):
    from tensorlang.cost_symbolic import symbolic_io_cost
    from tensorlang.passes.pipeline import normalize

    prog = make()
    ssa = normalize(prog)
    wrt = _wrt(prog)
    adj = tl.adjoint(prog, wrt=wrt)
    D = total_derivative(ssa, tangent_inputs(ssa, wrt))
    slack_io = sympy.expand(4 * symbolic_io_cost(ssa) - symbolic_io_cost(adj))
    slack_d = sympy.expand(4 * tl.symbolic_cost(ssa) - tl.symbolic_cost(D))
    print("4·io(e) - io(DT e) =", slack_io, ";  4·cost(e) - cost(D e) =", slack_d)
    for slack in (slack_io, slack_d):
        syms = sorted(slack.free_symbols, key=str)
        for vals in np.ndindex(*([10] * len(syms))):
            assert slack.subs({s: v + 1 for s, v in zip(syms, vals)}) >= 0


_ = PairT


def test_pair_input_and_pair_output_through_the_api():
    n = tl.size("n")
    v = tl.var("v", tl.pair_type(tl.ir.tensor_type([n]), tl.ir.tensor_type([n])))
    w = tl.tensor("w", n)
    f = tl.pair(tl.gen(n, lambda i: tl.proj(v, 0)[i] * w[i]),
                tl.sum(n, lambda i: tl.proj(v, 1)[i] * tl.proj(v, 0)[i]))
    a, b, wv = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -3.0]), np.array([2.0, 3.0, 4.0])
    dM, dL = np.array([1.0, -2.0, 0.5]), 2.0
    for mode in ("sparse", "naive"):
        (ga, gb), gw = tl.vjp(f, wrt=[v, w], mode=mode)(v=(a, b), w=wv, dy=(dM, dL))
        np.testing.assert_allclose(ga, dM * wv + dL * b, rtol=1e-12)
        np.testing.assert_allclose(gb, dL * a, rtol=1e-12)
        np.testing.assert_allclose(gw, dM * a, rtol=1e-12)
    (va, tan) = tl.jvp(f, wrt=[w])(v=(a, b), w=wv, dw=np.ones(3))
    np.testing.assert_allclose(tan[0], a, rtol=1e-12)
    assert tan[1] == 0.0


def test_theorem_6_55_when_a_broadcast_scalar_is_summed_inside_a_gen():
    # found by the random-program property above (session 3, fresh-clone CI rehearsal): the
    # adjoint summed dy over a binder its summand does not use, sum[i,j] sum[k:n+1] dy[i,j],
    # one reduction per k (397 > 4·56 at n = 7).  Rules 6.48/6.49 now sum the used binders
    # once and the unused ones outermost (passes/adjoint_rules.reduction).
    from tests.counting import counting_cost, total

    n, m = tl.size("n"), tl.size("m")
    s0 = tl.scalar("s0")
    x1 = tl.tensor("x1", n, n)
    e = tl.gen(n, lambda i: tl.gen(n, lambda i2: tl.sum(n + 1, lambda j: s0) + tl.iverson(i < m, x1[i, i])))
    adj = tl.adjoint(e, wrt=[s0, x1], cotangent="dy")
    ssa = tl.normalize(e)
    for nn, mm in ((1, 1), (2, 1), (3, 2), (7, 1), (9, 4)):
        primal, grad = total(counting_cost(ssa, n=nn, m=mm)), total(counting_cost(adj, n=nn, m=mm))
        assert (tl.cost(ssa, n=nn, m=mm), tl.cost(adj, n=nn, m=mm)) == (primal, grad)
        assert grad <= 4 * primal
    assert total(counting_cost(adj, n=7, m=1)) == 61  # hand count: 6 (dx1') + 48 (sum dy) + 7 (sum over k)
    # the value, against NumPy: ds0 = (n + 1)·sum(dy), dx1[k, k] = [k < m]·sum_j dy[k, j]
    rng = np.random.default_rng(3)
    dy = rng.normal(size=(5, 5))
    ds0, dx1 = tl.evaluate(adj, dy=dy, n=5, m=3)  # linear: the primal inputs do not occur
    np.testing.assert_allclose(ds0, 6 * dy.sum(), rtol=1e-12)
    np.testing.assert_allclose(dx1, np.diag([dy[k].sum() if k < 3 else 0.0 for k in range(5)]), rtol=1e-12, atol=1e-15)


def test_theorem_6_55_when_the_unused_binder_sits_under_a_selective_bracket():
    # the proofs corpus (random scalar #27, session 4): the first fix of the test above summed
    # the unused binder j at every element of dx6, where the primal's bracket selects one:
    # (n+m-1)²·(2n-1) additions against m·(2n-1).  The unused sum now keeps the bracket's support.
    from tests.counting import counting_cost, total

    n, m = tl.size("n"), tl.size("m")
    x6 = tl.tensor("x6", n + m, n + m)
    e = tl.gen(m, lambda i: tl.sum(2 * n, lambda j: tl.iverson(2 * i + 1 < n + m, x6[1, 2 * i + 1])))
    adj = tl.adjoint(e, wrt=[x6], cotangent="dy", simplify=False)
    ssa = tl.normalize(e)
    for nn, mm in ((1, 1), (5, 1), (3, 4), (6, 2)):
        primal, grad = total(counting_cost(ssa, n=nn, m=mm)), total(counting_cost(adj, n=nn, m=mm))
        assert tl.cost(adj, n=nn, m=mm) == grad <= 4 * primal
    dy = np.array([0.5, -2.0, 3.0])
    got = tl.evaluate(adj, dy=dy, x6=np.ones((5, 5)), n=2, m=3)  # the unsimplified adjoint keeps the primal
    want = np.zeros((5, 5))
    for i in range(3):
        if 2 * i + 1 < 5:
            want[1, 2 * i + 1] += 4 * dy[i]  # summed over j < 2n = 4
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("make", [tl.grad, tl.value_and_grad, tl.vjp])
def test_wrt_an_input_the_loss_does_not_read_is_refused_when_built(make):
    """A reverse-mode ``wrt`` input the program never reads was accepted, and
    then every call was refused ("unknown input 'w'"; without w, its size was
    unbound): it is refused where it is named, with the program's inputs."""
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    loss = tl.sum(n, lambda i: x[i] * x[i])
    with pytest.raises(tl.TensorLangError, match=r"input w, which the program does not read .*\['x'\]"):
        make(loss, wrt=[x, w])
    f = make(loss, wrt=[x])  # the inputs it reads still work
    assert f is not None


def test_jvp_takes_the_tangent_of_an_input_the_loss_does_not_read():
    """Forward mode needs only the tangent: it contributes nothing."""
    n, m = tl.size("n"), tl.size("m")
    x, w = tl.tensor("x", n), tl.tensor("w", m)
    loss = tl.sum(n, lambda i: x[i] * x[i])
    val, tan = tl.jvp(loss, wrt=[x, w])(x=np.arange(3.0), dx=np.ones(3), dw=np.ones(4))
    assert val == 5.0 and tan == 6.0  # <2x, dx>


def test_wrt_an_input_a_loop_does_not_read_is_refused_when_built():
    n = tl.size("n")
    x, w = tl.tensor("x", n), tl.tensor("w", n)
    uT = tl.loop(3, x, lambda t, u: tl.gen(n, lambda i: 0.5 * u[i]))
    loss = tl.sum(n, lambda i: uT[i] * uT[i])
    with pytest.raises(tl.TensorLangError, match="input w, which the program does not read"):
        tl.grad(loss, wrt=[x, w])
    g = tl.grad(loss, wrt=x)
    xs = np.arange(4.0)
    assert np.allclose(g(x=xs), 2 * 0.125 ** 2 * xs)
