"""Vectorizable calls split out of reduction loops (backend/fission.py, issue
#13 item 6): the loop structure after the rewrite, the cases it must leave
alone, and the tanh MLP's loss and gradient against NumPy at sizes on both
sides of the run-time row test."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import kir as K
from tensorlang.backend.colsum import column_sums
from tensorlang.backend.rw import names
from tensorlang.backend.fission import MAX_ROW, _has_call, split_calls
from tensorlang.backend.hfuse import fuse_nests
from tensorlang.backend.loopir import AccAdd, Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts
from tensorlang.backend.scalars import VECTOR_TANH


def _tanh(e):
    return K.FCall(VECTOR_TANH, (e,), numpy=False)


def _ir(inner_body, arrays=("a", "w", "y")):
    inner = Loop("j", K.Int(0), K.Name("n"), 1, tuple(inner_body), "sum")
    outer = Loop("i", K.Int(0), K.Name("m"), 1, (inner,), "gen")
    return KernelIR(args=["m", "n", *arrays], allocs=[], body=[outer], results=[K.Name("y")])


def _inner_loops(stmts):
    return [s for s in walk_stmts(stmts) if isinstance(s, Loop) and not any(isinstance(x, Loop) for x in s.body)]


A_IJ = K.Load("a", (K.Name("i"), K.Name("j")))
W_J = K.Load("w", (K.Name("j"),))
Y_I = K.Load("y", (K.Name("i"),))


def test_scalar_call_split_through_a_row_buffer():
    body = [Assign("v", K.Float(0.0)), Assign("v", _tanh(A_IJ)),
            Store("y", (K.Name("i"),), K.FSum((Y_I, K.FMul(K.Name("v"), W_J))))]
    out = split_calls(_ir(body))
    (top,) = out.body
    assert isinstance(top, If) and top.orelse == tuple(_ir(body).body)  # long rows keep the loop
    allocs = [s for s in top.then if isinstance(s, Alloc)]
    assert len(allocs) == 1 and allocs[0].shape == (K.IBin("-", K.Name("n"), K.Int(0)),)
    first, second = _inner_loops(top.then)
    buf = allocs[0].name
    # first: the call, stored to the buffer, nothing carried
    assert [type(s) for s in first.body] == [Assign, Store]
    assert first.body[0].value == _tanh(A_IJ) and first.body[1].array == buf
    # second: the accumulation in its original form, reading the buffer
    assert second.body[0] == Assign("v", K.Load(buf, (K.IBin("-", K.Name("j"), K.Int(0)),)))
    assert second.body[1] == body[2]


def test_left_alone():
    acc = [Assign("v", _tanh(A_IJ)), AccAdd("s", K.FMul(K.Name("v"), W_J))]
    assert split_calls(_ir(acc)).body != _ir(acc).body  # the positive control splits
    cases = {
        # the call reads the accumulator the rest writes
        "reads acc": [Assign("v", _tanh(K.Name("s"))), AccAdd("s", K.Name("v"))],
        # the rest reads the stored array at another index
        "other index": [Store("b", (K.Name("j"),), _tanh(A_IJ)),
                        AccAdd("s", K.Load("b", (K.IBin("+", K.Name("j"), K.Int(1)),)))],
        # a scalar carried across iterations (read before it is assigned)
        "carried": [AccAdd("s", K.Name("v")), Assign("v", _tanh(A_IJ))],
        # the call's own accumulation
        "call accumulated": [AccAdd("s", _tanh(A_IJ))],
        # nothing to split from
        "call only": [Store("b", (K.Name("i"), K.Name("j")), _tanh(A_IJ))],
        # a libm call: splitting would not vectorize it
        "libm": [Assign("v", K.FCall("exp", (A_IJ,))), AccAdd("s", K.Name("v"))],
    }
    for name, body in cases.items():
        ir = _ir(body, arrays=("a", "w", "y", "b"))
        assert split_calls(ir) is ir, name


def _mlp(B, d, h):
    from benchmarks import dense

    loss, v = dense.mlp_program()
    data = dense.mlp_data({"B": B, "d": d, "h": h}, np.random.default_rng(B + d + h))
    return loss, v, data, dense


@pytest.mark.parametrize("B,d,h", [(3, 2, 5), (40, 7, 33)])
def test_mlp_loss_and_gradient(B, d, h):
    loss, v, data, dense = _mlp(B, d, h)
    assert tl.compile(loss, threads=1)(**data) == pytest.approx(dense.mlp_loss(data), rel=1e-12)
    keys = ("W1", "b1", "W2", "b2", "w3")
    got = tl.grad(loss, wrt=[v[k] for k in keys], threads=1)(**data)
    want = dense.mlp_grad(data)
    for k, g in zip(keys, got):
        np.testing.assert_allclose(g, want[k], rtol=1e-10, atol=1e-12)


def test_a_row_longer_than_the_row_buffer():
    # h = MAX_ROW + 1: the tanh row does not fit fission's row buffer.  One hidden
    # layer, so that no h x h weight is needed (the two-layer MLP at this h held a
    # 2 GB W2 and its 2 GB cotangent: 15.9 GB peak in the full suite)
    B, d, h = 6, 3, MAX_ROW + 1
    Bs, ds, hs = tl.sizes("B d h")
    X, t = tl.tensor("X", Bs, ds), tl.tensor("t", Bs)
    W1, b1, w3 = tl.tensor("W1", ds, hs), tl.tensor("b1", hs), tl.tensor("w3", hs)
    loss = tl.let(tl.gen([Bs, hs], lambda b, j: tl.tanh(tl.sum(ds, lambda k: X[b, k] * W1[k, j]) + b1[j])), lambda H: tl.let(
        tl.gen(Bs, lambda b: tl.sum(hs, lambda j: H[b, j] * w3[j])), lambda y: tl.sum(Bs, lambda b: (y[b] - t[b]) ** 2)))
    rng = np.random.default_rng(7)
    data = {"X": rng.normal(size=(B, d)), "t": rng.normal(size=B), "W1": rng.normal(size=(d, h)) / np.sqrt(d),
            "b1": 0.1 * rng.normal(size=h), "w3": rng.normal(size=h) / np.sqrt(h)}
    H = np.tanh(data["X"] @ data["W1"] + data["b1"])
    r = H @ data["w3"] - data["t"]
    k = tl.compile(loss, threads=1)
    assert k(**data) == pytest.approx(float(r @ r), rel=1e-12)
    split = split_calls(column_sums(fuse_nests(k.loop_ir)))  # what the serial kernel prints
    assert any(isinstance(x, If) and isinstance(x.cond, K.Cmp) and x.cond.rhs == K.Int(MAX_ROW)
               for x in walk_stmts(split.body))  # the row-buffer test this h takes the other branch of
    dZ = 2 * np.outer(r, data["w3"]) * (1 - H * H)  # hand-derived
    want = {"W1": data["X"].T @ dZ, "b1": dZ.sum(axis=0), "w3": 2 * H.T @ r}
    got = tl.grad(loss, wrt=[W1, b1, w3], threads=1)(**data)
    for k, g in zip(("W1", "b1", "w3"), got):
        np.testing.assert_allclose(g, want[k], rtol=1e-10, atol=1e-12)


def _short_rows(stmts):
    """The statements run when rows are short: fission's ifs taken by their then-branch."""
    out = []
    for s in stmts:
        if isinstance(s, If) and isinstance(s.cond, K.Cmp) and s.cond.rhs == K.Int(MAX_ROW):
            out += _short_rows(s.then)
        elif isinstance(s, If):
            out.append(replace(s, then=tuple(_short_rows(s.then)), orelse=tuple(_short_rows(s.orelse))))
        elif isinstance(s, Loop):
            out.append(replace(s, body=tuple(_short_rows(s.body))))
        else:
            out.append(s)
    return out


def _loads(e, out):
    if isinstance(e, K.Load):
        out.add(e.array)
    if isinstance(e, (tuple, list)):
        for x in e:
            _loads(x, out)
    elif isinstance(e, K.KExpr):
        for f in e.__dataclass_fields__:
            _loads(getattr(e, f), out)
    return out


def test_mlp_kernel_splits_its_row_loops():
    loss, _, _, _ = _mlp(3, 2, 5)
    k = tl.compile(loss, threads=1)
    before = column_sums(fuse_nests(k.loop_ir))  # what the serial kernel prints (codegen.source)

    def tanh_loops(stmts):
        return [s for s in _inner_loops(stmts) if any(isinstance(x, (Assign, Store)) and _has_call(x.value) for x in s.body)]

    def carried(loop):
        return any(isinstance(x, AccAdd) or (isinstance(x, Store) and x.array in _loads(x.value, set()))
                   or (isinstance(x, Assign) and x.target in names(x.value, set())) for x in loop.body)

    assert any(carried(s) for s in tanh_loops(before.body))  # fused: the tanh shares a reduction loop
    after = tanh_loops(_short_rows(split_calls(before).body))
    assert len(after) == 2 and not any(carried(s) for s in after)  # both layers' tanh loops vectorizable
