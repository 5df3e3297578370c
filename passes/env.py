"""Differential environments σ of paper Section 6 (Fig. 13, Figs. 14-16).

Rule 6.16 (total derivative) and rule 6.20 (adjoint) extend σ by one entry
per ``let``: ``D⟦e1⟧(σ[x ↦ dx])``.  Copying a dict per binding made building
the derivative of an N-binding let-block quadratic in N (issue #14).
:class:`Env` is a persistent map: extending the newest version of a map
appends to one shared store in O(1), and every older version keeps seeing
exactly its own entries (an entry records its position; a version sees the
positions below its length).  Extending an older version, or shadowing a
key, copies, as a dict would.
"""

from __future__ import annotations

from collections.abc import Mapping


class _Store:
    __slots__ = ("items", "length")

    def __init__(self):
        self.items: dict = {}  # key -> (position, value)
        self.length = 0


class Env(Mapping):
    """An immutable map ``key -> value`` with O(1) :meth:`extend` along a chain."""

    __slots__ = ("_store", "_n")

    def __init__(self, base=()):
        store = _Store()
        for k, v in dict(base).items():
            store.items[k] = (store.length, v)
            store.length += 1
        self._store, self._n = store, store.length

    @classmethod
    def _view(cls, store: _Store, n: int) -> "Env":
        env = cls.__new__(cls)
        env._store, env._n = store, n
        return env

    def extend(self, key, value) -> "Env":
        """``self[key ↦ value]`` (``self`` is unchanged)."""
        store = self._store
        if self._n == store.length and key not in store.items:
            store.items[key] = (store.length, value)
            store.length += 1
            return Env._view(store, store.length)
        return Env({**dict(self.items()), key: value})

    def __getitem__(self, key):
        pos, v = self._store.items[key]
        if pos >= self._n:
            raise KeyError(key)
        return v

    def __contains__(self, key) -> bool:
        got = self._store.items.get(key)
        return got is not None and got[0] < self._n

    def get(self, key, default=None):
        got = self._store.items.get(key)
        return got[1] if got is not None and got[0] < self._n else default

    def __iter__(self):
        n = self._n
        return (k for k, (pos, _) in list(self._store.items.items()) if pos < n)

    def __len__(self) -> int:
        return self._n

    def __repr__(self):
        return f"Env({dict(self.items())!r})"


def extend(sigma: Mapping, key, value) -> Env:
    """``σ[key ↦ value]`` for a dict or an :class:`Env`."""
    env = sigma if isinstance(sigma, Env) else Env(sigma)
    return env.extend(key, value)
