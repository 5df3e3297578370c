"""A consumer's reads of several temporaries at one shift become one read of
one temporary (backend/shift_group.py; issue #13 item 2).

Structure, on the kernel IR: the image loss's gradient keeps two square
temporaries and the output instead of three and the output; a 2-D program
whose consumer reads two temporaries at ``k - 1`` keeps one combined
temporary; a read of one of them at another shift leaves the program as it
was.  Values against NumPy (the image gradient and ``value_and_grad`` at
every small size, the 2-D programs against their formula).  The rule's isl
side condition on hand-made bindings: a member whose brackets do not keep
``j + a`` in the box is not combined.  Random programs (hypothesis): sums of
two or three temporaries read at shared and distinct shifts under boxes,
masks and extra brackets, the generated kernel against the evaluator (about
a quarter of them combine reads).  Never a time.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from benchmarks.workloads import BY_NAME, _image_grad, _image_loss
from tensorlang.backend import fusion
from tensorlang.backend import kir as K
from tensorlang.backend.fusion import split_program
from tensorlang.backend.loopir import Alloc, walk_stmts
from tensorlang.backend.lower import Lowerer
from tensorlang.backend.prepare import prepare
from tensorlang.backend.shift_group import group_shifts
from tensorlang.driver import python_kernel
from tensorlang.ir import Access, Add, Aff, Cmp, Const, Gen, Iverson, Mul, fresh_index, fresh_var, sym_aff


pytestmark = pytest.mark.usefixtures("compiled_kernel_cache")  # tests/backend/conftest.py


def _allocs(program, rank: int) -> set:
    """The bindings of the kernel's arrays with ``rank`` size-dependent extents."""
    ir = tl.compile(program, threads=1).loop_ir
    allocs = list(ir.allocs) + [s for s in walk_stmts(ir.body) if isinstance(s, Alloc)]
    return {(a.name, a.binding) for a in allocs if sum(1 for d in a.shape if not isinstance(d, K.Int)) == rank}


def _without_groups(monkeypatch):
    monkeypatch.setattr(fusion, "group_shifts", lambda binds, keep, base: (binds, set()))


def _image():
    loss, v = BY_NAME["image"].program()
    return loss, v["u"]


