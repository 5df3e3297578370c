"""tensorlang: a compiler for a sparse tensor language with provably cheap gradients.

Implements "Differentiating A Tensor Language" (Bernstein et al., 2020).
See DESIGN.md for the pipeline and README.md for a tour of the API.
"""

from .errors import (
    IndexError_ as IndexRangeError,
    InputError,
    TensorLangError,
    TypeCheckError,
    UnsupportedError,
)
from .ir import Expr, Pred, Relation, Type, alpha_eq, canonicalize, subst
from .api import (
    Real,
    const,
    cos,
    div,
    exists,
    exp,
    gen,
    iverson,
    let,
    log,
    pair,
    pair_type,
    power,
    proj,
    register_function,
    relation,
    scalar,
    sigmoid,
    sin,
    size,
    sizes,
    sqrt,
    sum,
    tanh,
    tensor,
    tensor_of,
    var,
)
from .typecheck import type_of
from .evaluator import evaluate
from .printer import pretty
from .sharing import explicit_sharing

__all__ = [
    "TensorLangError", "TypeCheckError", "InputError", "IndexRangeError", "UnsupportedError",
    "Expr", "Pred", "Relation", "Type", "alpha_eq", "canonicalize", "subst",
    "Real", "const", "cos", "div", "exists", "exp", "gen", "iverson", "let", "log", "pair",
    "pair_type", "power", "proj", "register_function", "relation", "scalar", "sigmoid", "sin",
    "size", "sizes", "sqrt", "sum", "tanh", "tensor", "tensor_of", "var", "type_of", "evaluate",
    "pretty", "explicit_sharing",
]
