"""Horizontal fusion (backend/hfuse.py) and column partial sums
(backend/colsum.py) in the serial kernel (issue #17, heat adjoint).

Structure is checked on the kernel IR (counts of loop nests, which nest holds
which statement), never on time; values against NumPy, the reference
evaluator, and the unfused kernel run as plain Python.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.backend import codegen, colsum
from tensorlang.backend import kir as K
from tensorlang.driver import python_kernel  # the route "compile", run as plain Python
from tensorlang.backend.colsum import column_sums
from tensorlang.backend.hfuse import fuse_nests
from tensorlang.backend.loopir import AccAdd, Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


n = tl.size("n")


def heat_step_adjoint():
    """The adjoint of one heat step w.r.t. the state and κ (what the loop's reverse sweep runs)."""
    u, kappa = tl.tensor("u", n, n), tl.scalar("kappa")
    step = tl.gen([n, n], lambda i, j: u[i, j] + kappa * (
        tl.iverson(i >= 1, u[i - 1, j]) + tl.iverson(i + 1 <= n - 1, u[i + 1, j])
        + tl.iverson(j >= 1, u[i, j - 1]) + tl.iverson(j + 1 <= n - 1, u[i, j + 1]) - 4 * u[i, j]))
    return tl.adjoint(step, [u, kappa], cotangent="du")


def _lap(v):
    out = -4.0 * v
    out[1:, :] += v[:-1, :]
    out[:-1, :] += v[1:, :]
    out[:, 1:] += v[:, :-1]
    out[:, :-1] += v[:, 1:]
    return out


def _nests(stmts) -> list:
    """The statements not nested in a loop that hold a loop."""
    return [s for s in stmts if isinstance(s, Loop) or (isinstance(s, If) and any(
        isinstance(x, Loop) for x in walk_stmts([s])))]


def _stores(s) -> set:
    return {x.array for x in walk_stmts([s]) if isinstance(x, Store)}


def _accs(s) -> set:
    return {x.target for x in walk_stmts([s]) if isinstance(x, AccAdd)}


def test_heat_adjoint_reduction_and_stencil_share_their_loop_nests():
    ir, _ = tl.compile(heat_step_adjoint()).lowered()
    out = ir.results[0]
    before = _nests(ir.body)
    # dκ's reduction and du's stencil (κ·du factored into it: fusion.py, no
    # temporary), each over the grid, peeled by isl into 3 nests (row 0, interior, last row)
    red = [s for s in before if _accs(s)]
    gen = [s for s in before if out in _stores(s)]
    assert len(red) == 3 and len(gen) == 3 and len(before) == 6
    assert not [a for a in walk_stmts(ir.body) if isinstance(a, Alloc) and a.role == "temporary"]
    fused = fuse_nests(ir)
    after = _nests(fused.body)
    assert len(after) == 3
    both = [s for s in after if _accs(s) and out in _stores(s)]
    assert len(both) == 3  # every reduction nest now also writes the output
    # one innermost loop does both (dκ's term and du's element) per piece:
    # row 0, the interior rows' inner loop, the last row
    inner = [m for s in both for m in walk_stmts([s]) if isinstance(m, Loop)
             and not any(isinstance(x, Loop) for x in walk_stmts(m.body))
             and _accs(m) and out in _stores(m)]
    assert len(inner) == 3
    # ... the interior one with column partial sums (no scalar chain: SIMD lanes)
    cols = column_sums(fused)
    arrays = {a.name for a in walk_stmts(cols.body) if isinstance(a, Alloc) and a.role == "temporary"}
    colloops = [m for m in walk_stmts(cols.body) if isinstance(m, Loop) and out in _stores(m)
                and _stores(m) & arrays and not _accs(m)]
    assert len(colloops) == 1
    # the parallel variant is not fused (a prange per gen nest)
    assert codegen.source(ir, "float64").count("def kernel_parallel") == 1


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_heat_adjoint_values(size):
    rng = np.random.default_rng(size)
    u, du = rng.normal(size=(size, size)), rng.normal(size=(size, size))
    kappa = 0.2
    want_u = du + kappa * _lap(du)  # the 5-point Laplacian with zero boundaries is symmetric
    want_k = float((du * _lap(u)).sum())
    for run in (python_kernel(heat_step_adjoint()), tl.compile(heat_step_adjoint())):
        got_u, got_k = run(u=u, du=du, kappa=kappa)
        np.testing.assert_allclose(got_u, want_u, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(got_k, want_k, rtol=1e-12, atol=1e-12)


# -- scaled copies (fusion.py): c·Y[g] substituted with c factored out ----------------------


def _fused_lets(e):
    from tensorlang.backend.lower import fused_program
    from tensorlang.driver import prepare  # the route "compile" up to the kernel

    p = prepare(e)
    f = fused_program(p)
    return tl.ir.lets(f)[0], f


def test_scaled_copy_is_factored_into_its_consumer_without_extra_work():
    binds, f = _fused_lets(heat_step_adjoint())
    assert len(binds) == 2  # dκ's sum and du's gen: κ·du is not materialised
    e = heat_step_adjoint()
    for sizes in (dict(n=1), dict(n=6), dict(n=50)):
        # never more work (adjoint_reuse.py then writes dκ over the same stencil as du's: at n = 1
        # a bracketed term the original summed is empty there, one addition fewer)
        assert tl.cost(tl.explicit_sharing(f), **sizes) <= tl.cost(tl.explicit_sharing(e), **sizes)


def _scaled_programs():
    """(program, still materialised?): where factoring applies, and where it must not."""
    m = tl.size("m")
    x, c, z = tl.tensor("x", n), tl.scalar("c"), tl.tensor("z", m)
    sh = lambda v, i: tl.iverson(i + 1 <= n - 1, v[i + 1])  # noqa: E731

    def scaled(consumer):
        return tl.let(tl.gen(n, lambda i: c * x[i]), consumer)

    one = scaled(lambda y: tl.gen(n, lambda i: x[i] + y[i] * 3 + sh(y, i)))
    two = scaled(lambda y: tl.pair(tl.gen(n, lambda i: y[i] + sh(y, i)), tl.gen(n, lambda i: x[i] + sh(y, i))))
    other = scaled(lambda y: tl.gen(m, lambda i: tl.iverson(i + 1 <= n - 1, y[i] + y[i + 1]) + z[i]))  # another domain
    nested = scaled(lambda y: tl.gen(n, lambda i: x[i] + y[i] * (sh(y, i) + 1)))  # not one factor per term
    return [(one, False), (two, True), (other, True), (nested, True)]


@pytest.mark.parametrize("k", range(4))
def test_scaled_copy_only_where_it_adds_no_work(k, monkeypatch):
    # this rule alone: the shifted-stencil rule (backend/shifted.py) would
    # substitute the copies read at i and i + 1 too, and roll them in the
    # kernel (test_shifted_fusion.py), adding work to the let-program's count
    from tensorlang.backend import shifted

    monkeypatch.setattr(shifted, "MAX_OPS", -1)
    e, kept = _scaled_programs()[k]
    binds, f = _fused_lets(e)
    from tensorlang.backend.fusion import _scale_of

    scaled = [r for _, r in binds if tl.ir.gens(r)[0] and _scale_of(tl.ir.gens(r)[1]) is not None]
    assert bool(scaled) == kept
    sizes = {"n": 5, "m": 7}
    assert tl.cost(tl.explicit_sharing(f), **sizes) <= tl.cost(tl.explicit_sharing(e), **sizes)
    rng = np.random.default_rng(k)
    ins = {"x": rng.normal(size=5), "c": 0.7, "z": rng.normal(size=7)}
    ins = {nm: v for nm, v in ins.items() if nm in {u.name for u in tl.ir.input_vars(e)}}
    want = tl.evaluate(e, **ins)
    got = python_kernel(e)(**ins)
    for a, b in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


# -- hand-built kernel IR: what may and may not fuse --------------------------------------


def N(x):
    return K.Name(x)


def L(arr, *ix):
    return K.Load(arr, tuple(ix))


def _ir(body, results) -> KernelIR:
    return KernelIR(["n", "x"], [], list(body), list(results))


def _run(ir, n_=6):
    """The serial kernel's printed source run as plain Python."""
    src = codegen.source(ir, "float64", cache=False)
    ns: dict = {}
    exec(compile(src, "<kernel>", "exec"), ns)
    return ns["kernel_serial"].py_func(n_, np.arange(1.0, n_ + 2.0))


def _alloc(name):
    return Alloc(name, (N("n"),), False, "output", name)


def _gen(var, arr, value, lo=K.Int(0), hi=None):
    hi = N("n") if hi is None else hi
    return Loop(var, lo, hi, 1, (Store(arr, (N(var),), value),), "gen")


def test_independent_nests_fuse_and_keep_values():
    ir = _ir([_alloc("y"), _alloc("z"),
              _gen("i", "y", K.FMul(L("x", N("i")), K.Float(2.0))),
              _gen("j", "z", K.FSum((L("x", N("j")), K.Float(1.0))))], ["y", "z"])
    f = fuse_nests(ir)
    assert len(_nests(f.body)) == 1 and _stores(_nests(f.body)[0]) == {"y", "z"}
    y, z = _run(ir)
    np.testing.assert_array_equal(y, 2.0 * np.arange(1.0, 7.0))
    np.testing.assert_array_equal(z, np.arange(1.0, 7.0) + 1.0)


def test_dependent_nests_stay_apart():
    # z[j] reads y[j + 1]: written by a later iteration of the first nest
    ir = _ir([_alloc("y"), _alloc("z"),
              _gen("i", "y", K.FMul(L("x", N("i")), K.Float(2.0))),
              _gen("j", "z", L("y", K.IBin("%", K.IBin("+", N("j"), K.Int(1)), N("n"))))], ["y", "z"])
    assert len(_nests(fuse_nests(ir).body)) == 2
    y, z = _run(ir)
    np.testing.assert_array_equal(z, np.roll(y, -1))


def test_other_bounds_or_a_reader_between_keep_nests_apart():
    other = _ir([_alloc("y"), _alloc("z"), _gen("i", "y", L("x", N("i"))),
                 _gen("j", "z", L("x", N("j")), lo=K.Int(1))], ["y", "z"])
    assert len(_nests(fuse_nests(other).body)) == 2
    # a statement between reads y: the first nest cannot move below it
    between = _ir([_alloc("y"), _alloc("z"), _gen("i", "y", L("x", N("i"))), Assign("s", L("y", K.Int(0))),
                   _gen("j", "z", K.FMul(L("x", N("j")), N("s")))], ["y", "z"])
    assert len(_nests(fuse_nests(between).body)) == 2
    # ... while a statement that does not touch the first nest's names lets it move down
    free = _ir([_alloc("y"), _alloc("z"), _gen("i", "y", L("x", N("i"))), Assign("s", L("x", K.Int(0))),
                _gen("j", "z", K.FMul(L("x", N("j")), N("s")))], ["y", "z"])
    assert len(_nests(fuse_nests(free).body)) == 1
    y, z = _run(free)
    np.testing.assert_array_equal(z, np.arange(1.0, 7.0))


def test_a_reduction_fused_with_a_gen_keeps_its_value():
    body = [Assign("acc", K.Float(0.0)), _alloc("y"),
            Loop("i", K.Int(0), N("n"), 1, (AccAdd("acc", K.FMul(L("x", N("i")), L("x", N("i")))),), "sum"),
            _gen("j", "y", K.FNeg(L("x", N("j"))))]
    ir = _ir(body, ["y", "acc"])
    # a 1-D reduction fused with a gen would lose codegen's lanes, and has no
    # outer loop for column sums: it stays apart
    assert len(_nests(fuse_nests(ir).body)) == 2
    y, acc = _run(ir)
    assert acc == float((np.arange(1.0, 7.0) ** 2).sum())


# -- values: a reduction and gens over one 2-D domain ---------------------------------------


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 5), st.integers(0, 5), st.lists(st.sampled_from([-1, 0, 1]), min_size=4, max_size=4),
       st.booleans())
