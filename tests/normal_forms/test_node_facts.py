"""Facts about nodes are functions of the node (issue #14 item 4).

Nodes are interned: an identical construction is the same object, so a
fact stored on a node by one builder would be inherited by every other
builder of the same term.  The sparse read's bracket used to be such a
mark (``sparse_guard``); it is now decided by the bracket's shape
(``sparse.is_guard``: a bracket of a sparse tensor's relation over a term
that reads the tensor).  The passes keep their memos in dictionaries they
own (no string-keyed ``_meta`` on nodes).  Checked against the reference
evaluator and NumPy.
"""

import numpy as np
import scipy.sparse

import tensorlang as tl
from tensorlang import ir
from tensorlang.ir import Access, Iverson, Mul, sym_aff
from tensorlang.sparse import is_guard


def _setup():
    n, m = tl.sizes("n m")
    S = tl.relation("S", n, m)
    A = tl.sparse_tensor("A", S)
    B = tl.tensor("B", n, m)
    y = tl.tensor("y", m)
    return n, m, S, A, B, y


def test_nodes_carry_no_string_keyed_facts():
    assert not hasattr(ir, "meta")
    n, m, S, A, B, y = _setup()
    e = tl.sum(n, lambda i: tl.sum(m, lambda j: A[i, j] * y[j]))
    tl.cost(e, n=3, m=2, S=np.ones((3, 2), dtype=bool))  # fills the cost model's and sharing's memos
    assert not any(hasattr(x, "_meta") for x in ir.walk(e))


def test_a_guard_is_decided_by_the_bracket_alone_not_by_who_built_it():
    n, m, S, A, B, y = _setup()
    i, j = ir.fresh_index("i"), ir.fresh_index("j")
    a, b = sym_aff(i), sym_aff(j)
    by_hand = Iverson(S(a, b), Access(Access(A, a), b))  # before any sparse read built it
    first = is_guard(by_hand)
    read = A[a, b]  # the API's sparse read: the same interned node
    assert read is by_hand and first and is_guard(read)
    # the same bracket over a dense tensor is no guard, whatever was built before
    dense = Iverson(S(a, b), Access(Access(B, a), b))
    assert not is_guard(dense)
    assert isinstance(dense * y[b], Mul)  # the product is not pushed under it
    assert isinstance(read * y[b], Iverson)  # a sparse read's product is (rule 4.12)


def test_guarded_and_hand_built_products_compute_the_same_values():
    n, m, S, A, B, y = _setup()
    rng = np.random.default_rng(0)
    N, M = 4, 3
    mask = rng.random((N, M)) < 0.5
    Ad = rng.normal(size=(N, M)) * mask
    Bd = rng.normal(size=(N, M))
    yd = rng.normal(size=M)
    sp = tl.sum(n, lambda i: tl.sum(m, lambda j: A[i, j] * y[j]))
    dn = tl.sum(n, lambda i: tl.sum(m, lambda j: tl.iverson(S(i, j), B[i, j]) * y[j]))
    As = scipy.sparse.csr_matrix(Ad)  # S is A's pattern
    want_sp = float((Ad * yd).sum())
    want_dn = float(((Bd * mask) * yd).sum())
    np.testing.assert_allclose(tl.evaluate(sp, A=As, y=yd), want_sp, rtol=1e-12)
    np.testing.assert_allclose(tl.evaluate(dn, B=Bd, S=mask, y=yd), want_dn, rtol=1e-12)
    np.testing.assert_allclose(tl.compile(sp)(A=As, y=yd), want_sp, rtol=1e-12)
    np.testing.assert_allclose(tl.compile(dn)(B=Bd, S=mask, y=yd), want_dn, rtol=1e-12)
