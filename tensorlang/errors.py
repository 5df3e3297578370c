"""Errors raised by tensorlang.

Every user-facing failure is a :class:`TensorLangError`; the subclasses say
which stage refused the program.  Messages name the offending sub-expression
(printed in the paper's notation) and what was expected.
"""

from __future__ import annotations


class TensorLangError(Exception):
    """Base class of every error tensorlang raises on bad programs or inputs."""


class TypeCheckError(TensorLangError):
    """An ill-typed program (Section 4.1)."""


class IndexError_(TensorLangError):
    """A non-affine or out-of-range index."""


class BoundsError(IndexError_):
    """An access that cannot be proven in range before the program runs
    (``tensorlang.bounds``); the message suggests the Iverson guard."""


class InputError(TensorLangError):
    """Missing, unknown or badly shaped inputs at evaluation or call time."""


class UnsupportedError(TensorLangError):
    """A stage that handles a subset of the language met a construct outside it."""


def describe(node) -> str:
    """Short printed form of a node for error messages (bounded length)."""
    # a node's repr is the printer's output (printer.pretty, which runs no
    # pass), so this module need not import the printer (which imports the
    # node classes, which raise these errors)
    try:
        # a node formats with a bound (".200": the printer stops after 200
        # characters, so a message about a huge or DAG-shared term is cheap)
        # IR nodes: the ir package binds printer.formatted as their __format__
        bounded = getattr(type(node).__format__, "__module__", None) == "tensorlang.printer"
        text = format(node, ".200") if bounded else repr(node)
    except Exception:  # the printer must never hide the real error
        text = object.__repr__(node)
    return text if len(text) <= 200 else text[:197] + "..."
