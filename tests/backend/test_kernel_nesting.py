"""Kernels nesting more loops than Python compiles (backend/codegen.py
``_check_nesting``; the "never a wrong answer" standard: refused with a
TensorLangError, not a SyntaxError from importing the generated module).

CPython compiles at most 20 statically nested ``for``/``while`` blocks in
one function.  Session 13's hunt found a naive-mode vjp of a random
program (tests/strategies.py) whose kernel nested 21 loops: ``tl.vjp(...)``
raised ``SyntaxError: too many statically nested blocks`` from the cache's
import.  Checked here on a sum over d indices under a chain of brackets
(d nested loops; the parallel variant adds its chunk loop around the
reduction): d = 18 compiles and equals the count of non-decreasing index
sequences, d = 20 and 21 are an UnsupportedError naming the loop nest."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend.codegen import MAX_NESTED_LOOPS


def _chain(d):
    n = tl.size("n")
    x = tl.tensor("x", n)

    def body(*ix):
        p = ix[0] <= ix[1]
        for a, b in zip(ix[1:-1], ix[2:]):
            p = p & (a <= b)
        return tl.iverson(p, x[ix[-1]])

    return tl.sum([n] * d, body)


def test_a_kernel_python_compiles_runs():
    d = MAX_NESTED_LOOPS - 2
    k = tl.compile(_chain(d), threads=1)
    # sum over i_0 <= ... <= i_{d-1} < 2 of x[i_{d-1}]: d sequences end at 1, one at 0
    assert k(x=np.array([1.0, 10.0])) == pytest.approx(1.0 + 10.0 * d)
    assert k(x=np.ones(3)) == pytest.approx(math.comb(3 + d - 1, d))


@pytest.mark.parametrize("d", [MAX_NESTED_LOOPS, MAX_NESTED_LOOPS + 1])
def test_a_kernel_too_deep_for_python_is_refused(d):
    with pytest.raises(tl.UnsupportedError, match=r"nests \d+ loops .* at most 20 nested loops"):
        tl.compile(_chain(d), threads=1)
