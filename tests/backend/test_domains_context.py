"""A scope's isl context is built on its enclosing scope's set and the
constraints it adds (backend/domains.py ``Scope.context``; issue #14 item 6).

Checked against the whole text parsed afresh: every context the lowering of
three benchmark gradients builds (the image prior's stencil with its mask,
the deconvolution, the n-body's triangle) is the same isl set, and the
kernel IR lowered with contexts parsed whole is the same.
"""

from __future__ import annotations

import pytest

import tensorlang as tl
from tensorlang.backend import domains
from tensorlang.isl_bridge import isl


def _gradient(name):
    from benchmarks import workloads as W

    w = W.BY_NAME[name]
    loss, inputs = w.program()
    return tl.grad(loss, wrt=[inputs[k] for k in w.wrt]).program


@pytest.mark.parametrize("name", ["image", "deconv-m3", "nbody"])
def test_contexts_equal_the_whole_text_parsed(monkeypatch, name):
    built = domains.Scope.context
    seen = []

    def checked(self):
        got = built(self)
        seen.append(got.is_equal(isl.Set(self.context_text())))
        return got

    monkeypatch.setattr(domains, "_SETS", {})
    monkeypatch.setattr(domains.Scope, "context", checked)
    ir = tl.compile(_gradient(name), threads=1).loop_ir
    assert seen and all(seen), (len(seen), seen.count(False))
    monkeypatch.setattr(domains, "_SETS", {})
    monkeypatch.setattr(domains, "_HOLDS", {})
    monkeypatch.setattr(domains, "_TESTS", {})
    whole = []
    monkeypatch.setattr(domains.Scope, "context", lambda self: whole.append(1) or isl.Set(self.context_text()))
    assert tl.compile(_gradient(name), threads=1).loop_ir == ir
    assert whole  # lowered again, not taken from a cache
