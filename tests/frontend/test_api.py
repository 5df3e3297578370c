"""The Python API of DESIGN.md ("Public API"): what each constructor builds."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import tensorlang as tl
from tensorlang.ir import (
    REAL, Access, Add, Call, Const, Exists, Gen, IndexVar, Iverson, Let, Mul, Pair, Proj, Rel, SizeVar, Sum, TensorT,
    Var, sym_aff,
)

n, m = tl.sizes("n m")


def test_sizes_and_inputs():
    assert tl.size("n") is n
    assert all(a is b for a, b in zip(tl.sizes("n, m"), (n, m)))
    x = tl.tensor("x", n + m - 1)
    assert isinstance(x, Var) and x.uid == 0 and x.type is TensorT(n + m - 1, REAL)
    A = tl.tensor("A", n, n)
    assert A.type is TensorT(n, TensorT(n, REAL))
    s = tl.scalar("s")
    assert s.type is REAL
    p = tl.var("p", tl.pair_type(tl.tensor_of([n]), tl.Real))
    assert p.type.fst is TensorT(n, REAL)
    assert tl.tensor("c", 3).type is TensorT(3, REAL)


def test_gen_and_sum_nest_with_lists_and_use_parameter_names():
    A = tl.tensor("A", n, m)
    g = tl.gen([n, m], lambda row, col: A[row, col])
    assert isinstance(g, Gen) and isinstance(g.body, Gen)
    assert g.var.name == "row" and g.body.var.name == "col"
    assert g.extent is n and g.body.extent is m
    s = tl.sum([n, m], lambda i, j: A[i, j])
    assert isinstance(s, Sum) and isinstance(s.body, Sum)
    assert tl.type_of(g) is A.type and tl.type_of(s) is REAL


def test_binders_get_fresh_symbols():
    x = tl.tensor("x", n)
    a, b = tl.gen(n, lambda i: x[i]), tl.gen(n, lambda i: x[i])
    assert isinstance(a.var, IndexVar) and a.var is not b.var and a.var.name == b.var.name == "i"


def test_access_with_several_indices_and_affine_arithmetic():
    A = tl.tensor("A", n, m)
    e = tl.gen(n, lambda i: A[i, m - 1])
    body = e.body
    assert isinstance(body, Access) and isinstance(body.arr, Access)
    assert body.index is m - 1 and body.arr.index is sym_aff(e.var)


def test_iverson_exists_and_relations():
    x = tl.tensor("x", n)
    R = tl.relation("R", n, m)
    e = tl.gen(n, lambda i: tl.iverson(tl.exists(m, lambda k: R(i, k)) & (i > 0), x[i]))
    br = e.body
    assert isinstance(br, Iverson)
    ex = br.pred.lhs
    assert isinstance(ex, Exists) and ex.extent is m and isinstance(ex.body, Rel) and ex.body.rel is R
    assert R.extents[0] is n and R.extents[1] is m
    nested = tl.exists([n, m], lambda a, b: R(a, b))
    assert isinstance(nested, Exists) and isinstance(nested.body, Exists)
    assert tl.iverson(True, x) is Iverson(tl.ir.TRUE, x)  # Python booleans are literals


def test_let_pair_proj():
    x, s = tl.tensor("x", n), tl.scalar("s")
    e = tl.let(tl.pair(x, s), lambda p: tl.proj(p, 1) * tl.proj(p, 0)[0])
    assert isinstance(e, Let) and e.var.name == "p" and e.var.uid > 0
    assert e.var.type is tl.pair_type(x.type, REAL)
    assert isinstance(e.value, Pair)
    assert isinstance(e.body.lhs, Proj) and e.body.lhs.index == 1
    assert tl.evaluate(e, x=np.array([2.0]), s=3.0) == 6.0


def test_operators_build_the_core_forms():
    a, b = tl.scalar("a"), tl.scalar("b")
    assert (a + b) is Add(a, b)
    assert (a * b) is Mul(a, b)
    assert (a - b) is Add(a, Mul(Const(-1), b))
    assert (-a) is Mul(Const(-1), a)
    assert (a + 1) is Add(a, Const(1)) and (1 + a) is Add(Const(1), a)
    assert (2 * a) is Mul(Const(2), a)
    assert (a**2) is Mul(a, a)
    assert (a**1) is a
    assert (a / b) is Call("div", (a, b)) and (1 / a) is Call("div", (Const(1), a))
    assert (a**3) is Call("pow[3]", (a,))
    assert (a**0.5) is Call("pow[0.5]", (a,))
    assert +a is a


def test_scalar_functions_and_registry():
    a = tl.scalar("a")
    for f in (tl.exp, tl.log, tl.sin, tl.cos, tl.tanh, tl.sqrt, tl.sigmoid):
        e = f(a)
        assert isinstance(e, Call) and e.fn == f.__name__ and e.args == (a,)
    assert tl.div(a, 2) is Call("div", (a, Const(2)))
    assert tl.power(a, 3) is a**3


def test_registered_function_partials_are_ir():
    from tensorlang.functions import lookup

    f = tl.register_function(
        "test_api_cube", 1, numpy=lambda v: v**3, sympy=lambda v: v**3, partials=lambda v: (3 * v * v,), replace=True)
    a = tl.scalar("a")
    e = f(a)
    assert isinstance(e, Call) and e.fn == "test_api_cube"
    (d,) = lookup("test_api_cube").partials(a)
    assert d is (3 * a) * a
    assert tl.evaluate(d, a=2.0) == 12.0
    assert tl.evaluate(e, a=sympy.Symbol("a")) == sympy.Symbol("a") ** 3
    with pytest.raises(tl.TensorLangError, match="takes 1 argument"):
        f(a, a)
    with pytest.raises(tl.TensorLangError, match="already registered"):
        tl.register_function("test_api_cube", 1, numpy=np.cbrt, sympy=sympy.cbrt, partials=lambda v: (v,))
    with pytest.raises(tl.TensorLangError, match="partial"):
        g = tl.register_function("test_api_bad", 1, numpy=np.sin, sympy=sympy.sin,
                                 partials=lambda v: (tl.gen(n, lambda i: v),), replace=True)
        lookup("test_api_bad").partials(g(a).args[0])


def test_builtin_partials_match_sympy_derivatives():
    """The registry's partial derivatives (IR) equal sympy's derivative of the sympy implementation."""
    from tensorlang.functions import lookup

    a, b = tl.scalar("a"), tl.scalar("b")
    sa, sb = sympy.Symbol("a", positive=True), sympy.Symbol("b", positive=True)
    for name, args in [("exp", (a,)), ("log", (a,)), ("sin", (a,)), ("cos", (a,)), ("tanh", (a,)), ("sqrt", (a,)),
                       ("sigmoid", (a,)), ("div", (a, b)), ("pow[3]", (a,)), ("pow[-2]", (a,)), ("pow[0.5]", (a,))]:
        fd = lookup(name)
        sym_args = (sa, sb)[: len(args)]
        f = fd.sympy(*sym_args)
        for k, p in enumerate(fd.partials(*args)):
            env = {"a": sa, "b": sb}
            got = tl.evaluate(p, **{v.name: env[v.name] for v in tl.ir.free_vars(p)})
            want = sympy.diff(f, sym_args[k])
            assert sympy.simplify(got - want) == 0, (name, k, got, want)


def test_constants_and_python_numbers_lift():
    a = tl.scalar("a")
    assert (a + np.float64(0.5)) is Add(a, Const(0.5))
    assert (a * np.int64(3)) is Mul(a, Const(3))
    assert tl.const(2) is Const(2)


def test_public_names():
    for name in ["size", "sizes", "tensor", "scalar", "gen", "sum", "iverson", "exists", "relation", "let", "pair",
                 "proj", "exp", "log", "sin", "cos", "tanh", "sqrt", "sigmoid", "evaluate", "TensorLangError",
                 "register_function", "var", "pair_type", "tensor_of", "alpha_eq", "subst", "explicit_sharing",
                 "pretty", "type_of"]:
        assert hasattr(tl, name), name


_ = (SizeVar,)


def test_the_readme_tour_runs(capsys):
    """The ```python blocks of README.md run as written, in order, as one session
    (the API tour stays true)."""
    import pathlib
    import re

    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    assert blocks, "README.md has no python example"
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
