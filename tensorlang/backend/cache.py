"""On-disk kernel cache, content-addressed by the program.

Key: SHA-256 of the backend version, the mode and a Merkle hash of the
canonicalised program (``tensorlang.ir.canonicalize``: alpha-equivalent
programs share an entry; input names, types and relation extents are part
of the hash).  An entry is two files in the cache directory:

* ``k_<key>.py``   the generated kernel module (Numba's ``cache=True``
  stores its compiled code next to it, in ``__pycache__``);
* ``k_<key>.json`` the argument/result spec and the SHA-256 of the source.

Writes are atomic (temporary file + ``os.replace``; the JSON, written last,
commits the entry).  An entry whose JSON does not parse, whose source hash
does not match or whose module does not import is rebuilt, never trusted.

Directory: ``$TENSORLANG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorlang``,
else ``~/.cache/tensorlang``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile

from ..ir import Node, canonicalize, children

BACKEND_VERSION = "h5-1"
_CODE_HASH = None


def code_hash() -> str:
    """Hash of the backend's own source, so a changed backend never reuses old kernels."""
    global _CODE_HASH
    if _CODE_HASH is None:
        h = hashlib.sha256(BACKEND_VERSION.encode())
        d = os.path.dirname(os.path.abspath(__file__))
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
        _CODE_HASH = h.hexdigest()[:16]
    return _CODE_HASH


def cache_dir() -> str:
    d = os.environ.get("TENSORLANG_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "tensorlang")
    os.makedirs(d, exist_ok=True)
    return d


def _hash(n, memo) -> str:
    if isinstance(n, Node):
        got = memo.get(id(n))
        if got is None:
            parts = [type(n).__name__] + [_hash(c, memo) for c in children(n)]
            got = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
            memo[id(n)] = got
        return got
    if isinstance(n, tuple):
        return "(" + ",".join(_hash(c, memo) for c in n) + ")"
    return f"{type(n).__name__}:{n!r}"


def program_key(program, mode: str) -> str:
    h = _hash(canonicalize(program), {})
    return hashlib.sha256(f"{code_hash()}|{mode}|{h}".encode()).hexdigest()[:40]


def _atomic_write(path: str, text: str) -> None:
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp_", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def paths(key: str):
    d = cache_dir()
    return os.path.join(d, f"k_{key}.py"), os.path.join(d, f"k_{key}.json")


def load(key: str):
    """(module, spec, source) for a valid entry, else None."""
    src_path, meta_path = paths(key)
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(src_path) as f:
            src = f.read()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("sha256") != hashlib.sha256(src.encode()).hexdigest():
        return None
    try:
        mod = _import(key, src_path)
    except Exception:
        return None
    return mod, meta["spec"], src


def store(key: str, src: str, spec: dict):
    src_path, meta_path = paths(key)
    _atomic_write(src_path, src)
    meta = {"sha256": hashlib.sha256(src.encode()).hexdigest(), "spec": spec, "version": BACKEND_VERSION}
    mod = _import(key, src_path)
    _atomic_write(meta_path, json.dumps(meta))
    return mod


def _import(key: str, path: str):
    name = f"tensorlang_kernel_{key}"
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "__file__", None) == path:
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[name] = mod
    return mod
