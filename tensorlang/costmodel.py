"""The cost model's public face (paper Section 4.3, Figure 6; Figure 17;
Theorem 6.55's input-output-sensitive cost): ``tl.cost``,
``tl.cost_breakdown``, ``tl.symbolic_cost`` and the Figure 17 functions.

The work is done below, in layer order: ``cost_preds`` (predicates over
index points), ``cost_relations`` (relation count symbols), ``cost_fig6``
(the count terms of Figure 6 and their counting at given sizes),
``cost_fig17`` (rules 6.50-6.54) and ``cost_symbolic`` (counts as
expressions in the sizes).  This module only re-exports them, so none of them
imports it.
"""

from __future__ import annotations

from .cost_fig6 import (  # noqa: F401
    ADD,
    MUL,
    call_kind,
    cost,
    cost_breakdown,
    cost_over,
    cost_terms,
    count_affine,
    count_at,
    count_components,
    count_enumerate,
    strip_brackets,
)
from .cost_fig17 import (  # noqa: F401
    extended_cost,
    inner_product_cost,
    input_type_cost_at,
    io_cost,
    ip_type,
    shape_binders,
    type_cost_at,
)
from .cost_preds import has_relation  # noqa: F401
from .cost_symbolic import (  # noqa: F401
    relation_count_symbol,
    relation_count_values,
    relation_truth_symbol,
    symbolic_cost,
    symbolic_cost_breakdown,
    symbolic_cost_conditions,
    symbolic_cost_over,
    symbolic_extended_cost,
    symbolic_inner_product_cost,
    symbolic_io_cost,
    symbolic_type_cost,
)


def type_cost(T, **sizes):
    """``$(T)`` of rule 6.53: ``$(ℝ) = 1``, ``$(T0 × T1) = $(T0) + $(T1)``,
    ``$([n]T) = n · $(T)``.  An int at the given sizes; a sympy expression in
    the size symbols when no sizes are given."""
    if not sizes:
        return symbolic_type_cost(T)
    return type_cost_at(T, sizes)
