"""Types of expressions (Section 4.1): computed, never stored.

``type_of(e)`` is memoized on the node.  ``+``, ``*``, ``sum`` and black-box
functions are scalar-only; an Iverson bracket is well-formed at any type.
Errors name the sub-expression and the type that was expected.
"""

from __future__ import annotations

from .errors import TensorLangError, TypeCheckError, describe
from .ir.expressions import Access, Add, Call, Const, Expr, Gen, Iverson, Let, Loop, Mul, Pair, Proj, Sum, Var
from .ir.indices import FALSE, TRUE, Pred
from .ir.scope import free_indices, input_vars
from .ir.types import PairT, REAL, RealT, TensorT
from .ir.types_base import Type


def type_of(e: Expr) -> Type:
    """Signature: type_of : Expr -> Type (raises TypeCheckError)."""
    t = getattr(e, "_type", None)  # a node's type is a fact of the node: its slot
    if t is not None:
        return t
    # first asked: inferred outside any handler (an exception raised while
    # one is handled walks the chain of handled ones, quadratic in a deep
    # program's depth); getattr's default, not a caught AttributeError: most
    # nodes a derivative builds are asked once (issue #14 item 6)
    t = _infer(e)
    object.__setattr__(e, "_type", t)
    return t


def _scalar(e: Expr, what: str) -> None:
    t = type_of(e)
    if t is not REAL:
        raise TypeCheckError(f"{what} needs a scalar operand, but {describe(e)} has type {t}")


def _infer(e: Expr) -> Type:
    match e:
        case Var(type=t):
            return t
        case Const():
            return REAL
        case Add(lhs=a, rhs=b):
            _scalar(a, "+")
            _scalar(b, "+")
            return REAL
        case Mul(lhs=a, rhs=b):
            _scalar(a, "*")
            _scalar(b, "*")
            return REAL
        case Call(fn=f, args=args):
            from .functions import lookup

            fd = lookup(f)
            if len(args) != fd.arity:
                raise TypeCheckError(f"{f} takes {fd.arity} argument(s), got {len(args)} in {describe(e)}")
            for a in args:
                _scalar(a, f"function {f}")
            return REAL
        case Pair(fst=a, snd=b):
            return PairT(type_of(a), type_of(b))
        case Proj(index=k, arg=a):
            t = type_of(a)
            if not isinstance(t, PairT):
                raise TypeCheckError(f"projection π{k} needs a pair, but {describe(a)} has type {t}")
            if k not in (0, 1):
                raise TypeCheckError(f"projection index must be 0 or 1, got {k}")
            return t.fst if k == 0 else t.snd
        case Gen(extent=n, body=b):
            return TensorT(n, type_of(b))
        case Sum(body=b):
            _scalar(b, "sum")
            return REAL
        case Access(arr=a):
            t = type_of(a)
            if not isinstance(t, TensorT):
                raise TypeCheckError(f"cannot index {describe(a)} of type {t}: it is not a tensor")
            return t.elem
        case Iverson(body=b):
            return type_of(b)
        case Let(var=v, value=e0, body=e1):
            t0 = type_of(e0)
            if v.type is not t0:
                raise TypeCheckError(f"let {v.name} is declared {v.type} but bound to {describe(e0)} of type {t0}")
            return type_of(e1)
        case Loop(init=e0, svar=v, body=b):  # issue #17: the body maps the state type to itself
            t0, tb = type_of(e0), type_of(b)
            if t0 is not v.type or tb is not t0:
                raise TypeCheckError(
                    f"loop: the body must map the state type to itself, but the state {describe(e0)} has type {t0} "
                    f"and the body {describe(b)} has type {tb} (in {describe(e)})"
                )
            return t0
        case _:
            raise TypeCheckError(f"not a value expression: {e!r}")


def require_program(obj, where: str = "") -> Expr:
    """``obj`` if it is a tensorlang expression, else a TypeCheckError saying
    what ``where`` (e.g. "tl.grad") expected.  Every entry point that takes a
    program calls this first (through :func:`check_program`), so a string or a
    float never reaches a pass as an AttributeError."""
    if isinstance(obj, Expr):
        return obj
    from .ir.indices import Aff

    hint = ""
    if isinstance(obj, Pred):
        hint = f"; a predicate is not a value, write tl.iverson({obj}, 1)"
    elif isinstance(obj, Aff):
        hint = "; an index is not a value, use it to index a tensor"
    elif isinstance(obj, (int, float)):
        hint = "; a constant program is tl.const(v)"
    shown = repr(obj)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise TypeCheckError(
        f"{where + ': ' if where else ''}expected a tensorlang program (an expression built with tl.tensor, tl.gen, "
        f"tl.sum, ...), got {type(obj).__name__} {shown}{hint}"
    )


