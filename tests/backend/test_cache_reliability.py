"""Issue 15, Cache: the kernel cache is a cache, never a source of truth.
Every damaged, partial or foreign entry is rebuilt (and the result checked
against NumPy); an unusable directory compiles for the process with one
warning; two processes compiling one program at once both get correct
kernels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import cache

n = tl.size("n")
x = tl.tensor("x", n)
y = tl.tensor("y", n)
PROG = tl.gen(n, lambda i: x[i] - 2 * y[i])  # argument order matters
XV, YV = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 40.0])
WANT = XV - 2 * YV


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    k = tl.compile(PROG, threads=1)
    np.testing.assert_array_equal(k(x=XV, y=YV), WANT)
    cache.clear_memory()  # from here on, as a new process: only the disk entry counts
    yield k.key
    cache.clear_memory()


def _meta(key):
    return cache.paths(key)[1]


def _edit_meta(key, edit):
    with open(_meta(key)) as f:
        meta = json.load(f)
    edit(meta)
    with open(_meta(key), "w") as f:
        json.dump(meta, f)


def _recompiles_correctly():
    k = tl.compile(PROG, threads=1)
    np.testing.assert_array_equal(k(x=XV, y=YV), WANT)
    return k


def test_an_intact_entry_is_a_hit(fresh):
    assert _recompiles_correctly().cache_hit is True


def test_swapped_arguments_in_the_spec(fresh):
    def swap(meta):
        ins = meta["spec"]["inputs"]
        assert [i[0] for i in ins] == ["x", "y"]
        ins.reverse()

    _edit_meta(fresh, swap)
    assert _recompiles_correctly().cache_hit is False
    assert _recompiles_correctly().cache_hit is True  # the rebuilt entry is trusted again


@pytest.mark.parametrize("edit", [
    lambda m: m["spec"]["inputs"][0].__setitem__(2, 2),  # rank 2: reads out of bounds
    lambda m: m["spec"].__setitem__("outputs", ["leaf", 7]),
    lambda m: m["spec"]["inputs"].append(["z", [], 1]),  # an input the program does not have
    lambda m: m["spec"].__setitem__("sizes", ["n", "n"]),
    lambda m: m["spec"].pop("inputs"),
    lambda m: m.pop("checksum"),
    lambda m: m.pop("spec"),
    lambda m: m.__setitem__("key", "0" * 40),
    lambda m: m["versions"].__setitem__("numba", "0.1"),
])
def test_damaged_spec_is_rebuilt(fresh, edit):
    _edit_meta(fresh, edit)
    assert _recompiles_correctly().cache_hit is False


def test_spec_checked_against_the_program_even_with_a_valid_checksum(fresh):
    """A spec whose checksum was recomputed is still checked against the
    program's signature (a rank the input's type does not have)."""
    src_path, meta_path = cache.paths(fresh)
    src = open(src_path).read()

    def bad_rank(meta):
        meta["spec"]["inputs"][0][2] = 3
        meta["checksum"] = cache._checksum(fresh, src, meta["spec"])

    _edit_meta(fresh, bad_rank)
    assert _recompiles_correctly().cache_hit is False


@pytest.mark.parametrize("damage", ["deep_json", "truncated", "empty", "binary", "dir_json", "dir_py",
                                    "missing_py", "missing_json", "source_edit"])
def test_damaged_files_are_rebuilt(fresh, damage):
    src_path, meta_path = cache.paths(fresh)
    if damage == "deep_json":
        open(meta_path, "w").write("[" * 100000 + "]" * 100000)
    elif damage == "truncated":
        text = open(meta_path).read()
        open(meta_path, "w").write(text[: len(text) // 2])
    elif damage == "empty":
        open(meta_path, "w").close()
    elif damage == "binary":
        open(meta_path, "wb").write(b"\xff\xfe\x00garbage")
    elif damage in ("dir_json", "dir_py"):
        p = meta_path if damage == "dir_json" else src_path
        os.unlink(p)
        os.makedirs(os.path.join(p, "inner"))
    elif damage == "missing_py":
        os.unlink(src_path)
    elif damage == "missing_json":
        os.unlink(meta_path)
    elif damage == "source_edit":  # same length, different meaning: caught by the hash
        text = open(src_path).read()
        open(src_path, "w").write(text.replace("-", "+", 1) if "-" in text else text + "#")
    assert _recompiles_correctly().cache_hit is False
    assert os.path.isfile(src_path) and os.path.isfile(meta_path)


def test_foreign_entry_is_rebuilt(fresh):
    """Another program's entry copied under this key is not trusted."""
    other = tl.gen(n, lambda i: 5 * x[i] + y[i])
    ko = tl.compile(other, threads=1)
    cache.clear_memory()
    for a, b in zip(cache.paths(ko.key), cache.paths(fresh)):
        shutil.copyfile(a, b)
    assert _recompiles_correctly().cache_hit is False


