"""Where compile time goes: per-stage timers for the one stage list (issue #14 item 6).

The stages are the pipeline's (DESIGN.md "Pipeline"): sharing, let-lifting,
pair elimination, gen pushout, tensor SSA, D or Dᵀ, simplify, then the
backend's kernel preparation, lowering and JIT.  Each is wrapped in
``with stage("name"):``; the time is recorded when someone listens:

* ``TENSORLANG_PROFILE=1`` in the environment prints one line per
  finished top-level build (``grad``, ``compile`` ...) on stderr;
* :func:`recording` collects the times of the enclosed builds in a dict
  (the callables of ``tl.grad`` & co. keep theirs as ``.profile``);
* :func:`tracing` collects the names of the pipeline stages run, in order
  (``pipeline.run_stage`` reports each with :func:`note`), so a test can
  check that an entry point runs exactly its declared route.

Nested stages are charged to themselves and not to their parent (the
parent's time is its own work), so the numbers add up to the total.

Building a derivative allocates millions of small, acyclic IR nodes; with
CPython's default threshold the cyclic garbage collector traverses the
young ones every 700 allocations, which costs about a quarter of the build.
:func:`quiet_gc` raises the threshold for the duration of a build (the
collector still runs; nothing is disabled).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time

_local = threading.local()
_gc_lock = threading.Lock()
_gc_depth = 0
_gc_saved = None
# (measured on the 5000-term chain: (100_000, 50, 100) left the collector
# about 1.3 s of a 12 s build; a young generation of a million objects and
# rare older collections leave about half that; cyclic garbage waits at most
# a million allocations, and every threshold returns when the build ends)
BUILD_GC_THRESHOLD = (1_000_000, 20, 1000)


def enabled() -> bool:
    return os.environ.get("TENSORLANG_PROFILE", "") not in ("", "0")


class Recorder:
    """Seconds and calls per stage name, in first-seen order."""

    def __init__(self):
        self.times: dict = {}
        self.counts: dict = {}

    def add(self, name: str, seconds: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds
        self.counts[name] = self.counts.get(name, 0) + 1


def _recorders() -> list:
    rs = getattr(_local, "recorders", None)
    if rs is None:
        rs = _local.recorders = []
        _local.frames = []  # [start, time charged to nested stages] per open stage
    return rs


def note(name: str) -> None:
    """A pipeline stage named ``name`` starts (recorded by every open :func:`tracing`)."""
    ts = getattr(_local, "traces", None)
    if ts:
        for t in ts:
            t.append(name)


@contextlib.contextmanager
def tracing():
    """The names of the stages run in the enclosed code, in order:
    ``with tracing() as names: ...``."""
    ts = getattr(_local, "traces", None)
    if ts is None:
        ts = _local.traces = []
    names: list = []
    ts.append(names)
    try:
        yield names
    finally:
        del ts[next(k for k, t in enumerate(ts) if t is names)]  # by identity: equal lists are not the same


@contextlib.contextmanager
def stage(name: str):
    """Time the enclosed block as stage ``name`` (a no-op when nobody listens)."""
    rs = _recorders()
    if not rs:
        yield
        return
    frames = _local.frames
    frame = [time.perf_counter(), 0.0]
    frames.append(frame)
    try:
        yield
    finally:
        elapsed = time.perf_counter() - frame[0]
        frames.pop()
        for r in rs:
            r.add(name, elapsed - frame[1])
        if frames:
            frames[-1][1] += elapsed


@contextlib.contextmanager
def recording():
    """Collect stage times of the enclosed code: ``with recording() as times: ...``."""
    r = Recorder()
    rs = _recorders()
    rs.append(r)
    try:
        yield r.times
    finally:
        rs.remove(r)


@contextlib.contextmanager
def build(what: str):
    """A top-level build (``grad``, ``compile`` ...): quiet GC, and with
    ``TENSORLANG_PROFILE=1`` a report line on stderr.  Yields the stage-times
    dict (empty unless profiling)."""
    outer = bool(_recorders())
    if outer or not enabled():
        with quiet_gc():
            yield (_recorders()[-1].times if outer else {})
        return
    t0 = time.perf_counter()
    with quiet_gc(), recording() as times:
        yield times
    total = time.perf_counter() - t0
    # time in no named stage: imports on first use, checks, glue
    times["other"] = max(0.0, total - sum(times.values()))
    print(format_report(what, times, total), file=sys.stderr, flush=True)


def format_report(what: str, times: dict, total: float | None = None) -> str:
    total = sum(times.values()) if total is None else total
    parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
    return f"tensorlang profile: {what} {total * 1e3:.1f} ms ({parts})"


@contextlib.contextmanager
def quiet_gc():
    """Raise the collector's thresholds while a build runs (see module doc)."""
    global _gc_depth, _gc_saved
    with _gc_lock:
        if _gc_depth == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(*BUILD_GC_THRESHOLD)
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_saved is not None:
                gc.set_threshold(*_gc_saved)
                _gc_saved = None
