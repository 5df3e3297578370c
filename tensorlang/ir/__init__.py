"""The IR of the core tensor language (paper Section 4, Figure 3), split by sort.

* :mod:`.nodes`: interning (hash-consing: structurally equal terms are one
  object, so ``a is b`` decides equality and passes memoize by identity),
  ``children`` / ``rebuild``;
* :mod:`.indices`: affine indices ``Aff`` and predicates ``Pred``;
* :mod:`.types`: types ``T`` (:mod:`.types_base` holds their base class);
* :mod:`.expressions`: value expressions ``e`` (with ``Loop`` and
  ``SparseVar``) and the builders passes share;
* :mod:`.scope`: free variables and indices, substitution, canonical naming,
  traversals.

Every name stays importable from ``tensorlang.ir``.  A node prints through
``tensorlang.printer``: the printer imports the sort modules, so they cannot
import it; this package binds each sort's ``repr`` to it once all are defined.
"""

from __future__ import annotations

from .nodes import (  # noqa: F401
    Interned,
    Node,
    _TABLE,
    _TABLE_LOCK,
    _drop,
    _fresh,
    _revive_with_uid,
    children,
    fresh_uid,
    node,
    rebuild,
)
from .indices import (  # noqa: F401
    Aff,
    And,
    BoolLit,
    Cmp,
    Exists,
    FALSE,
    INDEX_LIMIT,
    IndexVar,
    Or,
    Pred,
    Rel,
    Relation,
    SizeVar,
    Sym,
    TRUE,
    _check_index_int,
    _sym_key,
    as_aff,
    as_pred,
    conj,
    conjuncts,
    disj,
    disjuncts,
    sym_aff,
)
from .types_base import (  # noqa: F401
    Type,
)
from .types import (  # noqa: F401
    PairT,
    REAL,
    RealT,
    TensorT,
    scalar_elem,
    shape_of,
    tensor_type,
)
from .expressions import (  # noqa: F401
    Access,
    Add,
    BINDERS,
    Call,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Loop,
    Mul,
    ONE,
    Pair,
    Proj,
    SparseVar,
    Sum,
    Var,
    ZERO,
    _VALUE_SORTS,
    _short_int,
    access,
    accesses,
    as_expr,
    fresh_index,
    fresh_var,
    gens,
    is_zero,
    lets,
    make_gens,
    make_lets,
    make_sums,
    sums,
)
from .scope import (  # noqa: F401
    _IDX_NAMES,
    _subst,
    alpha_eq,
    canon_index,
    canonicalize,
    free_indices,
    free_vars,
    input_vars,
    relations_of,
    size_vars,
    subst,
    subst_flat,
    walk,
)

from .. import printer as _printer  # noqa: E402  (after the node classes it prints)


def _printed(fn):
    def __repr__(self):
        return fn(self)

    return __repr__


for _cls, _fn in ((Aff, _printer.pretty_aff), (Pred, _printer.pretty_pred), (Type, _printer.pretty_type),
                  (Expr, _printer.pretty)):
    _cls.__repr__ = _cls.__str__ = _printed(_fn)
    _cls.__format__ = _printer.formatted  # f"{e:.200}": a bounded print
del _cls, _fn
