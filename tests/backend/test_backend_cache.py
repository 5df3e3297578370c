"""Backend kernel cache (issue 6): across processes, atomic entries, corrupt
entries rebuilt, configurable directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import tensorlang as tl
from tensorlang.backend import cache

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorlang as tl
    n, m = tl.sizes("n m")
    x = tl.tensor("x", n + m - 1); c = tl.tensor("c", m)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    k = tl.compile(y, threads=1)
    out = k(x=np.arange(6.0), c=np.array([1.0, 2.0, 3.0]))
    ran = next(iter(k._plans.values())).fn  # the entry the call ran (its size class's: size_classes.py)
    print(json.dumps({"hit": k.cache_hit, "key": k.key, "out": out.tolist(),
                      "numba_hits": sum(ran.stats.cache_hits.values()),
                      "numba_misses": sum(ran.stats.cache_misses.values())}))
    """
)


def _run(cache_dir):
    env = {**os.environ, "TENSORLANG_CACHE_DIR": str(cache_dir)}
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_cache_across_two_processes(tmp_path):
    first = _run(tmp_path)
    second = _run(tmp_path)
    want = np.convolve(np.arange(6.0), [1.0, 2.0, 3.0], mode="valid").tolist()
    assert first["out"] == want and second["out"] == want
    assert first["hit"] is False and second["hit"] is True
    assert first["key"] == second["key"]
    # Numba compiled in the first process and loaded its own cache in the second
    assert first["numba_misses"] >= 1
    assert second["numba_hits"] >= 1 and second["numba_misses"] == 0
    files = os.listdir(tmp_path)
    assert f"k_{first['key']}.py" in files and f"k_{first['key']}.json" in files
    assert not [f for f in files if f.startswith(".tmp_")]  # atomic writes leave no temporaries


def test_corrupt_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    n = tl.size("n")
    x = tl.tensor("x", n)
    e = tl.gen(n, lambda i: 3 * x[i] + 1)
    k = tl.compile(e, threads=1)
    src_path, meta_path = cache.paths(k.key)
    # corrupt the source: the stored hash no longer matches, so it is not trusted
    with open(src_path, "a") as f:
        f.write("\nraise RuntimeError('tampered')\n")
    cache.clear_memory()  # as a new process would: the disk entry is what is judged
    k2 = tl.compile(e, threads=1)
    assert k2.cache_hit is False
    np.testing.assert_array_equal(k2(x=np.arange(4.0)), 3 * np.arange(4.0) + 1)
    # corrupt the metadata
    with open(meta_path, "w") as f:
        f.write("{not json")
    cache.clear_memory()
    k3 = tl.compile(e, threads=1)
    assert k3.cache_hit is False
    json.load(open(meta_path))
    cache.clear_memory()
    assert tl.compile(e, threads=1).cache_hit is True


def test_alpha_equivalent_programs_share_an_entry_and_modes_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    n = tl.size("n")
    x = tl.tensor("x", n)
    e1 = tl.gen(n, lambda i: x[i] * x[i])
    e2 = tl.gen(n, lambda k: x[k] * x[k])
    assert cache.program_key(e1, "sparse") == cache.program_key(e2, "sparse")
    assert cache.program_key(e1, "sparse") != cache.program_key(e1, "naive")
    y = tl.tensor("y", n)
    assert cache.program_key(e1, "sparse") != cache.program_key(tl.gen(n, lambda i: y[i] * y[i]), "sparse")


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("TENSORLANG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == os.path.join(str(tmp_path), "tensorlang")
