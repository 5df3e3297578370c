"""``tl.cost`` takes relation data in every form the rest of the API takes
(README "Sparse tensors": a boolean mask, coordinate rows, a scipy.sparse
matrix, ``tl.relation_data``); found by session 12's hunt: a scipy matrix or
prepared data was refused with "must be a boolean array or integer
coordinate rows, got dtype object" (``np.asarray`` of it is an object array).
Reference: the count for the same pattern given as a boolean mask, and a
hand count (one multiplication per stored entry, one addition fewer)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensorlang as tl

n, m = tl.sizes("n m")
R = tl.relation("R", n, m)
w = tl.tensor("w", m)
masked = tl.sum([n, m], lambda i, j: tl.iverson(R(i, j), w[j] * w[j]))
S = tl.relation("S", n, m)
A = tl.sparse_tensor("A", S)
lsq = tl.sum(n, lambda i: tl.sum(m, lambda j: A[i, j] * w[j]) ** 2)

D = sp.random(6, 4, density=0.5, random_state=1, format="coo")
D = sp.coo_matrix((np.concatenate([D.data, D.data[:1]]), (np.concatenate([D.row, D.row[:1]]),
                                                           np.concatenate([D.col, D.col[:1]]))), shape=D.shape)
MASK = D.toarray() != 0
FORMS = {
    "csr": lambda: D.tocsr(), "csc": lambda: D.tocsc(), "coo (a duplicate)": lambda: D,
    "relation_data": lambda: tl.relation_data(D), "coords": lambda: np.argwhere(MASK),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_cost_of_a_relation_given_in_any_form(form):
    data = FORMS[form]()
    nnz = int(MASK.sum())
    assert tl.cost(masked, n=6, m=4, R=data) == 2 * nnz - 1 == tl.cost(masked, n=6, m=4, R=MASK)
    assert tl.cost(lsq, n=6, m=4, S=data) == tl.cost(lsq, n=6, m=4, S=MASK)
