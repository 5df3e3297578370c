"""The total derivative D⟦e⟧σ (paper §6.2, Fig. 13) and Theorem 6.1.

Oracles: central finite differences (float64) of the program, a NumPy
derivative written by hand, counting let-bindings, and the cost model.
"""

import numpy as np
import pytest
import sympy

import tensorlang as tl
from tensorlang.ir import Var, lets
from tensorlang.passes import rules
from tensorlang.passes.total_derivative import tangent_inputs, total_derivative
from tests import ssa_examples as ex


def _fd(prog, vals, dxs, sizes, h=1e-6):
    plus, minus = dict(vals), dict(vals)
    for k, d in dxs.items():
        plus[k] = ex.unflat_like(ex.flat(vals[k]) + h * ex.flat(d), vals[k])
        minus[k] = ex.unflat_like(ex.flat(vals[k]) - h * ex.flat(d), vals[k])
    return (ex.flat(ex.run(prog, sizes, **plus)) - ex.flat(ex.run(prog, sizes, **minus))) / (2 * h)


def _user_programs():
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    deconv = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    s = tl.scalar("s")
    A = tl.tensor("A", n, n)
    fancy = tl.let(tl.gen(n, lambda i: tl.exp(z[i] * s) + tl.iverson(i > 0, tl.sin(z[i - 1]))),
                   lambda u: tl.sum(n, lambda i: tl.tanh(u[i]) / (1 + u[i] * u[i]) + tl.sqrt(1 + u[i] ** 4)))
    pairy = tl.let(tl.pair(z, tl.gen(n, lambda i: z[i] * s)),
                   lambda p: tl.sum(n, lambda i: tl.proj(p, 0)[i] * tl.proj(p, 1)[i]) + tl.log(1 + s * s))
    matvec = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(j <= i, A[i, j] * z[j])))
    return {
        "deconv": (deconv, [x, c], dict(n=5, m=3)),
        "fancy": (fancy, [z, s], dict(n=4)),
        "pairy": (pairy, [z, s], dict(n=3)),
        "matvec": (matvec, [A, z], dict(n=4)),
    }


@pytest.mark.parametrize("name", ["deconv", "fancy", "pairy", "matvec"])
def test_derivative_of_any_expression_matches_finite_differences(name):
    prog, wrt, sizes = _user_programs()[name]
    rng = np.random.default_rng(11)
    inputs = {v.name: v for v in tl.ir.input_vars(prog)}
    vals = ex.input_values(inputs, sizes, rng)
    D = tl.derivative(prog, wrt=wrt)
    for raw in (False, True):
        D = tl.derivative(prog, wrt=wrt, simplify=raw)
        dxs = {x.name: ex.unflat_like(rng.normal(size=ex.flat(vals[x.name]).size), vals[x.name]) for x in wrt}
        got = ex.flat(ex.run(D, sizes, **vals, **{"d" + k: v for k, v in dxs.items()}))
        np.testing.assert_allclose(got, _fd(prog, vals, dxs, sizes), rtol=1e-6, atol=1e-7)


def test_derivative_tangent_inputs_are_named_and_typed_like_the_inputs():
    prog, wrt, _ = _user_programs()["deconv"]
    D = tl.derivative(prog, wrt=wrt)
    ins = {v.name: v for v in tl.ir.input_vars(D)}
    assert ins["dx"].type is wrt[0].type and ins["dc"].type is wrt[1].type


def test_derivative_refuses_a_clashing_tangent_name():
    x, dx = tl.scalar("x"), tl.scalar("dx")
    with pytest.raises(tl.TensorLangError, match="dx"):
        tl.derivative(x * dx, wrt=[x])


def test_derivative_of_convolution_is_convolution_of_the_tangent():
    # §2.1: D⟦gen[i] sum[j] x[i-j]·c[j]⟧[x ↦ dx] = gen[i] sum[j] dx[i-j]·c[j]
    n, m = tl.sizes("n m")
    x, c = tl.tensor("x", n + m - 1), tl.tensor("c", m)
    f = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    dx = tl.tensor("dx", n + m - 1)
    expected = tl.gen(n, lambda i: tl.sum(m, lambda j: dx[i - j + m - 1] * c[j]))
    assert tl.alpha_eq(tl.derivative(f, wrt=[x]), expected)


