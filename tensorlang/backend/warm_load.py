"""Loading cached machine code without Numba's compiler set-up (issue #14
item 6: "a fresh process with a warm cache ... do not re-run the passes or
re-JIT"; paper Section 4.3: programs lowered once, reused).

Numba's disk cache (``cache=True``) calls ``target_context.refresh()``
before it loads an overload.  ``refresh`` prepares the context to *compile*:
it imports and installs every typing and lowering registry Numba has
(``numba.np.arraymath`` alone imports ``scipy.linalg`` to look for a BLAS,
``numba.np.random``, ``typed``, ``experimental`` ...), 0.2-0.4 s of a warm
process's first result, most of what the compile bench called Numba's floor.
Loaded code needs none of it: it is machine code already, and it links only
against

* Numba's C helpers and the built-in exception classes, installed when the
  CPU target context is created (``base._load_global_helpers``);
* the C math functions, installed by ``CPUContext.init``;
* the NRT (allocation, reference counts), which ``refresh`` initialises
  first (``load_additional_registries`` -> ``rtsys.initialize``): done here;
* the parallel backend's threads, which a parfor kernel's cache entry starts
  itself (its ``reload_init``).

A dispatcher given :func:`warm_loading` loads from its cache with just the
NRT initialised.  A compilation later in the process, of this dispatcher at
another signature or of any other function, runs ``refresh`` itself
(``compiler.compile_extra``), so nothing is skipped for code that is built.
``tests/backend/test_warm_load.py`` runs warm processes that count refreshes
and check every result against NumPy.

This leans on two members of Numba's ``Cache`` (``_load_overload`` and
``_guard_against_spurious_io_errors``); the pin to Numba's minor series in
pyproject.toml is what keeps them, and the tests fail if they go.
"""

from __future__ import annotations

from numba.core.caching import FunctionCache
from numba.core.runtime import rtsys


class WarmCache(FunctionCache):
    """Numba's function cache, loading without ``target_context.refresh()``."""

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)  # the one part of refresh() loaded code needs
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def warm_loading(dispatcher):
    """``dispatcher`` (an ``njit(cache=True)`` function), loading its cached
    overloads as :class:`WarmCache` does; returned, to be used as a decorator.
    A dispatcher without a disk cache is returned unchanged."""
    cache = getattr(dispatcher, "_cache", None)
    if type(cache) is FunctionCache:
        cache.__class__ = WarmCache  # same state, one method changed: no second locator lookup
    return dispatcher


def warm_loading_module(mod) -> None:
    """Every cached dispatcher a generated kernel module defines."""
    for value in vars(mod).values():
        warm_loading(value)


__all__ = ["WarmCache", "warm_loading", "warm_loading_module"]