def test_sum_and_gen_over_one_domain_match_the_evaluator(nn, mm, sh, guard):
    m = tl.size("m")
    a, b, c = tl.tensor("a", n, m), tl.tensor("b", n, m), tl.scalar("c")

    def at(x, i, j, di, dj):
        conds = (i + di >= 0) & (i + di <= n - 1) & (j + dj >= 0) & (j + dj <= m - 1)
        return tl.iverson(conds, x[i + di, j + dj]) if (di or dj) else x[i, j]

    s = tl.sum([n, m], lambda i, j: a[i, j] * (at(b, i, j, sh[0], sh[1]) - 2 * b[i, j]))
    g = tl.gen([n, m], lambda i, j: b[i, j] + c * at(a, i, j, sh[2], sh[3]) + (tl.iverson(i >= 1, a[i - 1, j]) if guard else 0))
    prog = tl.pair(g, s)
    rng = np.random.default_rng(nn * 7 + mm)
    ins = {"a": rng.normal(size=(nn, mm)), "b": rng.normal(size=(nn, mm)), "c": 0.3}
    want = tl.evaluate(prog, **ins)
    got = python_kernel(prog)(**ins)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cap", [colsum.MAX_COLUMNS, 2])
def test_column_sums_and_their_fallback(monkeypatch, cap):
    """A 2-D sum with column partial sums (with the cap at 2 columns, a row's tail beyond them adds into the scalar) against NumPy."""
    monkeypatch.setattr(colsum, "MAX_COLUMNS", cap)
    m = tl.size("m")
    a = tl.tensor("a", n, m)
    prog = tl.sum([n, m], lambda i, j: a[i, j] * a[i, j])
    k = python_kernel(prog)
    src = codegen.source(k.lowered()[0], "float64")
    assert f"_imin(n0, {cap})" in src  # at most cap columns; a longer row's tail adds into the scalar
    for shape in [(0, 3), (3, 0), (1, 1), (4, 5), (6, 2)]:
        x = np.random.default_rng(sum(shape)).normal(size=shape)
        np.testing.assert_allclose(k(a=x), (x * x).sum(), rtol=1e-13)


