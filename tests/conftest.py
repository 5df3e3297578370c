"""Test-session guards.

A watchdog per test: a test that runs longer than ``TENSORLANG_TEST_LIMIT``
seconds (default 900) dumps every thread's stack and ends the run.  CI has a
hard wall-clock limit; a hung test must fail loudly with its traceback
instead of silently eating the whole budget.
"""

import faulthandler
import os
import sys

import pytest

LIMIT = float(os.environ.get("TENSORLANG_TEST_LIMIT", "900"))


@pytest.fixture(autouse=True)
def _watchdog(request):
    if LIMIT > 0:
        sys.stderr.write("")  # make sure stderr exists before faulthandler uses it
        faulthandler.dump_traceback_later(LIMIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
