"""User scalar functions in kernels: Numba's on-disk cache is used only where
the source file fixes the machine code, and an edited function is never
served stale (issue #14 item 6, backend/scalars.py).

The end-to-end check runs fresh processes on a function in a temporary
module: the first compiles and writes the cache, an edit of the function
gives the new value in the next process, and the entries are Numba's own
(keyed by file, name and line, invalidated by the file's stamp).
"""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np

from tensorlang.backend.scalars import cacheable
from tensorlang.conditionals import _maximum_nb, _softplus_nb

SCALE = 2.0


def _plain(x):
    return math.exp(x) + 1.0


def _reads_a_global(x):
    return x * SCALE


def test_cacheable_only_when_the_source_file_fixes_the_code():
    assert cacheable(_maximum_nb) and cacheable(_softplus_nb) and cacheable(_plain)
    k = 3.0
    assert not cacheable(lambda x: x * k)  # a closure: its value is not in the file
    assert not cacheable(lambda x, k=k: x * k)  # a default value, likewise
    assert not cacheable(_reads_a_global)  # a global that may change at run time
    ns: dict = {}
    exec("def g(x):\n    return x + 1.0\n", ns)
    assert not cacheable(ns["g"])  # no source file to validate the cache against
    assert not cacheable(np.exp)  # not a Python function


_SCRIPT = """
import sys
sys.path.insert(0, {dir!r})
import numpy as np
import tensorlang as tl
from tensorlang.backend.scalars import kernel_function
import userfn
tl.register_function("shift", 1, userfn.f, lambda x: x, lambda x: (tl.const(1.0),), numba=userfn.f)
print(kernel_function("shift")(1.0))
"""


def _run(tmp_path) -> float:
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT.format(dir=str(tmp_path)))
    env = dict(os.environ, NUMBA_CACHE_DIR="")  # Numba's default: __pycache__ next to the source
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


def test_an_edited_user_function_is_compiled_again(tmp_path):
    mod = tmp_path / "userfn.py"
    mod.write_text(textwrap.dedent("""
        def f(x):
            return x + 1.0
    """))
    assert _run(tmp_path) == 2.0
    cached = [p for p in (tmp_path / "__pycache__").iterdir() if p.suffix in (".nbi", ".nbc")]
    assert cached, "the first process left no Numba cache entry"
    # same file name, same function name and line, different body
    mod.write_text(textwrap.dedent("""
        def f(x):
            return x + 41.0
    """))
    st = os.stat(mod)
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a distinct stamp even on coarse clocks
    assert _run(tmp_path) == 42.0
    assert _run(tmp_path) == 42.0  # and from the cache the second time
