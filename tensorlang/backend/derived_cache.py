"""The disk cache of derived programs (issue 14 item 6; paper Section 6: a
derivative is a program, built once and reused like any other).

A warm process must not re-run the passes (sharing ... Dᵀ, simplify) nor the
kernel preparation for a derivative it built before.  An entry holds the
derived program (what ``tl.grad`` & co. build from the source) and, once the
backend compiles it, the kernel is found by ``backend.cache`` under the
derived program's own key (kernel preparation, ``backend.prepare``, takes a
few milliseconds and is re-run; lowering and code generation are not).

Key: the full text of the request (kind, ``wrt`` names, options, the
fingerprints of the user functions the source calls, the versions of
tensorlang, Numba, llvmlite, isl and Python, and a hash of every source file
of the package, so an edited pass never reuses an old derivative) followed by
the pickled alpha-canonical source program (``ir.canonicalize``; nodes are
interned, so one term pickles to one byte string) and ``wrt`` inputs (names
alone keyed an ``x`` of another type as this one).  The file name is a hash
of that text; the entry stores the text itself and a load compares it in
full, so a hash collision or a foreign file is a miss, never a wrong program.

On disk ``d_<hash>.pkl``: a magic line, the SHA-256 of the payload, then the
payload.  A load trusts an entry only if the checksum matches, the payload
unpickles with a loader that admits nothing but IR node classes and plain
data (no other class, no function call), the stored request text equals this
one byte for byte, the derived program is a well-typed expression, and its
inputs are the source's inputs plus the requested extra ones (cotangent,
tangents).  Anything else is deleted and the program is derived afresh.
Stores are atomic (``backend.cache._atomic_write``-style replace).

``TENSORLANG_DERIVED_CACHE=0`` turns the cache off (the passes always run).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import sys
import tempfile

from .. import ir as _ir
from ..ir import Expr, Node, canonicalize, input_vars

FORMAT = 1
MAGIC = b"tensorlang-derived 1\n"
MAX_BYTES = 1 << 28
_SOURCE_HASH = None
_ROOTS = None


def enabled() -> bool:
    return os.environ.get("TENSORLANG_DERIVED_CACHE", "1") not in ("0", "")


def source_hash() -> str:
    """SHA-256 over every ``.py`` file of tensorlang and its passes (read once per process)."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        from .. import passes

        h = hashlib.sha256()
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for root in (pkg, os.path.dirname(os.path.abspath(passes.__file__))):
            for dirpath, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        path = os.path.join(dirpath, name)
                        with open(path, "rb") as f:
                            h.update(os.path.relpath(path, root).encode() + b"\0" + f.read())
        _SOURCE_HASH = h.hexdigest()
    return _SOURCE_HASH


def _fingerprints(source: Expr) -> dict:
    """The code of the user functions ``source`` calls (their derivatives are part of the result)."""
    from ..functions import user_functions

    names = user_functions(source)
    if not names:
        return {}
    from .scalars import fingerprint  # (imports the kernel IR: only when there is a user function)

    return {f: fingerprint(f) for f in names}


def request(kind: str, source: Expr, wrt, options: dict) -> bytes:
    """The full key text of deriving ``kind`` of ``source`` for ``wrt`` (see module doc)."""
    from . import cache

    head = {"format": FORMAT, "kind": kind, "wrt": [v.name for v in wrt],
            "options": {k: repr(options[k]) for k in sorted(options)},
            "functions": _fingerprints(source), "versions": cache.versions(), "source": source_hash()}
    # the wrt inputs themselves (their types too): an input of one name and another type is another request
    body = pickle.dumps((canonicalize(source), tuple(wrt)), protocol=5)
    return json.dumps(head, sort_keys=True).encode() + b"\0" + body


class _BadEntry(Exception):
    pass


