"""The kernel cache (paper Section 4.3: programs lowered once, reused): a
cache, never a source of truth.

Key: SHA-256 of the alpha-canonical program (``tensorlang.ir.canonicalize``:
input names, types and relation extents are part of it), the mode, any
further options (``program_key(expr, mode, dtype=...)``), the backend's own
source and the tensorlang, Numba, llvmlite and isl versions.

On disk an entry is ``k_<key>.py`` (the generated module; Numba's
``cache=True`` keeps its machine code beside it in ``__pycache__``) and
``k_<key>.json`` (format, key, versions, spec, SHA-256 of the source and a
checksum over key, source and spec).  Guarantees:

* a store is atomic (temporary file + ``os.replace``; the JSON, written last,
  commits the entry), and rewriting an identical source is skipped, so two
  processes compiling one program at once both end with a correct entry;
* a load trusts an entry only if it parses within size and depth limits,
  names this key and these versions, matches its checksum, has a spec whose
  every argument, rank, relation and result leaf agrees with the program's
  own signature (:func:`check_spec`), and imports to a module whose kernel
  takes exactly the spec's arguments; anything else (damaged, partial,
  foreign, a directory where a file should be) is deleted and rebuilt;
* an unusable directory (a file, not writable) means kernels are written to a
  private temporary directory for this process, with one warning.

In memory: the last :data:`TABLE_SIZE` loaded entries (an LRU; a
``Kernel`` holds its own module, so eviction never breaks one in use).  A
kernel module sits in ``sys.modules`` (Numba's cache loader imports it by
name) only while a Kernel or the LRU holds it; :func:`sweep` removes the rest.

Directory: ``$TENSORLANG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorlang``,
else ``~/.cache/tensorlang``.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections import OrderedDict

from ..errors import TensorLangError
from ..ir import Node, canonicalize, children
from .cache_spec import BadEntry, check_spec, kernel_arity

BACKEND_VERSION = "h5-2"  # h5-2: specs carry strict_witnesses (strict.py)
FORMAT = 2
MAX_META_BYTES = 1 << 22  # a spec is a few KB; refuse to parse a huge file
MAX_JSON_DEPTH = 32  # a spec nests a handful of levels
TABLE_SIZE = int(os.environ.get("TENSORLANG_KERNEL_TABLE_SIZE", "64"))
_PREFIX = "tensorlang_kernel_"
_CODE_HASH = None
_VERSIONS = None
_LOCK = threading.RLock()
_TABLE: "OrderedDict[str, tuple]" = OrderedDict()
_OWNED: set = set()  # names this module put in sys.modules
_FALLBACK = {"dir": None, "warned": set(), "broken": set()}


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


def versions() -> dict:
    """The versions a kernel depends on (part of every key and every entry)."""
    global _VERSIONS
    if _VERSIONS is None:
        import importlib.metadata as md

        def version(*dists: str) -> str:
            # the installed distribution's metadata: no import of Numba (0.25 s)
            # or islpy just to read a version string
            for dist in dists:
                try:
                    return md.version(dist)
                except md.PackageNotFoundError:  # a source tree that is not installed
                    pass
            return "source" if dists[0] == "tensorlang" else "?"

        _VERSIONS = {"tensorlang": version("tensorlang"), "numba": version("numba"), "llvmlite": version("llvmlite"),
                     "isl": version("islpy", "islpy-barvinok"), "python": sys.version.split()[0],
                     "backend": code_hash(), "format": FORMAT}
    return _VERSIONS


# --------------------------------------------------------------------------
# Keys


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


def node_hash(node) -> str:
    """SHA-256 of an IR term's structure and leaf values (exact: ``repr`` of
    every constant), as in :func:`program_key`."""
    return _hash(node, {})


def program_key(program, mode: str, **options) -> str:
    """Key of ``program`` compiled in ``mode`` with ``options`` (e.g. ``dtype="float32"``)."""
    h = _hash(canonicalize(program), {})
    opts = ";".join(f"{k}={options[k]!r}" for k in sorted(options))
    v = json.dumps(versions(), sort_keys=True)
    return hashlib.sha256(f"{v}|{mode}|{opts}|{h}".encode()).hexdigest()[:40]


# --------------------------------------------------------------------------
# The directory


def _configured_dir() -> str:
    d = os.environ.get("TENSORLANG_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "tensorlang")
    return d


def cache_dir() -> str:
    """The configured directory, created if needed (raises OSError if it cannot be)."""
    d = _configured_dir()
    os.makedirs(d, exist_ok=True)
    return d


def _usable(d: str) -> bool:
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return False
    return os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)


def _write_dir() -> str:
    """Where entries are read and written: the configured directory, or (once it
    proves unusable) a private temporary directory for this process."""
    d = _configured_dir()
    if d not in _FALLBACK["broken"] and _usable(d):
        return d
    with _LOCK:
        if d not in _FALLBACK["warned"]:
            _FALLBACK["warned"].add(d)
            warnings.warn(f"tensorlang: the kernel cache directory {d!r} is not usable (not a writable directory, "
                          "or a write into it failed); "
                          "kernels are compiled for this process only (set TENSORLANG_CACHE_DIR)",
                          RuntimeWarning, stacklevel=4)
        if _FALLBACK["dir"] is None:
            try:
                tmp = tempfile.mkdtemp(prefix="tensorlang-kernels-")
            except OSError as exc:
                raise TensorLangError(f"no writable directory for compiled kernels ({exc}); "
                                      "set TENSORLANG_CACHE_DIR to a writable directory") from None
            atexit.register(shutil.rmtree, tmp, True)
            _FALLBACK["dir"] = tmp
        return _FALLBACK["dir"]


def paths(key: str, d: str | None = None):
    d = d or _write_dir()
    return os.path.join(d, f"k_{key}.py"), os.path.join(d, f"k_{key}.json")


# --------------------------------------------------------------------------
# Load and store


def _checksum(key: str, src: str, spec) -> str:
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{key}\0{src}\0{blob}".encode()).hexdigest()


def _depth(x, limit: int, d: int = 0) -> int:
    if d > limit:
        raise BadEntry("JSON nested too deep")
    if isinstance(x, dict):
        return max([_depth(v, limit, d + 1) for v in x.values()], default=d)
    if isinstance(x, list):
        return max([_depth(v, limit, d + 1) for v in x], default=d)
    return d


def _read_text(path: str, limit: int) -> str:
    if not os.path.isfile(path):
        raise BadEntry(f"{os.path.basename(path)} is not a file")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BadEntry(f"{os.path.basename(path)} is larger than {limit} bytes")
    return data.decode("utf-8")


def _read_entry(key: str, d: str, program, mode):
    src_path, meta_path = paths(key, d)
    if not os.path.lexists(meta_path):
        # The JSON commits an entry and is written last: without it the entry
        # is absent, or another process is mid-store.  Never delete its source
        # (that process is about to import it); a store replaces it atomically.
        return None
    meta_text = _read_text(meta_path, MAX_META_BYTES)
    try:
        meta = json.loads(meta_text)
    except (ValueError, RecursionError) as exc:
        raise BadEntry(f"the JSON does not parse ({type(exc).__name__})") from None
    _depth(meta, MAX_JSON_DEPTH)
    if not isinstance(meta, dict):
        raise BadEntry("the JSON is not an object")
    for field, want in (("format", FORMAT), ("key", key), ("versions", versions())):
        if meta.get(field) != want:
            raise BadEntry(f"its {field} is {meta.get(field)!r}, expected {want!r}")
    src = _read_text(src_path, 1 << 26)
    spec = meta.get("spec")
    if meta.get("sha256") != hashlib.sha256(src.encode()).hexdigest():
        raise BadEntry("the source does not match its hash")
    if meta.get("checksum") != _checksum(key, src, spec):
        raise BadEntry("the spec does not match its checksum")
    if program is not None:
        check_spec(spec, program, mode)
    mod = _import(key, src_path)
    _check_module(mod, spec)
    return mod, spec, src


def _check_module(mod, spec) -> None:
    for name in ("kernel_serial", "kernel_parallel"):
        # kernel_parallel takes the thread count last (codegen.THREADS_ARG)
        want = kernel_arity(spec) + (name == "kernel_parallel")
        fn = getattr(mod, name, None)
        if fn is None:
            if name == "kernel_serial":
                raise BadEntry("the module defines no kernel_serial")
            continue
        py = getattr(fn, "py_func", fn)
        code = getattr(py, "__code__", None)
        if code is None or code.co_argcount != want or code.co_flags & 0x0C:  # no *args / **kw
            raise BadEntry(f"{name} does not take the spec's {want} arguments")


def _discard(key: str, d: str) -> None:
    for p in paths(key, d):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.lexists(p):
                os.unlink(p)
        except OSError:
            pass


def load(key: str, program=None, mode: str | None = None):
    """``(module, spec, source)`` for a valid entry, else None (a damaged entry
    is removed).  With ``program`` (and ``mode``) the spec is checked against
    the program's signature."""
    with _LOCK:
        got = _TABLE.get(key)
        if got is not None:
            _TABLE.move_to_end(key)
            return got
    d = _write_dir()
    try:
        got = _read_entry(key, d, program, mode)
    except (BadEntry, OSError, UnicodeDecodeError, SyntaxError, ImportError) as exc:
        _debug(f"cache entry {key} rebuilt: {exc}")
        _discard(key, d)
        return None
    except Exception as exc:  # the module raised while importing: not ours to trust
        _debug(f"cache entry {key} rebuilt: {type(exc).__name__}: {exc}")
        _discard(key, d)
        return None
    if got is not None:
        _remember(key, got)
    return got


