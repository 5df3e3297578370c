"""Issue 15: a hypothesis "bad input" strategy.  Random mutations of valid
programs (tests/strategies.py) and of their inputs: wrong shapes, dtypes and
names, NaN and negative sizes, extra and missing inputs, bad relation data,
junk operands while building.  Every outcome is a correct result or a
TensorLangError, never another exception.  A mutation that keeps the meaning
(a nested list for an array, integers for integral floats) must give the
original program's result; a result of any other call is checked against
the reference evaluator on the same arguments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.ir import PairT, RealT, TensorT, input_vars
from tests.strategies import assert_close, programs

SMALL = dict(max_depth=2, max_size=3)
# mutations that keep the program's meaning: the result must not change
SAME = ("as_list", "as_ints", "explicit_sizes")
MUTATIONS = SAME + (
    "drop", "extra", "rename", "add_dim", "drop_dim", "grow", "empty", "complex", "strings", "objstrings", "bools",
    "none", "dict", "ragged", "nan", "inf", "size_nan", "size_neg", "size_float", "size_wrong", "size_huge",
    "size_str", "rel_float", "rel_shape", "rel_coords_oob", "rel_ragged", "pair_as_array", "pair_triple",
    "scalar_as_array", "non_program",
)
JUNK = ["a", None, 1.5, 10**400, float("nan"), float("inf"), np.ones(2), np.array(["s"], dtype=object), True, -1,
        0, 2, (1, 2), {"x": 1}, tl.size("n"), tl.size("n") < 3]


def _real_leaf_names(prog):
    return [k for k, t in prog.input_types.items() if not isinstance(t, PairT)]


def _applicable(prog) -> list:
    arrays = [k for k in _real_leaf_names(prog) if isinstance(prog.inputs[k], np.ndarray)]
    scalars = [k for k, t in prog.input_types.items() if isinstance(t, RealT)]
    pairs = [k for k, t in prog.input_types.items() if isinstance(t, PairT)]
    out = ["extra", "non_program", "explicit_sizes"]
    if prog.inputs:
        out += ["drop", "rename"]
    if arrays:
        out += ["as_list", "as_ints", "add_dim", "drop_dim", "grow", "empty"]
    if arrays or scalars:
        out += ["complex", "strings", "objstrings", "bools", "none", "dict", "ragged", "nan", "inf"]
    if prog.sizes:
        out += ["size_nan", "size_neg", "size_float", "size_wrong", "size_huge", "size_str"]
    if prog.relation_names:
        out += ["rel_float", "rel_shape", "rel_coords_oob", "rel_ragged"]
    if pairs:
        out += ["pair_as_array", "pair_triple"]
    if scalars:
        out += ["scalar_as_array"]
    assert set(out) <= set(MUTATIONS)
    return out


def _mutate(prog, kind: str, draw):
    """(program, kwargs, expect_same) for one mutation of a valid call."""
    expr = prog.expr
    ins = dict(prog.inputs)
    sizes = dict(prog.sizes)
    names = sorted(ins)
    arrays = [k for k in _real_leaf_names(prog) if isinstance(ins[k], np.ndarray)]
    rels = sorted(prog.relation_names)
    pairs = [k for k, t in prog.input_types.items() if isinstance(t, PairT)]
    scalars = [k for k, t in prog.input_types.items() if isinstance(t, RealT)]
    pick = lambda xs: xs[draw(st.integers(0, len(xs) - 1))]  # noqa: E731
    same = kind in SAME
    if kind == "as_list" and arrays:
        k = pick(arrays)
        ins[k] = ins[k].tolist()
    elif kind == "as_ints" and arrays:
        k = pick(arrays)
        ins[k] = np.round(ins[k] * 3).astype(np.int64)
        prog.inputs[k] = ins[k].astype(np.float64)  # the meaning it must keep
    elif kind == "explicit_sizes":
        ins.update(sizes)
    elif kind == "drop" and names:
        ins.pop(pick(names))
    elif kind == "extra":
        ins["zz_extra"] = np.ones(2)
    elif kind == "rename" and names:
        k = pick(names)
        ins[k + "_typo"] = ins.pop(k)
    elif kind == "add_dim" and arrays:
        k = pick(arrays)
        ins[k] = ins[k][..., None]
    elif kind == "drop_dim" and arrays:
        k = pick(arrays)
        ins[k] = ins[k].reshape(-1)[:1].reshape(()) if ins[k].ndim == 1 else ins[k][0]
    elif kind == "grow" and arrays:
        k = pick(arrays)
        ins[k] = np.concatenate([ins[k], ins[k][:1]], axis=0) if ins[k].shape[0] else np.ones((1,) + ins[k].shape[1:])
        same = None  # may be a consistent other size: checked against the evaluator
    elif kind == "empty" and arrays:
        k = pick(arrays)
        ins[k] = np.zeros((0,) * ins[k].ndim)
        same = None
    elif kind in ("complex", "strings", "objstrings", "bools", "none", "dict", "ragged", "nan", "inf") and (arrays or scalars):
        k = pick(arrays + scalars)
        v = np.asarray(ins[k], dtype=float)
        ins[k] = {"complex": v + 1j, "strings": v.astype(str), "objstrings": v.astype(str).astype(object),
                  "bools": v > 0, "none": None, "dict": {"a": 1}, "ragged": [[1.0], [1.0, 2.0]],
                  "nan": v * np.nan, "inf": v + np.inf}[kind]
    elif kind.startswith("size_") and sizes:
        s = pick(sorted(sizes))
        ins.update(sizes)
        ins[s] = {"size_nan": float("nan"), "size_neg": -2, "size_float": 2.5, "size_wrong": sizes[s] + 1,
                  "size_huge": 10**30, "size_str": "3"}[kind]
    elif kind.startswith("rel_") and rels:
        r = pick(rels)
        d = np.asarray(ins[r])
        ins[r] = {"rel_float": d.astype(float) + 0.5, "rel_shape": np.ones(d.shape + (2,), dtype=bool),
                  "rel_coords_oob": np.full((1, d.ndim), 99, dtype=np.int64), "rel_ragged": [[0], [1, 2]]}[kind]
    elif kind == "pair_as_array" and pairs:
        ins[pick(pairs)] = np.ones(3)
    elif kind == "pair_triple" and pairs:
        k = pick(pairs)
        ins[k] = tuple(ins[k]) + (np.ones(1),)
    elif kind == "scalar_as_array" and scalars:
        ins[pick(scalars)] = np.ones(2)
    elif kind == "non_program":
        expr = draw(st.sampled_from(["loss", 1.0, None, np.ones(2), tl.size("n") < 2]))
        same = None
    else:
        raise AssertionError(f"mutation {kind} does not apply")  # _applicable chose it
    return expr, ins, same


def _outcome(fn):
    """("ok", value) or ("refused", error); any other exception fails the test."""
    try:
        return "ok", fn()
    except tl.TensorLangError as exc:
        assert str(exc).strip(), "a TensorLangError must say what went wrong"
        return "refused", exc


def _check(prog, kind, expr, ins, same, run):
    status, got = _outcome(lambda: run(expr, ins))
    event(f"{kind}: {status}")
    if same and status == "refused":
        raise AssertionError(f"{kind}: a valid call was refused: {got}")
    if status == "ok":
        if same:
            assert_close(got, prog.evaluate(), prog.bound)
        else:  # accepted: it must mean what the reference evaluator says it means
            ref_status, ref = _outcome(lambda: tl.evaluate(expr, **ins))
            assert ref_status == "ok", f"{kind}: accepted here, refused by the evaluator: {ref}"
            assert_close(got, ref, prog.bound)
    return status


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(**SMALL), st.data())
def test_evaluator_bad_inputs(prog, data):
    kind = data.draw(st.sampled_from(_applicable(prog)))
    expr, ins, same = _mutate(prog, kind, data.draw)
    _check(prog, kind, expr, ins, same, lambda e, kw: tl.evaluate(e, **kw))


@pytest.fixture(autouse=False)
def compiled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(programs(**SMALL, relations=False), st.data())
def test_kernels_and_gradients_bad_inputs(compiled, prog, data):
    kind = data.draw(st.sampled_from(_applicable(prog)))
    expr, ins, same = _mutate(prog, kind, data.draw)

    def run_kernel(e, kw):
        return tl.compile(e, threads=1)(**kw)

    _check(prog, kind, expr, ins, same, run_kernel)
    wrt = [v for v in input_vars(prog.expr) if isinstance(v.type, (RealT, TensorT))][:1]
    if not wrt or tl.type_of(prog.expr) is not tl.Real:
        return
    status, got = _outcome(lambda: tl.grad(expr, wrt=wrt)(**ins))
    if same and status == "refused":
        raise AssertionError(f"{kind}: a valid gradient call was refused: {got}")
    if status == "ok" and same:
        want = tl.grad(prog.expr, wrt=wrt)(**prog.inputs, **prog.sizes)
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-9,
                                   atol=1e-9 * max(1.0, prog.bound))


_OPS = [
    lambda e, j: e + j, lambda e, j: j - e, lambda e, j: e * j, lambda e, j: e / j, lambda e, j: e ** j,
    lambda e, j: j ** e, lambda e, j: e[j], lambda e, j: tl.iverson(j, e), lambda e, j: tl.gen(j, lambda i: e),
    lambda e, j: tl.sum(j, lambda i: e), lambda e, j: tl.let(e, j), lambda e, j: tl.proj(e, j),
    lambda e, j: tl.pair(e, j), lambda e, j: tl.exp(j), lambda e, j: tl.gen(tl.size("n"), lambda i: e[i // j]),
    lambda e, j: tl.tensor(j, tl.size("n")), lambda e, j: tl.tensor("t", j), lambda e, j: tl.relation("R", j),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(**SMALL), st.sampled_from(range(len(_OPS))), st.sampled_from(range(len(JUNK))))
def test_building_with_junk_operands(prog, op, junk):
    """A junk operand is refused while building, or gives a program that
    evaluates to a result or a TensorLangError."""
    status, built = _outcome(lambda: _OPS[op](prog.expr, JUNK[junk]))
    if status == "ok" and isinstance(built, tl.Expr):
        _outcome(lambda: tl.evaluate(built, **prog.inputs, **prog.sizes))
    elif status == "ok":
        assert not math.isnan(0.0)  # a declaration (tensor/relation) that was accepted is a real node
        assert isinstance(built, (tl.Expr, tl.Relation)), built


@pytest.mark.parametrize("op", range(len(_OPS)))
def test_every_junk_operand_on_a_fixed_program(op):
    """Every (operation, junk) pair on fixed programs, so what explore mode
    found is checked on every run: ``tl.proj(e, np.ones(2))`` raised
    ValueError (an array's truth value) instead of a TensorLangError."""
    x = tl.tensor("x", 3)
    for expr, ins in [(tl.gen(3, lambda i: 0.5), {}), (tl.pair(tl.gen(3, lambda i: x[i]), x[0]), {"x": np.ones(3)})]:
        for junk in JUNK:
            status, built = _outcome(lambda: _OPS[op](expr, junk))
            if status == "ok" and isinstance(built, tl.Expr):
                _outcome(lambda: tl.evaluate(built, **ins))
