"""The row form of separated blocks (issue #14 item 6; backend separate.py ``Rows``).

A 2-D stencil's boundary body is copied once per row kind (two boundary
loops in a row meeting the interior, one loop in the others) instead of
once per isl piece; the interior loop stays branch-free.  Values are the
same bits as the piece form's (the points run in the same order), compared
with the row form switched off (``ROW_PIECES``) and a separate cache key.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import api, separate
from tensorlang.backend.kir import Float
from tensorlang.backend.loopir import If, Loop, Store, loops, walk_stmts
from tests.stencils import laplacian_energy


def _stencil_energy():
    # sum over the grid of u·(its four neighbours) at interior points: the
    # gradient is a gen whose isl pieces the row form replaces
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    inside = lambda i, j: (i >= 1) & (i + 1 < n) & (j >= 1) & (j + 1 < n)  # noqa: E731
    return tl.sum([n, n], lambda i, j: tl.iverson(inside(i, j), u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
                  * u[i, j]), u


def _computed(s, out) -> bool:
    # a store of the body's value, not of the zeros the loops over the rest
    # of a partly covered box write (lower.py ``_rest_zeros``: the four
    # corners of u, which the stencil never reads)
    return isinstance(s, Store) and s.array == out and s.value != Float(0.0)


def _stores(ir, out) -> int:
    return sum(1 for s in walk_stmts(ir.body) if _computed(s, out))


def _writers(ir, out):
    inner = [lp for lp in loops(ir.body) if not any(isinstance(s, Loop) for s in walk_stmts(lp.body))]
    return [lp for lp in inner if any(_computed(s, out) for s in lp.body)]


def test_laplacian_gradient_boundary_copies_are_fewer_and_interior_branch_free():
    loss, u = laplacian_energy()
    ir = tl.compile(tl.grad(loss, wrt=[u]).program, threads=1).loop_ir
    w = _writers(ir, ir.results[0])
    guarded = [lp for lp in w if any(isinstance(s, If) for s in walk_stmts(lp.body))]
    free = [lp for lp in w if not any(isinstance(s, If) for s in walk_stmts(lp.body))]
    assert len(free) == 1 and guarded  # one interior loop, no test in it
    # a copy of the body per store to the output: the interior's, two
    # boundary loops in interior rows, one in each of the two ranges of other
    # rows (isl's pieces: seven, single rows included)
    assert _stores(ir, ir.results[0]) == 5


def _both(expr, wrt, data, monkeypatch):
    """(row form, piece form) results of the serial kernel, bit for bit."""
    g = tl.grad(expr, wrt=[wrt]).program
    rows = tl.compile(g, threads=1)(**data)
    monkeypatch.setattr(separate, "ROW_PIECES", 1 << 30)
    monkeypatch.setattr(api, "CODEGEN_VERSION", api.CODEGEN_VERSION + "-pieces")  # not the kernel above
    k = tl.compile(g, threads=1)
    return rows, k(**data)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 9, 17])
def test_laplacian_gradient_rows_equal_pieces_bitwise(n, monkeypatch):
    loss, u = laplacian_energy()
    x = np.random.default_rng(n).normal(size=(n, n))
    a, b = _both(loss, u, {"u": x}, monkeypatch)
    assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
def test_stencil_energy_gradient_rows_equal_pieces_and_numpy(n, monkeypatch):
    loss, u = _stencil_energy()
    x = np.random.default_rng(n).normal(size=(n, n))
    a, b = _both(loss, u, {"u": x}, monkeypatch)
    assert np.array_equal(np.asarray(a), np.asarray(b))
    mask = np.zeros((n, n))
    mask[1:-1, 1:-1] = 1.0
    nb = np.zeros((n, n))
    nb[1:-1, 1:-1] = x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:]
    m = mask * x
    ref = mask * nb
    ref[:-1, :] += m[1:, :]
    ref[1:, :] += m[:-1, :]
    ref[:, :-1] += m[:, 1:]
    ref[:, 1:] += m[:, :-1]
    np.testing.assert_allclose(np.asarray(a), ref, rtol=1e-12, atol=1e-12)


def test_stencil_energy_gradient_takes_the_row_form():
    loss, u = _stencil_energy()
    g = tl.grad(loss, wrt=[u]).program
    ir = tl.compile(g, threads=1).loop_ir
    w = _writers(ir, ir.results[0])
    assert len([lp for lp in w if not any(isinstance(s, If) for s in walk_stmts(lp.body))]) == 1
    assert _stores(ir, ir.results[0]) == 5  # seven with the row form off
