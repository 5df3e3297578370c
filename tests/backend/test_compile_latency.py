"""Compile latency without stale kernels (issue #14 item 6; paper Section 4.3).

* A kernel calling user scalar functions is kept in Numba's disk cache when
  every such function's machine code is fixed by its code (a module-level
  function, ``scalars.cacheable``), whose fingerprint is in the kernel's key;
  otherwise (a closure, a default value, a global that may change) it is
  compiled in every process.  An edited function gives a new kernel (a new
  key), never the old machine code: checked in fresh processes.
* A fresh process compiles exactly that entry, nothing beside it: arrays and
  min/max are intrinsics (backend/intrinsics.py), checked against NumPy and
  Numba's built-ins.
* The first call compiles only the entry it runs: ``kernel_serial`` for a
  one-thread call, never the ``parallel=True`` variant beside it (counted
  from Numba's own record of compiled signatures).
"""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np

import tensorlang as tl

SCALE = 2.0


def _fixed(x):
    return math.exp(x) + 1.0


def _reads_a_global(x):
    return x * SCALE


def _kernel_calling(fn, name):
    f = tl.register_function(name, 1, fn, lambda a: a, lambda a: (tl.const(1.0),), numba=fn, replace=True)
    n = tl.size("n")
    x = tl.tensor("x", n)
    return tl.compile(tl.gen(n, lambda i: f(x[i])), threads=1), x


def test_kernel_calling_a_code_fixed_function_is_cached_by_numba():
    k, _ = _kernel_calling(_fixed, "lat_fixed")
    assert "cache=True" in k.source
    xv = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(k(x=xv), np.exp(xv) + 1.0, rtol=1e-15)


def test_kernel_calling_a_function_with_changing_state_is_not_cached():
    k, _ = _kernel_calling(_reads_a_global, "lat_global")
    assert "cache=False" in k.source  # SCALE may change without any file changing
    c = 3.0
    k2, _ = _kernel_calling(lambda x: x * c, "lat_closure")
    assert "cache=False" in k2.source
    np.testing.assert_allclose(k2(x=np.ones(3)), 3.0)


_SCRIPT = """
import sys
sys.path.insert(0, {dir!r})
import numpy as np
import tensorlang as tl
import userfn
f = tl.register_function("lat_shift", 1, userfn.f, lambda x: x, lambda x: (tl.const(1.0),), numba=userfn.f)
n = tl.size("n")
x = tl.tensor("x", n)
k = tl.compile(tl.gen(n, lambda i: f(x[i])), threads=1)
print(k.cache_hit, "cache=True" in k.source, float(k(x=np.ones(3))[0]))
"""


def _run(tmp_path, cache_dir, text=_SCRIPT):
    script = tmp_path / "run.py"
    script.write_text(text.format(dir=str(tmp_path)))
    env = dict(os.environ, TENSORLANG_CACHE_DIR=str(cache_dir), NUMBA_CACHE_DIR="")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    hit, cached, value = out.stdout.strip().splitlines()[-1].split()
    return hit == "True", cached == "True", float(value)


def test_an_edited_function_never_reuses_the_cached_kernel(tmp_path):
    cache_dir = tmp_path / "cache"
    mod = tmp_path / "userfn.py"
    mod.write_text(textwrap.dedent("""
        def f(x):
            return x + 1.0
    """))
    assert _run(tmp_path, cache_dir) == (False, True, 2.0)
    assert _run(tmp_path, cache_dir) == (True, True, 2.0)  # the kernel entry, from the disk cache
    # same file, same function name and line, a different constant
    mod.write_text(textwrap.dedent("""
        def f(x):
            return x + 41.0
    """))
    st = os.stat(mod)
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert _run(tmp_path, cache_dir) == (False, True, 42.0)  # a new key: compiled afresh
    assert _run(tmp_path, cache_dir) == (True, True, 42.0)


