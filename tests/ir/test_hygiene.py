"""Hygiene property (issue 12, items 2 and 6): random programs whose every
user-chosen name is adversarial (Unicode, names equal to the kernels' own
generated names and module globals, names that sanitize alike, names of loop
variables, empty and punctuated names), with awkward constants, guards with
huge offsets and deep nesting, compile to kernels that agree with the
reference evaluator.

Budget: 150 programs run the generated source as plain Python (the same
source Numba compiles, ``python_kernel``), 10 more through Numba.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.driver import python_kernel  # the route "compile", run as plain Python
from tensorlang.backend.prepare import deep_recursion  # the reference evaluator recurses as deep
from tensorlang.functions import power_name
from tensorlang.ir import (
    REAL,
    Access,
    Add,
    Call,
    Cmp,
    Const,
    Gen,
    Iverson,
    Let,
    Mul,
    Rel,
    Relation,
    Sum,
    Var,
    as_aff,
    fresh_index,
    fresh_var,
    sym_aff,
    tensor_type,
)

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# what the old backend generated (a_, sz_, rel_, t_, s_, acc_), what the new
# one generates (x0, n0, i0, v0, t0, r0_d, u0), module globals, isl's names
# (c0, e1, p_n), Unicode that sanitized alike, punctuation, the empty name
ADVERSARIAL = [
    "x", "x_2", "a_x", "a_x_2", "xα", "xβ", "x_", "x0", "x1", "n0", "i0", "v0", "t0", "r0_d", "u0",
    "F", "U", "np", "numba", "prange", "kernel_serial", "_function", "c0", "e1", "p_n", "sz_n",
    "rel_R", "acc_1", "名前", "ñ", "x'", "a b", "", "i", "j",
]
IDENT = [a for a in ADVERSARIAL if a.isidentifier()]  # sizes must be identifiers
CONSTS = [0.1, -2.5, 1 / 3, 1e-8, 12345.678, 2.0**-40, 3.0, 0.0, -1.0, 1.0]


class Ctx:
    def __init__(self, sizes, a, b, s, rel):
        self.sizes, self.a, self.b, self.s, self.rel = sizes, a, b, s, rel


@st.composite
def hygienic_programs(draw):
    names = draw(st.permutations(ADVERSARIAL))
    size_names = draw(st.lists(st.sampled_from(IDENT), min_size=2, max_size=2, unique=True))
    names = [x for x in names if x not in size_names]
    n1, n2 = tl.size(size_names[0]), tl.size(size_names[1])
    a = Var(names[0], 0, tensor_type([n1]))
    b = Var(names[1], 0, tensor_type([n2]))
    s = Var(names[2], 0, REAL)
    rel = Relation(names[3], (as_aff(n1), as_aff(n2)))
    ctx = Ctx((n1, n2), a, b, s, rel)
    budget = [draw(st.integers(8, 30))]
    env: list = []  # (IndexVar, 0 for n1 / 1 for n2)

    def index_name():
        return draw(st.sampled_from(ADVERSARIAL))

    def scalar(depth):
        budget[0] -= 1
        kinds = ["const", "s", "acc"] if depth <= 0 or budget[0] <= 0 else \
            ["const", "s", "acc", "add", "mul", "fn", "pow", "sum", "bracket", "let", "deep", "guard"]
        k = draw(st.sampled_from(kinds))
        if k == "const":
            return Const(draw(st.sampled_from(CONSTS)))
        if k == "s":
            return s
        if k == "acc":
            if not env:
                return s
            i, w = draw(st.sampled_from(env))
            return Access(a if w == 0 else b, sym_aff(i))
        if k == "add":
            return Add(scalar(depth - 1), scalar(depth - 1))
        if k == "mul":
            return Mul(scalar(depth - 1), scalar(depth - 1))
        if k == "fn":
            return Call(draw(st.sampled_from(["tanh", "sin", "sigmoid"])), (scalar(depth - 1),))
        if k == "pow":
            p = draw(st.sampled_from([2, 3, -2]))
            base = Add(Const(1.5), Call("tanh", (scalar(depth - 1),)))  # in (0.5, 2.5): finite powers
            return Call(power_name(p), (base,))
        if k == "sum":
            w = draw(st.integers(0, 1))
            i = fresh_index(index_name())
            env.append((i, w))
            body = scalar(depth - 1)
            env.pop()
            return Sum(i, as_aff(ctx.sizes[w]), body)
        if k == "bracket":
            body = scalar(depth - 1)
            i1 = [i for i, w in env if w == 0]
            i2 = [i for i, w in env if w == 1]
            if i1 and i2:
                p = Rel(rel, (sym_aff(draw(st.sampled_from(i1))), sym_aff(draw(st.sampled_from(i2)))))
            elif env:
                i, _ = draw(st.sampled_from(env))
                p = Cmp("<=", sym_aff(i), as_aff(draw(st.integers(0, 3))))
            else:
                p = Cmp("<=", as_aff(1), as_aff(ctx.sizes[0]))
            return Iverson(p, body)
        if k == "guard":  # offsets far beyond any size (2**40): decided by isl, never printed
            if not env:
                return scalar(depth - 1)
            i, w = draw(st.sampled_from(env))
            off = draw(st.sampled_from([2**62, 2**41 + 7, -(2**62)]))  # |c| <= 2**62 is the language's limit
            return Iverson(Cmp("<", sym_aff(i) + as_aff(off), as_aff(ctx.sizes[w])), scalar(depth - 1))
        if k == "let":
            v = fresh_var(index_name(), REAL)
            value = scalar(depth - 1)
            return Let(v, value, Add(v, Mul(v, scalar(depth - 1))))
        # deep: a chain of bounded functions, tens to hundreds of levels
        e = scalar(depth - 1)
        for _ in range(draw(st.sampled_from([20, 60, 150]))):
            e = Add(Call("tanh", (e,)), Const(0.25))
        return e

    if draw(st.booleans()):
        i = fresh_index(index_name())
        env.append((i, 0))
        prog = Gen(i, as_aff(n1), scalar(4))
    else:
        prog = scalar(4)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    v1, v2 = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    inputs = {a.name: rng.uniform(-1, 1, v1), b.name: rng.uniform(-1, 1, v2), s.name: float(rng.uniform(-1, 1)),
              rel.name: rng.random((v1, v2)) < 0.5}
    names_used = {x.name for x in tl.ir.input_vars(prog)} | {r.name for r in tl.ir.relations_of(prog)}
    sizes = {size_names[0]: v1, size_names[1]: v2}
    used_sizes = {z.name for z in tl.ir.size_vars(prog)} | {z.name for r in tl.ir.relations_of(prog) for e in r.extents for z in e.size_vars()}
    kw = {k: v for k, v in inputs.items() if k in names_used}
    kw |= {k: v for k, v in sizes.items() if k in used_sizes}
    return prog, kw


def _agree(out, ref):
    return np.allclose(out, ref, rtol=1e-9, atol=1e-9 * max(1.0, float(np.max(np.abs(ref), initial=0.0))), equal_nan=True)


@settings(max_examples=300, **SETTINGS)
@given(case=hygienic_programs())
def test_adversarial_names_constants_and_depths_lowered(case):
    prog, kw = case
    deep_recursion()
    ref = tl.evaluate(prog, **kw)
    assert _agree(python_kernel(prog)(**kw), ref)


@settings(max_examples=10, **SETTINGS)
@given(case=hygienic_programs())
def test_adversarial_names_constants_and_depths_numba(case):
    prog, kw = case
    deep_recursion()
    ref = tl.evaluate(prog, **kw)
    assert _agree(tl.compile(prog, threads=1)(**kw), ref)


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


@pytest.mark.parametrize("nm", ["ñ", "名前", "xα"])
def test_non_ascii_size_names_reach_isl_spelled_in_ascii(nm):
    """isl reads only ASCII identifiers: a size named ``ñ`` (a Python
    identifier) made every bounds query that needed isl a BoundsError
    (``isl_set_read_from_str failed: syntax error``).  Checked against NumPy
    and the cost counted by hand (3 operations per point, less the sum's
    first addition)."""
    n = tl.size(nm)
    x = tl.tensor("x", n)
    loss = tl.sum(n, lambda i: tl.iverson(i >= 1, x[i - 1]) * x[i])
    X = np.arange(1.0, 6.0)
    np.testing.assert_allclose(tl.grad(loss, wrt=x)(x=X), np.r_[X[1:], 0.0] + np.r_[0.0, X[:-1]])
    assert tl.evaluate(loss, x=X) == float(X[1:] @ X[:-1])
    assert tl.cost(loss, **{nm: 7}) == tl.cost(tl.sum(tl.size("n"), lambda i: tl.iverson(i >= 1, tl.tensor("x", tl.size("n"))[i - 1]) * tl.tensor("x", tl.size("n"))[i]), n=7)
    # a zero size decides the guarded access's reachability through isl (bounds._reachable)
    z = tl.tensor("z", n)
    assert tl.compile(tl.sum(n, lambda i: z[i]) + z[0] * 0.0)(z=np.arange(3.0)) == 3.0
