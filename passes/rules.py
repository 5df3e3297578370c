"""The rule registry: every rewrite rule of the paper, by its number.

A rule is a named function ``rule(node, ...) -> node | None`` (``None``: the
left-hand side does not match) whose docstring states its equation.  It is
registered with ``@rule("5.21", figure=9)``; passes apply registered rules,
``proofs/`` finds one obligation per registered rule, and a trace records
which rule rewrote what (the oracles check every rule application).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Rule:
    number: str  # the paper's number, e.g. "5.21"
    figure: int
    fn: Callable
    name: str
    doc: str


RULES: dict[str, Rule] = {}

_TRACE: list | None = None


def rule(number: str, *, figure: int):
    """Register a rewrite rule under its paper number (unique)."""

    def deco(fn):
        if number in RULES and RULES[number].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"rule {number} registered twice ({RULES[number].name}, {fn.__name__})")
        doc = (fn.__doc__ or "").strip()
        if not doc:
            raise ValueError(f"rule {number} ({fn.__name__}) needs its equation in the docstring")

        def applied(*args, **kw):
            out = fn(*args, **kw)
            if out is not None and _TRACE is not None:
                _TRACE.append((number, args[0] if args else None, out))
            return out

        applied.__name__ = fn.__name__
        applied.__qualname__ = fn.__qualname__
        applied.__doc__ = fn.__doc__
        applied.__wrapped__ = fn
        applied.rule_number = number
        RULES[number] = Rule(number, figure, applied, fn.__name__, doc)
        return applied

    return deco


@contextlib.contextmanager
def trace():
    """Record ``(number, lhs, rhs)`` for every successful rule application."""
    global _TRACE
    saved, _TRACE = _TRACE, []
    try:
        yield _TRACE
    finally:
        _TRACE = saved


def by_number(number: str) -> Rule:
    return RULES[number]