_SCRIPT_PARTIAL = """
import sys
sys.path.insert(0, {dir!r})
import numpy as np
import tensorlang as tl
import userfn
g = tl.register_function("lat_g", 1, userfn.g, lambda x: x, lambda x: (tl.const(0.0),), numba=userfn.g)
f = tl.register_function("lat_f", 1, userfn.f, lambda x: x, lambda x: (g(x),), numba=userfn.f)
n = tl.size("n")
x = tl.tensor("x", n)
grad = tl.grad(tl.sum(n, lambda i: f(x[i])), wrt=x)
k = tl.compile(grad.program, threads=1)
print(k.cache_hit, "cache=True" in k.source, float(k(x=np.ones(3))[0]))
"""


def test_a_function_reached_only_through_a_partial_is_in_the_key(tmp_path):
    """The gradient's kernel runs ``g`` through ``f``'s partial (D[f], rule
    6.6) while the program names only ``f``: editing ``g`` must still give
    a new kernel, never the machine code with the old ``g`` inlined."""
    cache_dir = tmp_path / "cache"
    mod = tmp_path / "userfn.py"
    mod.write_text("def f(x):\n    return 2.0 * x\n\n\ndef g(x):\n    return x + 1.0\n")
    assert _run(tmp_path, cache_dir, _SCRIPT_PARTIAL) == (False, True, 2.0)
    assert _run(tmp_path, cache_dir, _SCRIPT_PARTIAL) == (True, True, 2.0)
    mod.write_text("def f(x):\n    return 2.0 * x\n\n\ndef g(x):\n    return x + 41.0\n")
    st = os.stat(mod)
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert _run(tmp_path, cache_dir, _SCRIPT_PARTIAL) == (False, True, 42.0)


def test_first_call_compiles_only_the_entry_it_runs():
    n = tl.size("n")
    x = tl.tensor("x", n)
    y = tl.tensor("y", n)
    prog = tl.sum(n, lambda i: x[i] * y[i]) + tl.sum(n, lambda i: x[i])
    k = tl.compile(prog, threads=1)
    mod = k.module
    assert hasattr(mod, "kernel_parallel")  # a reduction: both variants are generated
    xv, yv = np.arange(5.0), np.ones(5)
    assert k(x=xv, y=yv) == 20.0
    assert len(mod.kernel_serial.signatures) == 1
    assert len(mod.kernel_parallel.signatures) == 0  # never compiled for a one-thread call


def _loop_loss():
    n, T = tl.sizes("n T")
    u0, a, f = tl.tensor("u0", n), tl.scalar("a"), tl.tensor("f", T, n)

    def step(t, u):
        return tl.gen(n, lambda i: u[i] + a * (tl.iverson(i >= 1, u[i - 1]) - u[i]) + 0.1 * tl.sin(u[i]) + f[t, i])

    L = tl.loop(T, u0, step)
    return tl.sum(n, lambda i: L[i] * L[i]), u0, a


def test_a_loop_programs_parts_come_from_the_derived_cache(tmp_path, monkeypatch):
    """A second build of a loop program's gradient runs no pass (its parts'
    adjoints are read from the disk cache) and gives the same gradient, which
    matches central finite differences."""
    from tensorlang.passes.profile import tracing

    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TENSORLANG_DERIVED_CACHE", "1")
    r = np.random.RandomState(3)
    kw = dict(u0=r.rand(6), a=0.3, f=0.1 * r.rand(5, 6))
    loss, u0, a = _loop_loss()
    with tracing() as first:
        g1 = tl.grad(loss, wrt=[u0, a])(**kw)
    loss, u0, a = _loop_loss()  # the same program, built again
    with tracing() as second:
        g2 = tl.grad(loss, wrt=[u0, a])(**kw)
    assert any("adjoint" in s for s in first)
    assert not any("adjoint" in s or "simplify" in s for s in second), second
    np.testing.assert_array_equal(g1[0], g2[0])
    assert g1[1] == g2[1]
    eps = 1e-6
    for k in (0, 4):
        hi, lo = dict(kw, u0=kw["u0"].copy()), dict(kw, u0=kw["u0"].copy())
        hi["u0"][k] += eps
        lo["u0"][k] -= eps
        fd = (tl.evaluate(loss, **hi) - tl.evaluate(loss, **lo)) / (2 * eps)
        np.testing.assert_allclose(g2[0][k], fd, rtol=1e-6)
    fd = (tl.evaluate(loss, **dict(kw, a=kw["a"] + eps)) - tl.evaluate(loss, **dict(kw, a=kw["a"] - eps))) / (2 * eps)
    np.testing.assert_allclose(g2[1], fd, rtol=1e-6)


