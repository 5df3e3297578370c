"""Size classes (backend/size_classes.py; issue #14 item 6, compile latency).

A kernel whose versions are chosen by size-only tests (short-slab gathers, BLAS
or loops, row fusion) is compiled, per call signature, for the class its
sizes fall in: a test whose value selects the version that is right at every
size (the general side) leaves that side alone in the printed kernel; the
other kind stays a run-time test.  Checked here: which versions the variant a
call runs holds (loop IR, at sizes on both sides of each test: the
deconvolution's gathers at n = 64 and n past RUN_MIN, BLAS at small and large
products), values against NumPy on both sides of every boundary (one kernel
called at one class and then at another, and bitwise equal to the
all-versions kernel at the same sizes), a class variant run at another
class's sizes (still right: nothing dropped was needed there; a NaN in a
matrix still refused), distinct cache entries per class, loaded in a new
kernel without lowering, planned calls that never evaluate the tests again,
and damaged tests in a cache entry that only cost the class.  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import cache as _cache
from tensorlang.backend import kir as K
from tensorlang.backend import size_classes as SC
from tensorlang.backend.blas import BLAS_MIN_WORK, WITNESS_MIN, Gemm
from tensorlang.backend.codegen import printed_ir
from tensorlang.backend.loopir import If, Loop, walk_stmts
from tensorlang.backend.short_slabs import LANES, RUN_MIN, SHORT
from tensorlang.errors import InputError


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")  # the kernel at every size, not the evaluator
    monkeypatch.delenv("TENSORLANG_SIZE_CLASSES", raising=False)


def _workload(name):
    from benchmarks.workloads import BY_NAME

    w = BY_NAME[name]
    loss, v = w.program()
    return w, loss, v


def _kernel(name, threads=1):
    w, loss, v = _workload(name)
    g = tl.grad(loss, wrt=[v[k] for k in w.wrt])
    return w, tl.compile(g.program, threads=threads)


def _deconv_data(n, m, seed=0):
    rng = np.random.default_rng(seed + 31 * n + m)
    return {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}


def _sizes(k, data):
    """The program's sizes at ``data`` (the validated call's)."""
    from tensorlang.evaluator import prepare_inputs

    return prepare_inputs(k.expr, data, exact=False, compressed=True)[1]


def _ran(k, data):
    """The variant a call with ``data`` runs (the plan's), and its class's test values."""
    sizes = _sizes(k, data)
    var = k._sized_variant(k.variant("float64"), "float64", sizes)
    got = SC.size_class(k.spec.get("size_tests"), [sizes[s] for s in k.spec["sizes"]])
    return var, (got[1] if got else None)


def _gathers(run) -> int:
    """The short slabs gathered per tile (short_slabs.py): one dot-product loop each."""
    return sum(1 for s in walk_stmts(run.body) if isinstance(s, Loop) and s.lanes == LANES)


def _gemms(run) -> int:
    return sum(1 for s in walk_stmts(run.body) if isinstance(s, Gemm))


def _flat(out) -> list:
    """A kernel's nested pairs of results, in order."""
    return [y for x in out for y in _flat(x)] if isinstance(out, tuple) else [out]


def _check(w, out, d, rtol=1e-10):
    ref = w.grad_ref(d)
    got = _flat(out)
    assert len(got) == len(w.wrt)
    for key, a in zip(w.wrt, got):
        np.testing.assert_allclose(a, ref[key], rtol=rtol, atol=1e-10)


def _deconv_ref(w, d):
    r = w.grad_ref(d)
    return r["x"], r["c"]


# -- which versions a class's kernel holds ---------------------------------------------------


def test_deconv_gradient_holds_only_the_gathers_its_sizes_take():
    w, k = _kernel("deconv-m3")
    ir = k.loop_ir
    assert _gathers(printed_ir(ir)) == 2  # the all-versions kernel: gathers for y's nest and dc's
    assert len(k.spec["size_tests"]) == 2
    # n = 64: neither test holds (dc's r loop is shorter than RUN_MIN, y is not shorter than SHORT)
    var, truth = _ran(k, _deconv_data(64, 3))
    assert set(truth.values()) == {False} and var is not k.variant()
    small = printed_ir(ir, False, truth)
    assert _gathers(small) == 0 and not any(isinstance(s, If) and s.general for s in walk_stmts(small.body))
    assert _gathers(printed_ir(ir, True, truth)) == 0  # the parallel entry too
    # n = 4096, m = 3: dc's gathers (m < SHORT, n >= RUN_MIN) stay behind their run-time test; y's go
    var2, truth2 = _ran(k, _deconv_data(4096, 3))
    assert sorted(truth2.values()) == [False, True] and var2 is not var
    big = printed_ir(ir, False, truth2)
    assert _gathers(big) == 1
    (test,) = {s.cond for s in walk_stmts(big.body) if isinstance(s, If) and s.general}
    assert truth2[test] is True  # the gathers' side is not right at every size: still tested
    # n < SHORT with m >= RUN_MIN: y's gathers, not dc's
    _, truth3 = _ran(k, _deconv_data(40, RUN_MIN + 3))
    assert sorted(truth3.values()) == [False, True] and truth3 != truth2
    assert _gathers(printed_ir(ir, False, truth3)) == 1


def test_small_products_hold_no_blas_call_and_large_ones_keep_the_loops():
    w, k = _kernel("mlp")
    ir = k.loop_ir
    assert _gemms(printed_ir(ir)) >= 5
    small = w.make_data(dict(w.quick))
    var, truth = _ran(k, small)
    assert var is not k.variant() and _gemms(printed_ir(ir, False, truth)) == 0
    big = w.make_data({"B": 32, "d": 24, "h": 20})  # every product past BLAS_MIN_WORK
    _, truth2 = _ran(k, big)
    run = printed_ir(ir, False, truth2)
    assert _gemms(run) == _gemms(printed_ir(ir))
    # a BLAS call cannot run at every size (extents 0): each keeps its loops behind the test
    assert all(s.orelse for s in walk_stmts(run.body) if isinstance(s, If) and any(isinstance(t, Gemm) for t in s.then))


def test_decided_gemm_loops_stay_without_lanes():
    """The loops behind a GEMM are printed without partial-sum lanes (loopir.If.cold); a class
    whose sizes take them alone keeps them so (the all-versions kernel's order of additions)."""
    m, p, q = tl.sizes("m p q")
    L, R = tl.tensor("L", m, p), tl.tensor("R", p, q)
    expr = tl.gen([m, q], lambda i, j: tl.sum(p, lambda k: L[i, k] * R[k, j]))
    k = tl.compile(expr)
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    var, truth = _ran(k, {"L": a, "R": b})
    assert truth is not None and set(truth.values()) == {False}
    (dec,) = [s for s in walk_stmts(printed_ir(k.loop_ir, False, truth).body) if isinstance(s, If)]
    assert dec.cond == K.Bool(False) and dec.cold and not dec.then
    assert "_a1" not in var.source.split("def kernel_parallel")[0]  # no lanes (test_blas's check)
    for shape in [(3, 4, 5), (40, 50, 60), (0, 3, 2)]:  # this class's kernel at every class's sizes
        a, b = rng.normal(size=shape[:2]), rng.normal(size=shape[1:])
        args = [np.int64(v) for v in _sz(k, shape)] + [{"L": a, "R": b}[nm] for nm, _, _ in k.spec["inputs"]]
        assert not k.spec.get("temporaries")
        np.testing.assert_allclose(var.module.kernel_serial(*args)[0], a @ b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(k(L=a, R=b), a @ b, rtol=1e-12, atol=1e-12)


def _sz(k, shape):
    """The kernel's size arguments (the spec's order) for L: m x p, R: p x q."""
    return [dict(zip("mpq", shape))[s] for s in k.spec["sizes"]]


# -- values: both sides of every boundary, one kernel across classes ----------------------


@pytest.mark.parametrize("sizes", [
    [(64, 3), (RUN_MIN, 3), (RUN_MIN - 1, 3), (64, 3)],
    [(RUN_MIN + 5, SHORT - 1), (RUN_MIN + 5, SHORT), (SHORT - 1, RUN_MIN), (SHORT, RUN_MIN), (SHORT - 1, RUN_MIN - 1)],
])
def test_deconv_values_across_classes(sizes):
    w, k = _kernel("deconv-m3")
    for n, m in sizes:
        d = _deconv_data(n, m)
        gx, gc = k(**d)
        rx, rc = _deconv_ref(w, d)
        np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gc, rc, rtol=1e-10, atol=1e-12)
    keys = {v.key for kk, v in k._variants.items() if isinstance(kk, tuple)}
    assert len(keys) >= 2 and k.variant().key not in keys


def test_class_variants_equal_the_all_versions_kernel_bitwise(monkeypatch):
    w, k = _kernel("deconv-m16")
    cases = [(64, 16), (RUN_MIN + 3, 16), (40, RUN_MIN + 1), (300, 70)]
    got = [k(**_deconv_data(n, m, 1)) for n, m in cases]
    monkeypatch.setenv("TENSORLANG_SIZE_CLASSES", "0")
    _, k0 = _kernel("deconv-m16")
    for (n, m), (gx, gc) in zip(cases, got):
        hx, hc = k0(**_deconv_data(n, m, 1))
        assert not any(isinstance(kk, tuple) for kk in k0._variants)
        np.testing.assert_array_equal(gx, hx)
        np.testing.assert_array_equal(gc, hc)


@pytest.mark.parametrize("n", [3, 24, 64, 65, int(np.ceil(np.sqrt(WITNESS_MIN))) + 1])
def test_quadform_values_on_both_sides(n):
    # n = 24: the fused loops alone (work < BLAS_MIN_WORK); 64, 65: BLAS with the fused loops kept
    # behind the test; past WITNESS_MIN: the fused loops alone again
    assert 63 ** 2 < BLAS_MIN_WORK <= 64 ** 2
    w, k = _kernel("quadform")
    d = w.make_data({"n": n})
    _check(w, k(**d), d)


# -- a class's kernel at another class's sizes -------------------------------------------


def _forced(monkeypatch, k, sizes):
    """Every later plan of ``k`` runs the variant of the class of ``sizes`` (name -> value)."""
    forced = SC.size_class(k.spec["size_tests"], [sizes[s] for s in k.spec["sizes"]])
    assert forced is not None
    monkeypatch.setattr(SC, "size_class", lambda tests, values: forced)
    return forced


@pytest.mark.parametrize("cls_at,run_at", [((64, 3), (4000, 3)), ((4000, 3), (64, 3)), ((40, RUN_MIN), (4000, 5)),
                                           ((4000, 5), (40, RUN_MIN)), ((64, 3), (2, 1))])
def test_a_class_variant_is_right_at_other_sizes(monkeypatch, cls_at, run_at):
    w, k = _kernel("deconv-m3")
    _forced(monkeypatch, k, dict(zip("nm", cls_at)))
    d = _deconv_data(*run_at)
    gx, gc = k(**d)
    rx, rc = _deconv_ref(w, d)
    np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gc, rc, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,cls_at,run_at", [
    # BLAS sizes (quadform n = 80, logreg's small X) drop nothing: the classes past WITNESS_MIN do;
    # mlp: a class with one GEMM's test true, one false (at 32, 24, 20 every test is true and,
    # since the parallel variant has the serial one's versions (chunks.py), no class drops anything)
    ("quadform", {"n": 24}, {"n": 80}), ("quadform", {"n": 2100}, {"n": 24}), ("quadform", {"n": 24}, {"n": 1}),
    ("quadform", {"n": 2100}, {"n": 80}),
    ("mlp", {"B": 8, "d": 6, "h": 5}, {"B": 32, "d": 24, "h": 20}), ("mlp", {"B": 64, "d": 24, "h": 5}, {"B": 3, "d": 2, "h": 1}),
    ("logreg", {"n": 20, "d": 6}, {"n": 300, "d": 40}), ("logreg", {"n": WITNESS_MIN // 40 + 1, "d": 40}, {"n": 300, "d": 40}),
])
def test_dense_class_variants_are_right_at_other_sizes(monkeypatch, name, cls_at, run_at):
    w, k = _kernel(name)
    forced = _forced(monkeypatch, k, cls_at)
    d = w.make_data(run_at)
    _check(w, k(**d), d, rtol=1e-9)
    assert k._variants[("class", "float64", False, forced[0])]  # the forced class ran


def test_nan_in_the_matrix_refused_in_every_class(monkeypatch):
    # the fused loops' class run at a BLAS size: the finiteness witness is still the run-time one
    w, k = _kernel("quadform")
    _forced(monkeypatch, k, {"n": 24})
    d = w.make_data({"n": 80})
    d["A"][5, 7] = np.nan
    with pytest.raises(InputError, match="A"):
        k(**d)


# -- cache entries, plans, damaged tests ----------------------------------------------------


def test_each_class_is_its_own_cache_entry_loaded_without_lowering():
    w, k = _kernel("deconv-m3")
    k(**_deconv_data(64, 3))
    k(**_deconv_data(RUN_MIN, 3))
    keys = [v.key for kk, v in k._variants.items() if isinstance(kk, tuple)]
    assert len(set(keys)) == 2 and k.variant().key not in keys
    d = _cache.cache_dir()
    for key in keys + [k.variant().key]:
        assert all(p and __import__("os").path.exists(p) for p in _cache.paths(key, d))
    _cache.clear_memory()
    _, k2 = _kernel("deconv-m3")  # a new kernel: every entry from disk
    gx, gc = k2(**_deconv_data(64, 3))
    var, _ = _ran(k2, _deconv_data(64, 3))
    assert var.cache_hit and var.key in keys and k2._lowered is None  # nothing lowered or printed
    np.testing.assert_allclose(gc, _deconv_ref(w, _deconv_data(64, 3))[1], rtol=1e-10, atol=1e-12)


def test_planned_calls_do_not_evaluate_the_tests_again(monkeypatch):
    w, k = _kernel("deconv-m3")
    d = _deconv_data(64, 3)
    first = k(**d)

    def boom(*a):
        raise AssertionError("size tests evaluated on a planned call")

    monkeypatch.setattr(SC, "size_class", boom)
    again = k(**d)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [None, "x", [], [[["c", "<"], [True, True]]], [[["s", 99], [True, True]]],
                                 [[["c", "<", ["s", 0], ["zz"]], [True, True]]], [[True, [True, True]]] * 9,
                                 [[["c", "<", ["s", 0], 5], "no"]]])
def test_damaged_tests_only_cost_the_class(bad):
    w, k = _kernel("deconv-m3")
    k.variant().spec["size_tests"] = bad  # as a damaged cache entry would give them
    d = _deconv_data(RUN_MIN + 1, 3)
    gx, gc = k(**d)
    assert not any(isinstance(kk, tuple) for kk in k._variants)
    np.testing.assert_allclose(gc, _deconv_ref(w, d)[1], rtol=1e-10, atol=1e-12)


def test_tests_round_trip_through_json():
    import json

    w, k = _kernel("quadform")
    for enc, drops in k.spec["size_tests"]:
        cond = SC.decode(json.loads(json.dumps(enc)))
        assert SC.encode(cond, [f"n{i}" for i in range(len(k.spec["sizes"]))]) == enc
        assert cond in {s.cond for par in (False, True) for s in walk_stmts(printed_ir(k.loop_ir, par).body)
                        if isinstance(s, If)}