@pytest.mark.parametrize("kind", ["file", "under_a_file"])
def test_unusable_cache_dir_compiles_in_memory_with_one_warning(tmp_path, monkeypatch, kind):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("I am a file")
    target = blocker if kind == "file" else blocker / "sub"
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(target))
    cache.clear_memory()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = tl.compile(PROG, threads=1)
        np.testing.assert_array_equal(k(x=XV, y=YV), WANT)
        loss = tl.sum(n, lambda i: x[i] * x[i] * y[i])
        g = tl.grad(loss, wrt=x)
        np.testing.assert_allclose(g(x=XV, y=YV), 2 * XV * YV)
        tl.compile(tl.gen(n, lambda i: x[i] + y[i]), threads=1)
    mine = [w for w in caught if "kernel cache directory" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert blocker.read_text() == "I am a file"
    cache.clear_memory()


def test_key_covers_options_and_versions(monkeypatch):
    base = cache.program_key(PROG, "sparse")
    assert cache.program_key(PROG, "sparse", dtype="float32") != base
    assert cache.program_key(PROG, "sparse", dtype="float32") == cache.program_key(PROG, "sparse", dtype="float32")
    assert cache.program_key(PROG, "naive") != base
    monkeypatch.setattr(cache, "_VERSIONS", {**cache.versions(), "numba": "0.0.1"})
    assert cache.program_key(PROG, "sparse") != base


def test_modules_leave_sys_modules_and_the_table_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "TABLE_SIZE", 2)
    cache.clear_memory()
    kernels = [tl.compile(tl.gen(n, lambda i: x[i] * c), threads=1) for c in (3.0, 5.0, 7.0, 11.0)]
    assert len(cache._TABLE) == 2
    names = [cache._PREFIX + k.key for k in kernels]
    assert all(nm in sys.modules for nm in names)  # each held by a live Kernel
    for k, c in zip(kernels, (3.0, 5.0, 7.0, 11.0)):
        np.testing.assert_array_equal(k(x=XV), c * XV)
    del k, kernels
    cache.clear_memory()
    assert not [nm for nm in names if nm in sys.modules]


RACE = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import tensorlang as tl
    start = float(sys.argv[1])
    while time.time() < start:
        time.sleep(0.005)
    n = tl.size("n")
    x = tl.tensor("x", n); y = tl.tensor("y", n)
    k = tl.compile(tl.gen(n, lambda i: tl.sum(n, lambda j: x[i] * y[j]) - 2 * y[i]), threads=1)
    out = k(x=np.arange(5.0), y=np.arange(5.0) ** 2)
    print(json.dumps({"hit": k.cache_hit, "out": out.tolist()}))
    """
)


def test_two_processes_compiling_at_once(tmp_path):
    import time

    env = {**os.environ, "TENSORLANG_CACHE_DIR": str(tmp_path)}
    xv, yv = np.arange(5.0), np.arange(5.0) ** 2
    want = (xv * yv.sum() - 2 * yv).tolist()
    start = str(time.time() + 6.0)  # both past their imports, then compile together
    procs = [subprocess.Popen([sys.executable, "-c", RACE, start], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["out"] == want
    third = subprocess.run([sys.executable, "-c", RACE, "0"], env=env, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr
    res = json.loads(third.stdout.strip().splitlines()[-1])
    assert res["out"] == want and res["hit"] is True
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp_")]


def test_a_failing_write_moves_to_a_private_directory(tmp_path, monkeypatch):
    """A directory that passes the checks but fails a write (full disk,
    read-only remount) is given up with one warning; kernels stay correct."""
    import errno

    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_FALLBACK", {"dir": None, "warned": set(), "broken": set()})
    cache.clear_memory()
    real = cache._atomic_write

    def full_disk(path, text):
        if os.path.dirname(path) == str(tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(path, text)

    monkeypatch.setattr(cache, "_atomic_write", full_disk)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for c in (2.0, 3.0):
            k = tl.compile(tl.gen(n, lambda i: c * x[i] - y[i]), threads=1)
            np.testing.assert_array_equal(k(x=XV, y=YV), c * XV - YV)
    assert len([w for w in caught if "kernel cache directory" in str(w.message)]) == 1
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    cache.clear_memory()