_SCRIPT_NESTED = """
import numpy as np
from numba.core import event as ev
import tensorlang as tl

compiled = []


class Listener(ev.Listener):
    def on_start(self, e):
        compiled.append(e.data["dispatcher"].py_func.__name__)

    def on_end(self, e):
        pass


ev.register("numba:compile", Listener())
n, m = tl.sizes("n m")
A = tl.tensor("A", n, m)
x = tl.tensor("x", m)
# a 2-D and a 1-D output, a column reduction (partial sums in a zeroed array),
# a shifted access (loop bounds with min/max)
prog = (tl.gen([n, m], lambda i, j: A[i, j] * x[j]),
        tl.gen(m, lambda j: tl.sum(n, lambda i: A[i, j])),
        tl.gen(m, lambda j: tl.iverson(j >= 1, x[j - 1])))
k = tl.compile(tl.pair(prog[0], tl.pair(prog[1], prog[2])), threads=1)
Av, xv = np.arange(12.0).reshape(3, 4), np.arange(4.0) + 1
a, (b, c) = k(A=Av, x=xv)
ok = (np.array_equal(a, Av * xv) and np.array_equal(b, Av.sum(axis=0))
      and np.array_equal(c, np.concatenate([[0.0], xv[:-1]])))
print(ok, ",".join(compiled))
"""


def test_a_first_call_runs_one_numba_compilation(tmp_path):
    """A fresh process with an empty cache compiles exactly the kernel entry it
    runs: arrays, zeroed partial sums and min/max bounds are intrinsics
    (backend/intrinsics.py), not ``np.empty`` / ``np.zeros`` /
    ``advise_huge`` / ``max`` / ``min``, each of which would be a Numba
    compilation of its own (0.03-0.2 s each on a cold first call)."""
    script = tmp_path / "nested.py"
    script.write_text(_SCRIPT_NESTED)
    env = dict(os.environ, TENSORLANG_CACHE_DIR=str(tmp_path / "cache"), NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    ok, names = out.stdout.strip().splitlines()[-1].split()
    assert ok == "True"
    assert names.split(",") == ["kernel_serial"]


def test_kernel_intrinsics_match_numpy_and_the_builtins():
    import numba

    from tensorlang.backend.intrinsics import imax, imin, new_empty, new_empty_huge, new_zeros, new_zeros_huge

    @numba.njit(no_cfunc_wrapper=True)
    def arrays(n, m):
        a = new_zeros((n, m), np.float64)
        b = new_zeros_huge((n * m,), np.float32)  # at least HUGE_MIN_BYTES when n * m >= 2**20
        c = new_empty((n,), np.float64)
        d = new_empty_huge((m, n), np.float64)
        c[:] = 1.0
        d[:, :] = 2.0
        return a, b, c, d

    for n, m in ((0, 3), (3, 5), (1024, 1100)):
        a, b, c, d = arrays(n, m)
        assert (a.shape, a.dtype, b.shape, b.dtype, c.shape, d.shape) == ((n, m), np.float64, (n * m,), np.float32,
                                                                           (n,), (m, n))
        assert all(v.flags.c_contiguous and v.flags.writeable for v in (a, b, c, d))
        assert not a.any() and not b.any() and (c == 1.0).all() and (d == 2.0).all()

    @numba.njit
    def ours(a, b):
        return imax(a, b), imin(a, b)

    @numba.njit
    def builtin(a, b):
        return max(a, b), min(a, b)

    cases = [(3, 7), (7, 3), (-2, -2), (0, -5), (1.5, np.nan), (np.nan, 1.5), (-0.0, 0.0), (0.0, -0.0), (2, 2.5)]
    for a, b in cases:
        got, want = ours(a, b), builtin(a, b)
        assert [type(v) for v in got] == [type(v) for v in want]
        assert [repr(v) for v in got] == [repr(v) for v in want], (a, b)