def test_user_registered_function_is_differentiated_through_its_partials():
    cube = tl.register_function("cube_h4", 1, lambda a: a ** 3, lambda a: a ** 3,
                                lambda a: (3 * a * a,), replace=True)
    n = tl.size("n")
    z = tl.tensor("z", n)
    prog = tl.sum(n, lambda i: cube(z[i]))
    zv = np.array([0.5, -1.0, 2.0])
    got = tl.evaluate(tl.derivative(prog, wrt=[z]), z=zv, dz=np.ones(3))
    assert got == pytest.approx(float((3 * zv ** 2).sum()))


@pytest.mark.parametrize("name", sorted(ex.EXAMPLES))
def test_on_ssa_one_differential_binding_per_binding_and_correct(name):
    prog, inputs = ex.EXAMPLES[name]()
    wrt = [v for v in inputs.values() if isinstance(v, Var)]
    D = total_derivative(prog, tangent_inputs(prog, wrt))
    b0, _ = lets(prog)
    b1, _ = lets(D)
    assert len(b1) == 2 * len(b0)
    primal = [v for v, _ in b1[0::2]]
    assert primal == [v for v, _ in b0]
    assert all(v.name.startswith("d") for v, _ in b1[1::2])
    sizes = dict(n=4, m=2, N=5)
    rng = np.random.default_rng(5)
    vals = ex.input_values(inputs, sizes, rng)
    dxs = {x.name: ex.unflat_like(rng.normal(size=ex.flat(vals[x.name]).size), vals[x.name]) for x in wrt}
    got = ex.flat(ex.run(D, sizes, **vals, **{"d" + k: v for k, v in dxs.items()}))
    np.testing.assert_allclose(got, _fd(prog, vals, dxs, sizes), rtol=1e-6, atol=1e-7)


def test_every_forward_rule_is_applied():
    with rules.trace() as t:
        for prog, wrt, _ in _user_programs().values():
            total_derivative(prog, tangent_inputs(prog, wrt))
        for make in ex.EXAMPLES.values():
            prog, inputs = make()
            total_derivative(prog, tangent_inputs(prog, [v for v in inputs.values() if isinstance(v, Var)][:1]))
    seen = {num for num, _, _ in t}
    want = {"6.1", "6.2", "6.3", "6.4", "6.5", "6.6", "6.7", "6.8", "6.9", "6.10", "6.11", "6.12", "6.16"}
    assert want <= seen, want - seen


# -- Theorem 6.1 ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ex.EXAMPLES))
def test_theorem_6_1_cost_of_total_derivative(name):
    prog, inputs = ex.EXAMPLES[name]()
    wrt = [v for v in inputs.values() if isinstance(v, Var)]
    D = total_derivative(prog, tangent_inputs(prog, wrt))
    rng = np.random.default_rng(2)
    used = {s.name for s in tl.ir.size_vars(prog)}
    for _ in range(5):
        sizes = {k: int(rng.integers(1, 10)) for k in ("n", "m", "N") if k in used}
        kw = dict(sizes)
        if "R" in inputs:
            kw["R"] = rng.random((sizes["n"], sizes["m"])) < 0.5
        c, cd = tl.cost(prog, **kw), tl.cost(D, **kw)
        assert cd <= 4 * c, (name, sizes, c, cd)
    if "R" not in inputs:
        # symbolically: 4·cost(e) - cost(D e) is non-negative (checked on a grid of sizes)
        diff = sympy.sympify(4 * tl.symbolic_cost(prog) - tl.symbolic_cost(D))
        syms = sorted(diff.free_symbols, key=str)
        for vals in np.ndindex(*([12] * len(syms))):
            assert diff.subs({s: v + 1 for s, v in zip(syms, vals)}) >= 0
