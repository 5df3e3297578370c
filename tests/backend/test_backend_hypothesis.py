"""Backend differential tests (issue 6) on random programs (tests/strategies.py):
the lowered kernels equal the reference evaluator, primal and derivatives,
in both modes, on programs with empty, single-point, triangular and strided
predicates, relations, exists, lets and pairs.

Budget: Numba compiles take ~0.5-1 s per kernel, so most examples run the
*generated source* as plain Python (``python_kernel``: the same code the
Numba kernel is compiled from, without the JIT); a smaller sample goes
through the real ``tl.compile`` and Numba.  About 300 programs in all.
Every generated program must compile (issue 12): an UnsupportedError fails
the test, it is not assumed away.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

import tensorlang as tl
from tensorlang.driver import python_kernel  # the route "compile", run as plain Python
from tests.strategies import programs, scalar_exprs

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


def close(a, b, bound: float) -> bool:
    """Values equal up to rounding (tuples for pairs, object arrays for tensors of pairs)."""
    if isinstance(b, tuple):
        return isinstance(a, tuple) and len(a) == len(b) and all(close(x, y, bound) for x, y in zip(a, b))
    if isinstance(b, np.ndarray) and b.dtype == object:
        return isinstance(a, np.ndarray) and a.shape == b.shape and all(close(x, y, bound) for x, y in zip(a, b))
    return np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=1e-9, atol=1e-9 * max(1.0, bound), equal_nan=True)


def _inputs_of(expr, prog) -> dict:
    """The inputs and sizes a derived program still uses (passes drop dead inputs)."""
    names = {v.name for v in tl.ir.input_vars(expr)} | {r.name for r in tl.ir.relations_of(expr)}
    sizes = {s.name for s in tl.ir.size_vars(expr)}
    kw = {k: v for k, v in prog.inputs.items() if k in names}
    return kw | {k: v for k, v in prog.sizes.items() if k in sizes}


def _lowered(expr, mode):
    return python_kernel(expr, mode)  # every program compiles (issue 12): no assume


@pytest.mark.parametrize("mode", ["sparse", "naive"])
@settings(max_examples=100, **SETTINGS)
@given(prog=programs())
def test_lowered_programs_equal_evaluator(prog, mode):
    ref = prog.evaluate()
    out = _lowered(prog.expr, mode)(**prog.inputs, **prog.sizes)
    assert close(out, ref, prog.bound)


@settings(max_examples=50, **SETTINGS)
@given(prog=programs())
def test_normalized_programs_equal_evaluator(prog):
    """tl.normalize's tensor SSA, lowered with fusion, against the original program."""
    ref = prog.evaluate()
    try:
        ssa = tl.normalize(prog.expr)
    except tl.TensorLangError:
        assume(False)  # the normalizer's own limits are tested with it, not here
    out = _lowered(ssa, "sparse")(**_inputs_of(ssa, prog))
    assert close(out, ref, prog.bound)


@settings(max_examples=40, **SETTINGS)
@given(prog=scalar_exprs(smooth=True, relations=True))
def test_lowered_gradients_equal_evaluated_gradients(prog):
    """The simplified adjoint (tl.grad's program), lowered, against the evaluator on it."""
    wrt = [tl.var(name, t) for name, t in sorted(prog.input_types.items()) if not isinstance(t, tl.ir.PairT)]
    assume(wrt)
    try:
        g = tl.grad(prog.expr, wrt=wrt[0])
    except tl.TensorLangError:
        assume(False)  # the derivative's own limits are tested with it, not here
    kw = _inputs_of(g.program, prog)
    ref = tl.evaluate(g.program, **kw)
    out = _lowered(g.program, "sparse")(**kw)
    assert close(out, ref, max(prog.bound, 1.0) * 10)


@settings(max_examples=12, **SETTINGS)
@given(prog=programs())
def test_numba_compiled_programs_equal_evaluator(prog):
    ref = prog.evaluate()
    k = tl.compile(prog.expr, threads=1)
    assert close(k(**prog.inputs, **prog.sizes), ref, prog.bound)


@pytest.mark.xfail(strict=False, reason=(
    "known: the oracle costs both sides through explicit_sharing, which (A) binds loop-invariant tensors once "
    "but not loop-invariant scalars, so a producer gen[i] gen[j] sum[k] s fused into its one injective use "
    "is charged per point where the SSA side was charged per j (510 -> 810 at n=6), and (B) binds a shared "
    "bracketed term [p]·S as let t = [p]·S in t + t, hiding p from rule 4.24 (*) (5 -> 6); neither counts a "
    "product twice. Session 12: 74 of 1500 explored programs; binding S under its bracket fixed 31 of them but "
    "changed the stored normal forms (image_denoising). Open in issue 13 (fusion / cost oracle)"))
@settings(max_examples=25, **SETTINGS)
@given(prog=programs(relations=False))
def test_fusion_never_raises_the_cost(prog):
    from tensorlang.backend.lower import fused_program

    try:
        ssa = tl.normalize(prog.expr)
        fused = fused_program(ssa)
    except tl.TensorLangError:
        assume(False)
    sizes = {"n": 6, "m": 4}
    assert tl.cost(tl.explicit_sharing(fused), **sizes) <= tl.cost(tl.explicit_sharing(ssa), **sizes)


@settings(max_examples=8, **SETTINGS)
@given(prog=programs())
def test_runtime_compiled_has_no_fallback(prog):
    """``runtime="compiled"`` always runs the Numba kernel (no evaluator)."""
    from tensorlang.runtime import make_callable

    f = make_callable(prog.expr, runtime="compiled", threads=1)
    out = f(**prog.inputs, **prog.sizes)
    assert f.compiled and close(out, prog.evaluate(), prog.bound)
