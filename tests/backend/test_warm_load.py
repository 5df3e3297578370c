"""A warm process loads cached kernels without Numba's compiler set-up
(issue #14 item 6; backend/warm_load.py).

Two fresh processes share a kernel cache and a Numba cache.  The first
compiles; the second must reach every result with Numba's target context
never refreshed (the registry imports that were most of a warm process's
first result), and every result must still be right: a serial gradient
(the deconvolution's), a reduction's parallel variant on two threads, a kernel calling
a user's scalar function, a BLAS matrix-vector product, and the finiteness
scan that planned calls use (loaded from Numba's cache on a later call).
After the warm loads the same process compiles a program nobody cached:
Numba's compiler then refreshes the context itself and the kernel is right.
Every value is checked against NumPy in the child.
"""

import json
import os
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {dir!r})
    from numba.core import base
    refreshes = [0]
    _orig = base.BaseContext.refresh
    def counting(self):
        refreshes[0] += 1
        return _orig(self)
    base.BaseContext.refresh = counting

    import numpy as np
    import tensorlang as tl
    import userfn

    rng = np.random.default_rng(0)
    n, m = tl.sizes("n m")
    x = tl.tensor("x", n + m - 1); c = tl.tensor("c", m); z = tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    N, M = 5000, 7
    d = dict(x=rng.normal(size=N + M - 1), c=rng.normal(size=M), z=rng.normal(size=N))
    r = np.convolve(d["x"], d["c"], mode="valid") - d["z"]
    want_x = 2 * np.correlate(r, d["c"], mode="full")
    want_c = 2 * np.correlate(d["x"], r, mode="valid")[::-1]
    ok = []
    g = tl.grad(loss, wrt=[x, c], threads=1)
    for _ in range(3):  # the second and later calls run the finiteness scan
        gx, gc = g(**d)
        ok.append(bool(np.allclose(gx, want_x, rtol=1e-10, atol=1e-9) and np.allclose(gc, want_c, rtol=1e-10, atol=1e-9)))
    par = tl.compile(tl.sum(n, lambda i: z[i] * z[i]), threads=2)  # the parallel variant: parfors threads
    ok.append(bool(np.isclose(par(z=d["z"]), d["z"] @ d["z"], rtol=1e-12)))

    f = tl.register_function("warm_shift", 1, userfn.f, lambda a: a, lambda a: (tl.const(1.0),), numba=userfn.f)
    k = tl.compile(tl.gen(n, lambda i: f(z[i])), threads=1)
    ok.append(bool(np.allclose(k(z=d["z"]), np.exp(d["z"]) + 1.0, rtol=1e-14)))

    A = tl.tensor("A", n, m)
    mv = tl.compile(tl.gen(n, lambda i: tl.sum(m, lambda j: A[i, j] * c[j])), threads=1)
    Av = rng.normal(size=(400, 300)); cv = rng.normal(size=300)
    for _ in range(2):
        ok.append(bool(np.allclose(mv(A=Av, c=cv), Av @ cv, rtol=1e-12)))
    loaded = refreshes[0]

    fresh = tl.compile(tl.gen(n, lambda i: z[i] * {salt} + 1.0), threads=1)  # never cached
    ok.append(bool(np.allclose(fresh(z=d["z"]), d["z"] * {salt} + 1.0, rtol=1e-15)))
    print("@@" + json.dumps(dict(ok=ok, loaded=loaded, after_compile=refreshes[0])))
    """
)


def _child(tmp_path, salt):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(dir=str(tmp_path), salt=salt))
    env = dict(os.environ, TENSORLANG_CACHE_DIR=str(tmp_path / "cache"), NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               TENSORLANG_RUNTIME="compiled")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    line = [s for s in out.stdout.splitlines() if s.startswith("@@")][-1]
    return json.loads(line[2:])


def test_warm_process_loads_every_kernel_without_refreshing_numba(tmp_path):
    (tmp_path / "userfn.py").write_text("import math\n\n\ndef f(a):\n    return math.exp(a) + 1.0\n")
    cold = _child(tmp_path, 1.25)
    assert all(cold["ok"]), cold
    assert cold["loaded"] >= 1  # it compiled: Numba refreshed its context to do so
    warm = _child(tmp_path, 1.5)  # a new salt: the last program is not in the cache
    assert all(warm["ok"]) and len(warm["ok"]) == len(cold["ok"]), warm
    assert warm["loaded"] == 0, warm  # every kernel, the scan and the user's function came from the caches
    assert warm["after_compile"] >= 1  # and a real compilation still prepared the context
