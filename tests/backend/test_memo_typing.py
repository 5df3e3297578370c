"""The kernels' pipelines resolve each function type once per argument types
(backend/intrinsics.py ``_MemoTyping``; issue #14 item 6, compile latency).

Counted, not timed: a function repeating one integer ``+`` forty times asks
Numba's typing context once for it under the kernels' pipeline, forty
times or more under Numba's own; its values are the same; the typing
context is left as it was; benchmark gradients compiled with and without
the memo are bit for bit the same (serial and parallel variants).
"""

from __future__ import annotations

import operator

import numba
import numpy as np
import pytest
from numba.core import types
from numba.core.registry import cpu_target

import tensorlang as tl
from tensorlang.backend import api, codegen, intrinsics
from tests.backend.test_tile_consumers import _data, _deconv

pytestmark = pytest.mark.usefixtures("compiled_runtime")

_SRC = "def f(a, b):\n    s = 0\n" + "".join("    s = s + (a + b)\n" for _ in range(40)) + "    return s\n"


def _adds(monkeypatch, pipeline):
    """``(f(3, 4), the typing context's resolutions of int64 + int64)`` compiling ``f`` with ``pipeline``."""
    seen = []
    cls = type(cpu_target.typing_context)
    resolve = cls.resolve_function_type

    def spy(self, func, args, kws):
        if getattr(func, "typing_key", None) is operator.add and tuple(args) == (types.int64, types.int64):
            seen.append(1)
        return resolve(self, func, args, kws)

    monkeypatch.setattr(cls, "resolve_function_type", spy)
    ns: dict = {}
    exec(compile(_SRC, "<memo-test>", "exec"), ns)
    kw = {"pipeline_class": pipeline} if pipeline is not None else {}
    got = numba.njit(**kw)(ns["f"])(3, 4)
    return got, len(seen)


def test_one_resolution_per_signature_in_the_kernel_pipeline(monkeypatch):
    got, n = _adds(monkeypatch, intrinsics.KernelCompiler)
    assert got == 40 * 7 and n == 1
    assert "resolve_function_type" not in vars(cpu_target.typing_context)  # the context as it was


def test_numba_own_pipeline_resolves_every_site(monkeypatch):
    got, n = _adds(monkeypatch, None)
    assert got == 40 * 7 and n >= 40


@pytest.mark.parametrize("threads", [1, 2])
def test_gradient_bitwise_as_without_the_memo(monkeypatch, threads):
    loss, v = _deconv()
    g = tl.grad(loss, wrt=[v["x"], v["c"]], threads=threads)
    d = _data(3 * 1024 + 5, 16, 3)
    with monkeypatch.context() as mp:
        mp.setattr(intrinsics._MemoTyping, "_compile_core",
                   lambda self: super(intrinsics._MemoTyping, self)._compile_core())
        mp.setattr(codegen, "_PASSED", {})
        mp.setattr(api, "CODEGEN_VERSION", api.CODEGEN_VERSION + "-nomemo-test")
        want = tl.compile(g.program, threads=threads)(**d)
    got = tl.compile(g.program, threads=threads)(**d)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
