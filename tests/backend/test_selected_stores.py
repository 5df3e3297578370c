"""A gen whose relation test became a select stores every point (issue #13: image gradient).

A data mask ``[M(i, j)]`` on a gen's element is lowered as a select, no
branch (masks.py): the element is written at every point, 0 where the mask
is false.  The array then needs no zeroing before the loops (a pass over
memory: the image gradient's 2048 x 2048 masked residual was zeroed on every
call, then overwritten).  Structure, not time: the allocation is not zeroed,
the loops store unconditionally, and the values (after a call that leaves
its values in the pooled array) match NumPy.
"""

import numpy as np

import tensorlang as tl
from tensorlang.backend.loopir import If, Store


def _walk(stmts):
    for s in stmts:
        yield s
        for sub in (getattr(s, "body", ()), getattr(s, "then", ()), getattr(s, "orelse", ())):
            yield from _walk(sub)


def test_the_image_gradients_masked_residual_is_not_zeroed():
    """The image workload's gradient: ``r = [M(i+1, j+1)]·2(blur - f)`` is a
    pooled temporary written at every interior point through a select."""
    from benchmarks.workloads import BY_NAME

    w = BY_NAME["image"]
    loss, v = w.program()
    g = tl.grad(loss, wrt=v["u"])
    k = tl.compile(g.program)
    ir = k.loop_ir
    temps = [a for a in ir.allocs if a.role == "temporary" and len(a.shape) == 2]
    assert temps and not any(a.zero for a in temps)
    names = {a.name for a in temps}
    for s in _walk(ir.body):  # their stores are under no branch
        if isinstance(s, If):
            assert not any(isinstance(t, Store) and t.array in names for t in _walk(s.then + s.orelse))
    for n in (3, 4, 17, 60):
        d = w.make_data(w.size_dict(n), seed=n)
        for _ in range(2):  # the second call finds the first's values in the pooled arrays
            got = g(**d)
        np.testing.assert_allclose(got, w.grad_ref(d)["u"], rtol=1e-12, atol=1e-12)


def test_a_branch_guarded_gen_is_still_zeroed():
    # a gen whose test skips points (a relation conjunct that drives nothing and cannot be selected,
    # here an exists) keeps its zeroing
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    M = tl.relation("M", n, n)
    r = tl.gen([n, n], lambda i, j: tl.iverson(tl.exists(n, lambda k: M(i, k) & M(k, j)), u[i, j]))
    k = tl.compile(r)
    rng = np.random.default_rng(1)
    for n_ in (3, 9):
        uv, Mv = rng.normal(size=(n_, n_)), rng.random((n_, n_)) < 0.3
        want = np.where((Mv.astype(int) @ Mv.astype(int)) > 0, uv, 0.0)
        np.testing.assert_allclose(k(u=uv, M=Mv), want)