def test_a_bracket_above_a_shadowing_binder_speaks_of_the_outer_index():
    # gen[i:n] [i < m]·(gen[i:n] x[i]) with x of extent m: the bracket bounds
    # the outer i, not the inner one that x is read at, so the use of x there
    # is not provably in range and must not be fused (the site scope used to
    # give the bracket to the innermost binder of i, and proved it)
    import tensorlang as tl
    from tensorlang.backend.domains import Scope
    from tensorlang.backend.fusion import _Uses, _collect, _in_bounds_site
    from tensorlang.ir import Access, Cmp, Gen, Iverson, as_aff, sym_aff

    n, m = tl.size("n"), tl.size("m")
    x = tl.tensor("x", m)
    i = tl.gen(n, lambda k: x[0]).var
    sizes = {v: v.name for v in as_aff(n).size_vars() | as_aff(m).size_vars()}
    base = Scope(sizes, ["n", "m"], ["0 <= n", "0 <= m"], {"positive": ["n", "m"], "needs_positive": False, "checks": []})
    below = Cmp("<", sym_aff(i), as_aff(m))

    def site(e):
        acc = _Uses()
        _collect(e, x, 1, [], [], acc)
        assert len(acc.sites) == 1 and not acc.other
        return acc.sites[0]

    read = Access(x, sym_aff(i))
    shadowed = Gen(i, as_aff(n), Iverson(below, Gen(i, as_aff(n), read)))
    assert not _in_bounds_site(site(shadowed), [as_aff(m)], base)
    # the same bracket directly around the read does bound it
    direct = Gen(i, as_aff(n), Gen(i, as_aff(n), Iverson(below, read)))
    assert _in_bounds_site(site(direct), [as_aff(m)], base)
