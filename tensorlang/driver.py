"""The one stage list from the user's program to the kernel (issue #14 item 1).

Paper Sections 5 (normal forms), 6 (D and Dᵀ) and 4.3 (the kernel); DESIGN.md
"Layers and the pipeline".  The stages, in pipeline order, are data
(:data:`STAGES`, each a ``passes.pipeline.Stage`` with its input and output
grammar): sparse guard hoisting, sharing, let-lifting, pair elimination,
gen pushout, tensor SSA, D or Dᵀ (dense Dᵀ for ``adjoint="naive"``),
simplify, kernel preparation.  Lowering follows at the backend's boundary
(``backend.api.compile`` lowers exactly what ``prepare`` returns).

Every entry point runs a declared sub-sequence of that list,
:data:`ROUTES` (the name of the entry point, with `` naive`` for the dense
adjoint): ``tl.grad``, ``tl.value_and_grad``, ``tl.vjp``, ``tl.jvp``,
``tl.derivative``, ``tl.adjoint``, ``tl.normalize``, ``tl.compile``,
``tl.cost`` and ``tensorlang audit`` — and through them the benchmarks and
the proofs.  No entry point decides a form on its own, and none retries:
a stage's output is the next one's input.  In debug mode
(``TENSORLANG_DEBUG=1``) each stage's input and output grammar is asserted
(``passes.pipeline.run_stage``); ``passes.profile.tracing`` records the
stages run, in order.

Kernel preparation runs when the kernel is built (the derivative callables
compile on their first call that needs a kernel, ``runtime.LazyKernel``), so
:meth:`Route.run` runs the stages before it and the backend runs ``prepare``.

``tl.compile``'s route runs the front stages up to gen pushout, whose output
grammar (Fig. 9) is ``prepare``'s input grammar; ``prepare`` normalizes
nothing and refuses what is not in it.  Every entry point that compiles a
program (``tl.compile``, the runtime's kernels, each part of a loop program,
the audit, the benchmarks, interop) goes through :func:`compile`.  A program
already in that grammar (the derivative routes' simplified output, which
ran its own front stages before D or Dᵀ) is compiled as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backend.prepare import PREPARE
from .errors import TensorLangError, UnsupportedError, describe
from .ir import Access, Expr, Pair, PairT, Proj, TensorT, fresh_index, make_gens, sym_aff
from .loops import has_loop
from .passes import pipeline as _p
from .passes.pipeline import Stage, deep_recursion, run_stage
from .typecheck import check_program, type_of

STAGES: tuple = (*_p.PASS_STAGES, PREPARE)
BY_NAME: dict = {s.name: s for s in STAGES}

_FRONT = ("sharing", "let_lift", "pair_elim", "gen_pushout", "tensor_ssa")
_TO_SSA = ("hoist_guards", *_FRONT)  # the derivative rules read tensor SSA, sparse guards hoisted (issue 16)

ROUTE_NAMES: dict = {
    "normalize": _FRONT,
    "normalize for derivatives": _TO_SSA,  # the input of the D and Dᵀ stages
    "derivative": ("derivative", "simplify"),  # D of any expression (Fig. 13 needs no normal form)
    "derivative raw": ("derivative",),
    "adjoint": (*_TO_SSA, "adjoint", "simplify"),
    "adjoint raw": (*_TO_SSA, "adjoint"),
    "adjoint naive": (*_TO_SSA, "naive_adjoint"),
    "grad": (*_TO_SSA, "adjoint", "simplify", "prepare"),
    "grad naive": (*_TO_SSA, "naive_adjoint", "prepare"),
    "value_and_grad": (*_TO_SSA, "adjoint", "simplify", "prepare"),
    "value_and_grad naive": (*_TO_SSA, "naive_adjoint", "prepare"),
    "vjp": (*_TO_SSA, "adjoint", "simplify", "prepare"),
    "vjp naive": (*_TO_SSA, "naive_adjoint", "prepare"),
    "jvp": (*_TO_SSA, "derivative", "simplify", "prepare"),
    # the primal kernel: the front stages up to gen pushout, prepare's input
    # grammar (going on to tensor SSA gave no faster primal kernel on the
    # benchmark programs, session 6: fusion merges its names back), then the backend
    "compile": (*_TO_SSA[:-1], "prepare"),
    "cost": ("sharing",),
    # the audit costs every stage's output; the derivative stages branch from
    # the tensor-SSA row (D, raw Dᵀ, Dᵀ simplified, dense Dᵀ), in this order
    "audit": (*_TO_SSA, "derivative", "adjoint", "simplify", "naive_adjoint"),
}


@dataclass(frozen=True)
class Route:
    """An entry point's stages, a sub-sequence of :data:`STAGES`."""

    name: str
    stages: tuple

    @property
    def names(self) -> tuple:
        return tuple(s.name for s in self.stages)

    def run(self, expr: Expr, **params) -> Expr:
        """Run the stages before kernel preparation; ``params``: keyword
        arguments per stage name (``adjoint={"wrt": ..., "seed": ...}``)."""
        unknown = set(params) - set(self.names)
        if unknown:
            raise TensorLangError(f"internal: parameters for stages {sorted(unknown)} not on route {self.name!r}")
        deep_recursion()
        e = expr
        skip = False
        front = "tensor_ssa" in self.names
        if self.name == "compile" and not PREPARE.pre(e):
            # already in prepare's input grammar (the derivative routes' simplified
            # output; a loop's derived step program): compiled as it is
            return e
        for st in self.stages:
            if st.name == "prepare":  # the backend prepares when it builds the kernel
                break
            if front and (skip or _p.already_normal(st, e)):
                skip = st.name != "gen_pushout"  # up to tensor_ssa, which canonicalizes
                continue
            e = run_stage(st, e, **params.get(st.name, {}))
        return e


