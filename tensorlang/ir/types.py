"""Types (paper Section 4, Figure 3 ``T``): ``R``, pairs and tensors ``[n]T``.

Types are computed (``tensorlang.typecheck``), except that variables carry
their declared type, as the paper's free variables "must have asserted types".
"""

from __future__ import annotations

from ..errors import TensorLangError
from .indices import Aff, as_aff
from .nodes import node
from .types_base import Type

# --------------------------------------------------------------------------
# Types (Fig. 3 ``T``)


@node
class RealT(Type):
    pass


REAL = RealT()


@node
class PairT(Type):
    fst: Type
    snd: Type


@node
class TensorT(Type):
    """``[n]T``; ``extent`` is affine in size variables."""

    extent: Aff
    elem: Type

    @classmethod
    def _normalize(cls, extent, elem):
        extent = as_aff(extent)
        if extent.index_vars():
            raise TensorLangError(f"a tensor extent must depend on sizes only, got {extent}")
        return (extent, elem)


def tensor_type(extents, elem: Type = REAL) -> Type:
    t = elem
    for n in reversed(tuple(extents)):
        t = TensorT(as_aff(n), t)
    return t


def shape_of(t: Type) -> tuple:
    """Extents of a (nested) tensor type down to its non-tensor element."""
    out = []
    while isinstance(t, TensorT):
        out.append(t.extent)
        t = t.elem
    return tuple(out)


def scalar_elem(t: Type) -> Type:
    while isinstance(t, TensorT):
        t = t.elem
    return t