def store(key: str, src: str, spec: dict):
    """Write the entry atomically and return its imported module.  A directory
    that fails a write (full, read-only, removed) is given up for the process:
    the entry is written to the fallback directory instead, with one warning."""
    d = _write_dir()
    try:
        return _store_in(d, key, src, spec)
    except OSError:
        if d == _FALLBACK["dir"]:
            raise
        with _LOCK:
            _FALLBACK["broken"].add(d)
        return _store_in(_write_dir(), key, src, spec)


def _store_in(d: str, key: str, src: str, spec: dict):
    src_path, meta_path = paths(key, d)
    meta = {"format": FORMAT, "key": key, "versions": versions(), "spec": spec,
            "sha256": hashlib.sha256(src.encode()).hexdigest(), "checksum": _checksum(key, src, spec),
            "version": BACKEND_VERSION}
    for p in (src_path, meta_path):  # a directory (or other non-file) where the entry goes
        if os.path.lexists(p) and not os.path.isfile(p):
            _discard(key, d)
    if not _same_text(src_path, src):  # rewriting identical text would only unsettle Numba's stamps
        _atomic_write(src_path, src)
    mod = _import(key, src_path)  # (just generated: its arity is checked when it is next loaded)
    _atomic_write(meta_path, json.dumps(meta))
    _remember(key, (mod, spec, src))
    return mod


