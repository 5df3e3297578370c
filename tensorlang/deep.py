"""Deep programs: run a recursive traversal where the stack is big enough.

The IR is a DAG whose depth is the user's: a chain of 10,000 additions
(``x[0] + x[1] + ...``, built by a Python loop) is 10,000 nodes deep, and the
paper's definitions (the evaluator of Figs. 4-5, the cost model of Fig. 6,
the derivatives of Section 6, the printer) are structural recursions over
it.  Rather than give each pass an explicit stack, an entry point wrapped
with :func:`deep` runs as usual and, only if Python's recursion limit is
hit, runs again on a helper thread with a large stack and a raised limit
(the traversals keep no partial state across a failed attempt: memos store
finished results only).  A program too deep even for that is a
TensorLangError, never a RecursionError.
"""

from __future__ import annotations

import functools
import sys
import threading

from .errors import TensorLangError

STACK_BYTES = 1 << 30  # reserved, not committed: pages are touched only as used
RECURSION_LIMIT = 1_000_000

_local = threading.local()
_lock = threading.Lock()
_active = 0
_saved_limit = None


def deep(fn):
    """Decorator: ``fn`` survives programs deeper than Python's default stack."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(_local, "deep", False):
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except RecursionError:
            pass
        return run_deep(fn, *args, **kwargs)

    return wrapper


def run_deep(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on a thread with a large stack and a raised
    recursion limit; its result or exception is passed back."""
    global _active, _saved_limit
    box: dict = {}

    def target():
        _local.deep = True
        try:
            box["value"] = fn(*args, **kwargs)
        except RecursionError:
            box["error"] = TensorLangError(
                f"the program is nested too deeply for {getattr(fn, '__name__', 'this stage')} "
                f"(over {RECURSION_LIMIT} levels); split it with tl.let"
            )
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    with _lock:
        if _active == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _active += 1
        old = threading.stack_size()
        t = None
        try:
            for size in (STACK_BYTES, STACK_BYTES // 4, STACK_BYTES // 16):
                try:  # a limited address space (ulimit -v) may refuse the largest
                    threading.stack_size(size)
                    t = threading.Thread(target=target, name="tensorlang-deep", daemon=True)
                    t.start()
                    break
                except (RuntimeError, ValueError, MemoryError):
                    t = None
        finally:
            threading.stack_size(old)
        if t is None:
            _active -= 1
            if _active == 0 and _saved_limit is not None:
                sys.setrecursionlimit(_saved_limit)
            raise TensorLangError("the program is too deep for the default stack, and no thread with a larger stack could be started")
    try:
        t.join()
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved_limit is not None:
                sys.setrecursionlimit(_saved_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]
