"""Random loop programs through the Numba step drivers (issue #17 item 3:
one Numba loop runs each sweep over the checkpoint schedule's table;
tensorlang/backend/loop_kernel.py).  tests/test_loop_oracles*.py run the
same programs' kernels as Python; here a few are compiled, with the step
drivers forced on at these small T, and their value and gradient are
checked against the reference evaluator and the per-step validated calls
(finite differences of the evaluator; the same operations per step, so the
driver's gradient equals the per-step one to rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl

from tests.strategies import assert_close, loop_programs


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(loop_programs(state="tensor", symbolic_T=True, max_steps=4, max_size=4))
def test_numba_step_drivers_value_and_gradient(prog):
    from tensorlang.backend import loop_kernel

    kw = {**prog.inputs, **prog.sizes}
    wrt = list(prog.wrt)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_kernel, "DRIVER_MIN_STEPS", 2)
        got = tl.compile(prog.expr)(**kw)
        v, g = tl.value_and_grad(prog.loss, wrt=wrt)(**kw)
    assert_close(got, prog.evaluate(), prog.bound, "Numba loop kernel vs evaluator")
    assert v == pytest.approx(tl.evaluate(prog.loss, **kw), rel=1e-12, abs=1e-12)
    rng = np.random.default_rng(prog.steps)
    h = 1e-6
    dirs = {x.name: (rng.standard_normal(np.shape(prog.inputs[x.name])) if np.ndim(prog.inputs[x.name])
                     else float(rng.standard_normal())) for x in wrt}
    hi = {k: (val + h * dirs[k] if k in dirs else val) for k, val in kw.items()}
    lo = {k: (val - h * dirs[k] if k in dirs else val) for k, val in kw.items()}
    fd = (tl.evaluate(prog.loss, **hi) - tl.evaluate(prog.loss, **lo)) / (2 * h)
    dot = sum(float(np.sum(np.asarray(gx) * dirs[x.name])) for x, gx in zip(wrt, g))
    assert dot == pytest.approx(fd, rel=1e-5, abs=1e-6)