def _route(name: str, names: tuple) -> Route:
    order = [s.name for s in STAGES]
    pos = [order.index(n) for n in names]  # ValueError on a name that is no stage
    if pos != sorted(pos) and name != "audit":
        raise AssertionError(f"route {name} is not in pipeline order: {names}")
    return Route(name, tuple(BY_NAME[n] for n in names))


ROUTES: dict = {name: _route(name, names) for name, names in ROUTE_NAMES.items()}


def route(name: str) -> Route:
    return ROUTES[name]


def stage(name: str) -> Stage:
    return BY_NAME[name]


# --------------------------------------------------------------------------
# Entry points whose whole route is here (the derivative ones are autodiff's)


def normalize(expr: Expr) -> Expr:
    """``tl.normalize``: the route sharing -> tensor SSA (``passes.pipeline.normalize``)."""
    return _p.normalize(expr)


def _compile_front(expr: Expr) -> Expr:
    return ROUTES["compile"].run(_soa_result(expr))


def _soa_result(e: Expr) -> Expr:
    """A result of array-of-structs type ``[n](A × B)`` read as the pair of
    tensors ``(gen[j:n] π0 e[j], gen[j:n] π1 e[j])`` (every dimension indexed) (struct of arrays, the
    precondition of pair elimination, Fig. 8); the kernel returns it in the
    program's own type (``backend.api``).  The two reads of ``e`` are one
    shared term, which the sharing stage binds once."""
    t = type_of(e)
    if isinstance(t, PairT):
        if not (_aos(t.fst) or _aos(t.snd)):
            return e
        parts = (e.fst, e.snd) if isinstance(e, Pair) else (Proj(0, e), Proj(1, e))
        return Pair(_soa_result(parts[0]), _soa_result(parts[1]))
    if not _aos(t):
        return e
    dims = []
    while isinstance(t, TensorT):
        dims.append((fresh_index("j"), t.extent))
        t = t.elem
    if _has_pair(t.fst) or _has_pair(t.snd):  # the kernel's result converter reads one level
        raise UnsupportedError(f"the backend cannot return the nested array of structs {describe(e)} : {type_of(e)}; "
                               "return a pair of tensors instead")
    elem = e
    for j, _ in dims:
        elem = Access(elem, sym_aff(j))
    return _soa_result(Pair(*(make_gens(dims, Proj(k, elem)) for k in (0, 1))))


def _has_pair(t) -> bool:
    while isinstance(t, TensorT):
        t = t.elem
    return isinstance(t, PairT)


def _aos(t) -> bool:
    """A tensor type whose elements hold a pair (array of structs)."""
    return isinstance(t, TensorT) and _has_pair(t)


def compile(expr: Expr, mode: str | None = None, threads=None, *, loops: str | None = None):  # noqa: A001
    """``tl.compile``: the route "compile" (the front stages, then kernel
    preparation), then lowering (``backend.api.compile``, which runs
    :data:`PREPARE` on what the front stages return).  A loop program's
    parts each take the same route.  Every entry point that compiles a
    program (the runtime's kernels, the loop kernels, the audit, the
    benchmarks, interop) comes here."""
    from .backend.api import compile as _compile

    return _compile(expr, mode, threads, loops=loops, front=_compile_front)


def prepare(expr: Expr) -> Expr:
    """The route "compile" up to the kernel: its front stages, then :data:`PREPARE`
    (the let-block the lowering takes; ``backend.api.work_points`` reads it)."""
    from .backend.prepare import prepare as _prepare

    return _prepare(_compile_front(expr))


def python_kernel(expr: Expr, mode: str | None = None, threads=None, *, loops: str | None = None):
    """The route "compile" with the kernel run as plain Python (differential
    tests; a loop program's parts each compile through :func:`compile`)."""
    from .backend.api import python_kernel as _python_kernel

    return _python_kernel(expr, mode, threads, loops=loops, front=_compile_front)


def cost(expr: Expr, **sizes):
    """``tl.cost``: the cost model (Fig. 6) of the program with its sharing
    explicit (the stage ``sharing``; rule 4.32 charges a shared term once)."""
    from . import costmodel

    check_program(expr, "tl.cost")
    if has_loop(expr):
        # a loop program is costed by its loop-free parts (init, Σ_t body, post),
        # each shared by the cost model itself: sharing the whole program could
        # let-bind the loop's init, and a loop must stay at top level
        return costmodel.cost(expr, **sizes)
    return costmodel.cost(run_stage(_p.SHARING, expr), **sizes)


__all__ = ["STAGES", "ROUTES", "ROUTE_NAMES", "Route", "route", "stage", "normalize", "compile", "prepare", "python_kernel", "cost"]
