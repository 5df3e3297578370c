"""What ``import tensorlang`` and a float gradient load (issue #14 item 6).

sympy is most of the import's time (~0.4 s of ~0.8 s) and only exact
evaluation and symbolic costs use it; Numba is needed only when a kernel is
built.  Checked in a fresh process by the modules loaded, not by timing.
"""

import os
import subprocess
import sys

import numpy as np

_PROBE = """
import sys
import numpy as np
import tensorlang as tl
print("import", "sympy" in sys.modules, "numba" in sys.modules)
n, m = tl.sizes("n m")
x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
loss = tl.sum(n, lambda i: (tl.relu(y[i]) - z[i]) ** 2)
g = tl.grad(loss, wrt=c)
got = g(x=np.arange(102.0) / 100, c=np.ones(3), z=np.zeros(100))
xs = np.arange(102.0) / 100
want = np.array([sum(2 * (xs[i:i + 3][::-1] @ np.ones(3)) * xs[i + 2 - j] for i in range(100)) for j in range(3)])
print("grad", "sympy" in sys.modules, bool(np.allclose(got, want, rtol=1e-12)))
"""


def test_import_and_a_float_gradient_do_not_load_sympy(tmp_path):
    env = dict(os.environ, TENSORLANG_CACHE_DIR=str(tmp_path), TENSORLANG_RUNTIME="compiled")
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert lines["import"] == "False False"  # neither sympy nor Numba on import
    assert lines["grad"] == "False True"  # the kernel built and right, still no sympy


def test_exact_evaluation_still_loads_sympy_when_asked():
    import sympy

    import tensorlang as tl

    n = tl.size("n")
    x = tl.tensor("x", n)
    e = tl.sum(n, lambda i: tl.exp(x[i]) + tl.maximum(x[i], 0.0))
    a = sympy.Symbol("a")
    got = tl.evaluate(e, x=np.array([a], dtype=object))
    assert sympy.simplify(got - (sympy.exp(a) + sympy.Max(a, 0))) == 0

