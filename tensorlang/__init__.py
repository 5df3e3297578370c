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
from .loops import loop
from .conditionals import Comparison, abs, ge, gt, le, lt, maximum, minimum, relu, softplus, where
from .typecheck import type_of
from .sparse import relation_data, sparse_tensor
from .evaluator import evaluate
from .sharing import explicit_sharing, pretty

# Later stages live in their own modules and are loaded on first use, so the
# core stays importable (and fast to import) on its own.
_LAZY = {
    "cost": "tensorlang.driver",  # the route "cost": sharing, then the cost model
    "cost_breakdown": "tensorlang.costmodel",
    "symbolic_cost": "tensorlang.costmodel",
    "normalize": "tensorlang.passes.pipeline",
    "derivative": "tensorlang.autodiff",
    "adjoint": "tensorlang.autodiff",
    "grad": "tensorlang.autodiff",
    "value_and_grad": "tensorlang.autodiff",
    "vjp": "tensorlang.autodiff",
    "jvp": "tensorlang.autodiff",
    "compile": "tensorlang.driver",  # the route "compile": kernel preparation, then lowering
    "jax_function": "tensorlang.interop",
    "torch_function": "tensorlang.interop",
    "scipy_objective": "tensorlang.interop_scipy",
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tensorlang' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


__all__ = [
    "TensorLangError", "TypeCheckError", "InputError", "IndexRangeError", "UnsupportedError",
    "Expr", "Pred", "Relation", "Type", "alpha_eq", "canonicalize", "subst",
    "Real", "const", "cos", "div", "exists", "exp", "gen", "iverson", "let", "log", "pair",
    "pair_type", "power", "proj", "register_function", "relation", "scalar", "sigmoid", "sin",
    "size", "sizes", "sqrt", "sum", "tanh", "tensor", "tensor_of", "var", "type_of", "evaluate",
    "pretty", "explicit_sharing", "relation_data", "sparse_tensor",
    "loop", "Comparison", "abs", "ge", "gt", "le", "lt", "maximum", "minimum", "relu", "softplus", "where",
    *_LAZY,
]