def _same_text(path: str, text: str) -> bool:
    try:
        return os.path.isfile(path) and _read_text(path, 1 << 26) == text
    except (OSError, UnicodeDecodeError, BadEntry):
        return False


def _atomic_write(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp_", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _import(key: str, path: str):
    name = _PREFIX + key
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadEntry(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports Numba: here, not at the top, so a process that loads no kernel never pays for it
    from .warm_load import warm_loading_module

    warm_loading_module(mod)  # cached machine code loads without Numba's compiler set-up
    with _LOCK:
        sys.modules[name] = mod  # Numba's cache loader imports the module by name
        _OWNED.add(name)
    return mod


# --------------------------------------------------------------------------
# Memory: the LRU table and sys.modules


_EVICTED = [0]


def _remember(key: str, entry) -> None:
    with _LOCK:
        _TABLE[key] = entry
        _TABLE.move_to_end(key)
        while len(_TABLE) > max(0, TABLE_SIZE):
            _TABLE.popitem(last=False)
            _EVICTED[0] += 1
        due = _EVICTED[0] >= max(1, TABLE_SIZE // 2)
        if due:
            _EVICTED[0] = 0
    if due:
        sweep()


def sweep() -> int:
    """Drop from ``sys.modules`` every kernel module that no LRU entry and
    nothing outside Numba holds (a live Kernel holds its module); returns how
    many were dropped.  One heap scan (``gc.get_referrers``) per sweep, so
    :func:`_remember` sweeps once per :data:`TABLE_SIZE` // 2 evictions."""
    import gc
    import types

    from numba.core.bytecode import FunctionIdentity

    with _LOCK:
        in_table = {id(e[0]) for e in _TABLE.values()}
        cands = []
        for name in list(_OWNED):
            mod = sys.modules.get(name)
            if mod is None:
                _OWNED.discard(name)
            elif id(mod) not in in_table:
                cands.append(mod)
        if not cands:
            return 0
        ids = {id(m): m for m in cands}
        held = set()
        referrers = gc.get_referrers(*cands)
        for r in referrers:
            # sys.modules, our own list, Numba's compile records (Numba keeps
            # its compiled code, and so these, for the life of the process)
            if r is sys.modules or r is cands or r is ids or isinstance(r, (FunctionIdentity, types.FrameType)):
                continue
            held.update(id(m) for m in gc.get_referents(r) if id(m) in ids)
        del referrers
        dropped = 0
        for i, m in ids.items():
            if i not in held and sys.modules.get(m.__name__) is m:
                del sys.modules[m.__name__]
                _OWNED.discard(m.__name__)
                dropped += 1
        return dropped


def clear_memory() -> None:
    """Forget the in-memory table (entries on disk stay)."""
    with _LOCK:
        _TABLE.clear()
    sweep()


def _debug(msg: str) -> None:
    if os.environ.get("TENSORLANG_DEBUG_CACHE"):
        print(f"tensorlang: {msg}", file=sys.stderr)