class _Loader(pickle.Unpickler):
    """Admits IR node classes (and the uid reviver their ``__reduce__`` names), nothing else."""

    def find_class(self, module, name):
        if module == "tensorlang.ir" or module.startswith("tensorlang.ir."):
            mod = sys.modules.get(module)
            obj = getattr(mod, name, None) if mod is not None else None
            if (isinstance(obj, type) and issubclass(obj, Node)) or obj is _ir._revive_with_uid:
                return obj
        raise _BadEntry(f"the entry names {module}.{name}, which is not an IR node class")


def _path(text: bytes) -> str:
    from .cache import _write_dir

    return os.path.join(_write_dir(), f"d_{hashlib.sha256(text).hexdigest()[:40]}.pkl")


def _read(path: str, text: bytes) -> dict:
    if not os.path.isfile(path):
        raise _BadEntry("not a file")
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES or not data.startswith(MAGIC) or len(data) < len(MAGIC) + 32:
        raise _BadEntry("no magic line, or too large")
    digest, payload = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if hashlib.sha256(payload).digest() != digest:
        raise _BadEntry("the payload does not match its checksum")
    got = _Loader(io.BytesIO(payload)).load()
    if not isinstance(got, dict) or got.get("format") != FORMAT or got.get("request") != text:
        raise _BadEntry("the entry is for another request")
    if not isinstance(got.get("program"), Expr):
        raise _BadEntry("the entry holds no program")
    return got


def _check(got: dict, source: Expr, extra_inputs) -> None:
    """The derived program is well typed and reads only the source's inputs and the extra ones."""
    from ..typecheck import check_program

    allowed = {v.name: v for v in input_vars(source)}
    allowed.update((v.name, v) for v in extra_inputs)
    prog = got["program"]
    check_program(prog)
    for v in input_vars(prog):
        if allowed.get(v.name) is not v:
            raise _BadEntry(f"the program reads {v.name}, which is not an input of the source")


def load(text: bytes, source: Expr, extra_inputs=()):
    """The derived program of a valid entry for ``text``, else None (a bad entry is deleted)."""
    path = _path(text)
    if not os.path.lexists(path):
        return None
    try:
        got = _read(path, text)
        _check(got, source, extra_inputs)
    except Exception as exc:  # damaged, foreign or stale: derived afresh, never trusted
        _debug(f"derived-program entry {os.path.basename(path)} rebuilt: {type(exc).__name__}: {exc}")
        _discard(path)
        return None
    return got["program"]


def store(text: bytes, program: Expr) -> None:
    """Write the entry atomically (a failed write only means no entry)."""
    try:
        payload = pickle.dumps({"format": FORMAT, "request": text, "program": program}, protocol=5)
        path = _path(text)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp_d_")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except (OSError, RecursionError, pickle.PicklingError) as exc:
        _debug(f"derived-program entry not stored: {type(exc).__name__}: {exc}")


def _discard(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
    except OSError:
        pass


def _debug(msg: str) -> None:
    if os.environ.get("TENSORLANG_DEBUG_CACHE"):
        print(f"tensorlang: {msg}", file=sys.stderr)


class Entry:
    """One derivation's cache slot: ``derive(build)`` returns the cached
    program (``hit``) or builds and stores it."""

    def __init__(self, kind: str, source: Expr, wrt, options: dict, extra_inputs=()):
        # a derivation for sizes that may be 0 (isl_bridge.sizes_may_be_zero) is
        # neither read from nor stored in the cache: its key would not say so
        from ..isl_bridge import positive_sizes

        self.on = enabled() and positive_sizes()
        self.text = request(kind, source, wrt, options) if self.on else None
        self.source, self.extra = source, tuple(extra_inputs)
        self.program = None
        self.hit = False
        self.build = None

    def derive(self, build):
        self.build = build  # kept: a call with a size of 0 derives again (derived_program._Program)
        if self.on:
            got = load(self.text, self.source, self.extra)
            if got is not None:
                self.program, self.hit = got, True
                return got
        self.program = build()
        if self.on:
            store(self.text, self.program)
        return self.program
