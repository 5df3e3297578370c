"""Shared fixtures of the backend tests."""

from __future__ import annotations

import pytest

from tensorlang.backend import dispatch


@pytest.fixture
def scanned(monkeypatch):
    """The shapes of the arrays whose finiteness the dispatch scans (a list
    the test may clear)."""
    seen = []
    orig = dispatch._all_finite

    def counted(a, threads=1):
        seen.append(a.shape)
        return orig(a, threads)

    monkeypatch.setattr(dispatch, "_all_finite", counted)
    return seen


@pytest.fixture
def compiled_runtime(monkeypatch):
    """The kernel at every size (not the evaluator, which small sizes would take)."""
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


@pytest.fixture(scope="module")
def compiled_kernel_cache(tmp_path_factory):
    """A module's kernels in a fresh disk cache, always compiled (never the
    evaluator, which small sizes would take)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORLANG_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
    mp.setenv("TENSORLANG_RUNTIME", "compiled")
    yield
    mp.undo()
