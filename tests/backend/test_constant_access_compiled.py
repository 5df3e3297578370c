"""Size-only accesses (``x[2]``, ``x[n - 3]``) in compiled kernels (#12 item 4).

Such an access is legal at some sizes only, so it is neither refused nor
trusted: the kernel spec carries it as a call-time check, and a call at sizes
that put it out of range is an InputError before the kernel runs - even if
the front end's own check (tensorlang.bounds) were skipped.
"""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import bounds

n = tl.size("n")
x = tl.tensor("x", n)


def test_constant_accesses_compile_and_agree_with_the_evaluator():
    e = x[1] * 2.0 + x[0] + tl.sum(n, lambda i: x[i]) * x[n - 3]
    xv = np.arange(1.0, 6.0)
    assert tl.compile(e)(x=xv) == pytest.approx(tl.evaluate(e, x=xv))
    k = tl.compile(e)
    assert {c[2] for c in k.spec["checks"]} >= {"x[1]"}


def test_an_out_of_range_constant_access_is_an_input_error_never_a_value(monkeypatch):
    e = tl.sum(n, lambda i: x[i]) * x[2]
    k = tl.compile(e)
    with pytest.raises(tl.InputError, match=r"x\[2\]"):
        k(x=np.ones(2))
    # the kernel's own check stands even without the front end's
    monkeypatch.setattr(bounds, "check_sizes", lambda constraints, sizes: None)
    with pytest.raises(tl.InputError, match=r"x\[2\]"):
        k(x=np.ones(2))
    assert k(x=np.ones(3)) == 3.0


def test_gradient_of_a_constant_access_is_checked_at_call_time(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")
    e = tl.sum(n, lambda i: x[i]) * x[2]
    g = tl.grad(e, wrt=x)
    np.testing.assert_allclose(g(x=np.ones(5)), [1, 1, 6, 1, 1])
    with pytest.raises(tl.InputError):
        g(x=np.ones(2))