def check_program(e: Expr, where: str = "") -> Type:
    """Type-check a whole program: a tensorlang expression, well-typed and
    closed over index variables."""
    require_program(e, where)
    t = type_of(e)
    fi = free_indices(e)
    if fi:
        names = ", ".join(sorted({i.name for i in fi}))
        raise TypeCheckError(f"free index variable(s) {names} in {describe(e)}: bind them with gen, sum or exists")
    return t


def iverson(p: Pred, e: Expr) -> Expr:
    """``[p]·e`` with the literal predicates folded (no bracket for ``true``;
    ``[false]·e`` is the zero of ``e``'s type).  Also ``tensorlang.ir.iverson``."""
    if p is TRUE:
        return e
    if p is FALSE:
        return zero_of(type_of(e))
    return Iverson(p, e)


def zero_of(t: Type) -> Expr:
    """The zero value ``0_T`` as an expression (Section 4, zero shapes)."""
    from .ir.expressions import fresh_index

    match t:
        case RealT():
            return Const(0)
        case PairT(fst=a, snd=b):
            return Pair(zero_of(a), zero_of(b))
        case TensorT(extent=n, elem=el):
            return Gen(fresh_index("z"), n, zero_of(el))
        case _:
            raise TypeCheckError(f"no zero for {t!r}")


def type_size(t: Type):
    """``$(T)`` of Fig. 17 as an affine/polynomial sympy-free product: returns a
    list of extent tuples, one per scalar leaf (``[n]([m]R x R)`` -> [(n, m), (n,)])."""
    match t:
        case RealT():
            return [()]
        case PairT(fst=a, snd=b):
            return type_size(a) + type_size(b)
        case TensorT(extent=n, elem=el):
            return [(n,) + s for s in type_size(el)]
        case _:
            raise TypeCheckError(f"not a type: {t!r}")



def wrt_inputs(wrt, program=None, *, reverse: bool = False) -> tuple:
    """``(inputs, single)`` for a derivative's ``wrt``: one program input
    (``tl.tensor`` / ``tl.scalar``) or a non-empty list of distinct ones.
    Inputs are called by name, so a ``wrt`` input may not share its name with
    another ``wrt`` input or with a different input of ``program`` (``x`` of
    another type: its derivative was zeros of that shape, and the derived-program
    cache, keyed by names, could hand one's derivative to the other).
    ``reverse`` (grad, value_and_grad, vjp): an input the program does not read
    is refused; jvp accepts it, its tangent contributing nothing."""
    single = not isinstance(wrt, (list, tuple))
    xs = [wrt] if single else list(wrt)
    if not xs:
        raise TensorLangError("wrt is empty: name at least one input to differentiate with respect to")
    for x in xs:
        if not isinstance(x, Var) or x.uid != 0:
            shown = describe(x) if isinstance(x, Expr) else repr(x)
            raise TensorLangError(f"wrt must list program inputs (tl.tensor / tl.scalar), got {shown}")
    if len({id(x) for x in xs}) != len(xs):
        raise TensorLangError("wrt lists an input twice")
    if len({x.name for x in xs}) != len(xs):
        raise TensorLangError("wrt lists two different inputs of one name: inputs are given by name")
    if program is not None:
        mine = {v.name: v for v in input_vars(program)}
        for x in xs:
            other = mine.get(x.name)
            if other is not None and other is not x:
                raise TensorLangError(f"wrt names the input {x.name} of type {x.type}, but the program's input "
                                      f"{x.name} has type {other.type}")
            if other is None and reverse:
                # its gradient is zeros of its shape, but a call cannot be given it:
                # the program's inputs are named by the program (torch.autograd.grad
                # refuses an unused input too).  jvp takes its tangent alone.
                raise TensorLangError(f"wrt names the input {x.name}, which the program does not read "
                                      f"(its inputs: {sorted(mine)}): its derivative is zero; drop it from wrt")
    return xs, single
