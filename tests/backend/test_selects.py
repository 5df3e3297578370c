"""The value conditionals' built-ins as intrinsics (backend/selects.py): the
same values and types as Numba's compilation of the registered functions
(conditionals.py), at NaN, infinities and signed zeros, in float64 and
float32; a replaced registration keeps its own compilation; a kernel using
them agrees with NumPy."""

from __future__ import annotations

import dataclasses
import math

import numba
import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

import tensorlang as tl
from tensorlang.backend.scalars import kernel_function
from tensorlang.backend.selects import INTRINSICS, intrinsic_for
from tensorlang.functions import lookup, register

EDGES = [np.nan, -np.inf, -2.5, -1e-310, -0.0, 0.0, 1.0, 3.0, np.inf]


def _same(a, b) -> bool:
    a, b = np.float64(a), np.float64(b)
    return (np.isnan(a) and np.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


@pytest.mark.parametrize("name", sorted(INTRINSICS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_intrinsic_is_the_registered_function_compiled(name, dtype):
    impl = lookup(name).numba
    assert kernel_function(name) is intrinsic_for(name, impl) is not None
    arity = INTRINSICS[name][2]
    fast, ref = kernel_function(name), numba.njit(impl)  # ref: Numba's own compilation of the registered code
    call = {1: lambda f: numba.njit(lambda a, b, c, d: f(a)), 2: lambda f: numba.njit(lambda a, b, c, d: f(a, b)),
            4: lambda f: numba.njit(lambda a, b, c, d: f(a, b, c, d))}[arity]
    got_k, want_k = call(fast), call(ref)
    for a in EDGES:
        for b in EDGES:
            args = (dtype(a), dtype(b), dtype(-7.0), dtype(0.5))
            got, want = got_k(*args), want_k(*args)
            assert type(got) is type(want) and _same(got, want), (name, args, got, want)


def test_a_replaced_registration_is_compiled_as_its_own_code():
    fd = lookup("maximum")
    try:
        register(dataclasses.replace(fd, numba=_shifted_max), replace=True)
        assert intrinsic_for("maximum", lookup("maximum").numba) is None
        f = kernel_function("maximum")
        assert isinstance(f, CPUDispatcher) and f(1.0, 2.0) == 3.0
    finally:
        register(fd, replace=True)
    assert kernel_function("maximum") is INTRINSICS["maximum"][0]


def _shifted_max(a, b):
    return (a if (a > b or a != a) else b) + 1.0


def test_kernel_with_selects_matches_numpy():
    (n,) = tl.sizes("n")
    x, y = tl.tensor("x", n), tl.tensor("y", n)
    loss = tl.sum(n, lambda i: tl.maximum(x[i], y[i]) * tl.relu(x[i] - 0.5) + tl.abs(tl.minimum(x[i], y[i]))
                  + tl.where(x[i] > y[i], x[i], 2.0 * y[i]))
    rng = np.random.default_rng(3)
    d = {"x": rng.normal(size=300), "y": rng.normal(size=300)}
    d["y"][::7] = d["x"][::7]  # ties
    got = tl.compile(loss)(**d)
    xv, yv = d["x"], d["y"]
    want = (np.maximum(xv, yv) * np.maximum(xv - 0.5, 0.0) + np.abs(np.minimum(xv, yv))
            + np.where(xv > yv, xv, 2.0 * yv)).sum()
    assert abs(got - want) <= 1e-12 * max(1.0, abs(want))