def test_image_gradient_stores_two_square_temporaries(monkeypatch):
    loss, u = _image()
    program = tl.grad(loss, wrt=u).program
    got = _allocs(program, 2)
    assert len(got) == 3 and sum(1 for _, b in got if b == "sw") == 1  # the output, sw and the neighbour sum
    with monkeypatch.context() as mp:
        _without_groups(mp)
        assert len(_allocs(program, 2)) == 4  # both cotangents stored for the centre


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 9, 17])
def test_image_gradient_against_numpy(n):
    loss, u = _image()
    rng = np.random.default_rng(n)
    d = {"u": rng.normal(size=(n, n)), "f": rng.normal(size=(n, n)), "M": rng.random((n, n)) < 0.6}
    want = _image_grad(d)["u"]
    np.testing.assert_allclose(tl.grad(loss, wrt=u, threads=1)(**d), want, rtol=1e-12, atol=1e-12)
    val, grad = tl.value_and_grad(loss, wrt=u, threads=1)(**d)
    np.testing.assert_allclose(grad, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(val, _image_loss(d), rtol=1e-12, atol=1e-12)


n, m = tl.size("n"), tl.size("m")


def _two_d(extra: bool):
    """Over ``n x m`` points: ``a = tanh x``, ``b = tanh y``, ``t = a + b`` (a read at
    the own point) and ``out[k, l] = [1 <= k]·(2 a[k-1, l] + 3 b[k-1, l]) + [k < n]·t[k, l] +
    [2 <= k]·t[k-2, l]``
    over ``(n + 1) x m`` points; ``extra``: ``out`` also reads ``a[k + 1, l]``.  (In one
    dimension shifted.py computes cheap producers in their consumers.)"""
    x, y = tl.tensor("x", n, m), tl.tensor("y", n, m)

    def body(a, b):
        def out(t):
            def at(k, l):
                e = (tl.iverson(k >= 1, 2.0 * a[k - 1, l] + 3.0 * b[k - 1, l]) + tl.iverson(k < n, t[k, l])
                     + tl.iverson(k >= 2, t[k - 2, l]))
                return e + tl.iverson(k + 1 < n, a[k + 1, l]) if extra else e
            return tl.gen([n + 1, m], at)
        return tl.let(tl.gen([n, m], lambda i, j: a[i, j] + b[i, j]), out)

    return tl.let(tl.gen([n, m], lambda i, j: tl.tanh(x[i, j])),
                  lambda a: tl.let(tl.gen([n, m], lambda i, j: tl.tanh(y[i, j])), lambda b: body(a, b)))


def _two_d_ref(x, y, extra: bool):
    a, b = np.tanh(x), np.tanh(y)
    out = np.zeros((x.shape[0] + 1, x.shape[1]))
    out[1:] += 2 * a + 3 * b
    out[:-1] += a + b
    out[2:] += (a + b)[:-1]
    if extra:
        out[:-2] += a[1:]
    return out


@pytest.mark.parametrize("extra", [False, True])
@pytest.mark.parametrize("size", [(0, 3), (1, 1), (2, 5), (7, 3), (40, 33)])
def test_two_d_values(extra, size):
    rng = np.random.default_rng(size)
    x, y = rng.normal(size=size), rng.normal(size=size)
    got = tl.compile(_two_d(extra), threads=1)(x=x, y=y)
    np.testing.assert_allclose(got, _two_d_ref(x, y, extra), rtol=1e-13, atol=1e-13)


def test_two_d_combines_only_what_it_frees():
    combined = _allocs(_two_d(False), 2)
    assert sum(1 for _, b in combined if b == "sw") == 1
    assert len(combined) == 3  # t, sw and the output: a and b are registers of the fused nest
    kept = _allocs(_two_d(True), 2)  # a is read at k + 1 too: it stays, and nothing is combined
    assert not any(b == "sw" for _, b in kept)


def _binds(prog):
    pre = prepare(prog)
    binds, _ = split_program(pre)
    return binds, Lowerer(pre, "sparse").scope0


def test_a_member_outside_the_box_is_not_combined():
    """Hand-made bindings (no bounds proof ran on them): ``c`` reads ``a[k - 1]``
    and ``b[k - 1]``, the second at ``k = 0`` too; isl finds that point outside the
    box and nothing is combined.  With both reads guarded they are."""
    pre = prepare(_two_d(False))
    binds, _ = split_program(pre)
    base = Lowerer(pre, "sparse").scope0
    (a, ar), (b, br) = binds[0], binds[1]
    k, l = fresh_index("k"), fresh_index("l")
    inside = Cmp("<=", Aff((), 1), sym_aff(k))

    def at(v):
        return Access(Access(v, sym_aff(k) - 1), sym_aff(l))

    for body, combined in ((Iverson(inside, Add(Mul(Const(2), at(a)), at(b))), True),
                           (Add(Iverson(inside, Mul(Const(2), at(a))), at(b)), False)):
        c = Gen(k, n + 1, Gen(l, m, body))
        out, made = group_shifts([(a, ar), (b, br), (fresh_var("c", tl.type_of(c)), c)], set(), base)
        assert bool(made) == combined
        if combined:
            (w,) = made
            assert [x for x, _ in out][:3] == [a, b, w]


# -- random programs ---------------------------------------------------------------

_SHIFTS = [(1, 1), (1, 0), (1, 1), (0, 0), (2, 1)]  # (1, 1) twice: reads that share a shift


@st.composite
def _stencil_sums(draw):
    """Two or three temporaries ``a_t = tanh(s_t·x)`` (never computed in their
    consumers: they call a function), each read at its own point by ``t = Σ a_t``
    and at one or two shifts by ``out`` over ``(n + 2) x (m + 2)`` points, each read
    under the bracket that keeps it in the box, some under a mask or ``k >= 2`` too;
    ``t`` read at two points (kept)."""
    count = draw(st.integers(2, 3))
    reads = []
    for a in range(count):
        for _ in range(draw(st.sampled_from([1, 1, 2]))):
            reads.append((a, draw(st.sampled_from(_SHIFTS)), draw(st.sampled_from([1.0, -4.0, 0.5, 2.0])),
                          draw(st.sampled_from(["", "mask", "k2"]))))
    return count, reads


def _stencil_program(count, reads):
    x = tl.tensor("x", n, m)
    M = tl.relation("M", n, m)

    def body(temps):
        def out(t):
            def at(k, l):
                e = tl.iverson((k < n) & (l < m), t[k, l]) + tl.iverson((k >= 2) & (l >= 2), t[k - 2, l - 2])
                for a, (p, q), c, extra in reads:
                    box = (k >= p) & (k < n + p) & (l >= q) & (l < m + q)
                    if extra == "mask":
                        box = box & M(k - p, l - q)
                    elif extra == "k2":
                        box = box & (k >= 2)
                    e = e + tl.iverson(box, c * temps[a][k - p, l - q])
                return e
            return tl.gen([n + 2, m + 2], at)
        total = lambda i, j: temps[0][i, j] + temps[1][i, j] + (temps[2][i, j] if count > 2 else 0.0)  # noqa: E731
        return tl.let(tl.gen([n, m], total), out)

    def bind(a, temps):
        if a == count:
            return body(temps)
        s = 0.5 + a
        return tl.let(tl.gen([n, m], lambda i, j: tl.tanh(s * x[i, j])), lambda v: bind(a + 1, temps + [v]))

    return bind(0, [])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=_stencil_sums(), size=st.sampled_from([(1, 1), (2, 3), (4, 4), (6, 5)]))
def test_random_stencil_sums_equal_the_evaluator(case, size):
    prog = _stencil_program(*case)
    rng = np.random.default_rng(size[0] * 7 + size[1])
    d = {"x": rng.normal(size=size)}
    if any(extra == "mask" for *_, extra in case[1]):
        d["M"] = rng.random(size) < 0.5
    want = tl.evaluate(prog, **d)
    got = python_kernel(prog)(**d)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
