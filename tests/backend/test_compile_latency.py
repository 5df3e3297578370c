"""Compile latency without stale kernels (issue #14 item 6; paper Section 4.3).

* A kernel calling user scalar functions is kept in Numba's disk cache when
  every such function's machine code is fixed by its code (a module-level
  function, ``scalars.cacheable``), whose fingerprint is in the kernel's key;
  otherwise (a closure, a default value, a global that may change) it is
  compiled in every process.  An edited function gives a new kernel (a new
  key), never the old machine code: checked in fresh processes.
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


def _run(tmp_path, cache_dir):
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT.format(dir=str(tmp_path)))
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
