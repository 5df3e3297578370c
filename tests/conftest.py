"""Test-session guards.

A watchdog per test: a test that runs longer than ``TENSORLANG_TEST_LIMIT``
seconds (default 900) dumps every thread's stack and ends the run.  CI has a
hard wall-clock limit; a hung test must fail loudly with its traceback
instead of silently eating the whole budget.

Hypothesis runs derandomized by default: every property test draws the same
examples on every machine, so a CI run is reproducible and a new
counterexample cannot appear between a rehearsal and the landing run.
``TENSORLANG_HYPOTHESIS=explore`` draws fresh random examples instead (use it
to hunt for bugs; record what it finds as a fixed example or an xfail).
"""

import faulthandler
import os
import sys

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile("explore" if os.environ.get("TENSORLANG_HYPOTHESIS") == "explore" else "deterministic")

LIMIT = float(os.environ.get("TENSORLANG_TEST_LIMIT", "900"))


@pytest.fixture(autouse=True)
def _watchdog(request):
    if LIMIT > 0:
        sys.stderr.write("")  # make sure stderr exists before faulthandler uses it
        faulthandler.dump_traceback_later(LIMIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def jax64():
    """JAX with float64 enabled for the test (tensorlang computes in float64)."""
    jax = pytest.importorskip("jax")
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", old)
