"""The base class of types (paper Figure 3 ``T``), apart so that indices can
tell a type from a value expression without importing the type constructors."""

from __future__ import annotations

from .nodes import Node


class Type(Node):
    __slots__ = ()
