"""Derivatives as programs, and the gradient API (paper Section 6).

* ``derivative(expr, wrt)``: the total derivative ``D⟦e⟧σ`` (Fig. 13) as an
  expression whose new inputs are the tangents ``d<name>``;
* ``adjoint(expr, wrt)``: ``simplify(DT⟦normalize(e)⟧σ)`` (Figs. 14-16), an
  expression with one new input, the output cotangent (default ``dy``),
  computing the cotangents of ``wrt`` (a nested pair ``(E0, (E1, …))`` for
  several); ``mode="naive"`` gives the dense textbook transposition instead;
* ``grad``, ``value_and_grad``, ``vjp``, ``jvp``: callables on named inputs,
  run through ``tensorlang.runtime.make_callable`` (compiled kernels once
  the backend provides them).
"""

from __future__ import annotations

from .deep import deep

import os

import numpy as np

from . import bounds
from .errors import InputError, TensorLangError, UnsupportedError, describe
from .ir import REAL, Const, Expr, Var, input_vars, relations_of, size_vars, subst
from .typecheck import check_program, type_of
from .loops import has_loop


def _as_expr_or_none(e):
    return e if isinstance(e, Expr) else Const(0)


def _no_loop(expr, what: str) -> None:
    if isinstance(expr, Expr) and has_loop(expr):
        raise UnsupportedError(
            f"{what} of a program with a loop is not built as one expression; use tl.jvp / tl.grad / tl.vjp "
            "(they differentiate the loop's parts, loop_autodiff)"
        )

MODES = ("sparse", "naive")
_DEBUG = os.environ.get("TENSORLANG_DEBUG", "") not in ("", "0")


def _wrt_list(wrt):
    single = not isinstance(wrt, (list, tuple))
    xs = [wrt] if single else list(wrt)
    if not xs:
        raise TensorLangError("wrt is empty: name at least one input to differentiate with respect to")
    for x in xs:
        if not isinstance(x, Var) or x.uid != 0:
            raise TensorLangError(f"wrt must list program inputs (tl.tensor / tl.scalar), got {describe(x) if isinstance(x, Expr) else repr(x)}")
    if len({id(x) for x in xs}) != len(xs):
        raise TensorLangError("wrt lists an input twice")
    return xs, single


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise TensorLangError(f"mode must be one of {MODES}, got {mode!r}")


def normalize_for_adjoint(expr: Expr) -> Expr:
    """The four normal-form passes (tensor SSA), as the adjoint rules require."""
    from .passes.pipeline import normalize
    from .sparse import hoist_guards

    return normalize(hoist_guards(expr))  # sparse reads' brackets cover their products (issue 16)


# --------------------------------------------------------------------------
# Expressions


@deep
def derivative(expr: Expr, wrt, *, simplify: bool = True) -> Expr:
    """The total derivative of ``expr`` (any expression) as an expression.

    Its inputs are those of ``expr`` plus one tangent per ``wrt`` input,
    named ``"d" + name`` and of the input's type.
    """
    from .passes.simplify import simplify as simp
    from .passes.total_derivative import tangent_inputs, total_derivative

    _no_loop(expr, "tl.derivative")
    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt)
    sigma = tangent_inputs(expr, xs)
    out = total_derivative(expr, sigma)
    out = simp(out) if simplify else out
    bounds.inherit(out, expr)  # it runs only at sizes where the source's accesses are in range
    return out


def _seed(expr: Expr, name: str) -> Var:
    names = {v.name for v in input_vars(expr)}
    if name in names:
        raise TensorLangError(f"the cotangent name {name!r} is already an input of the program; pass cotangent=...")
    return Var(name, 0, type_of(expr))


@deep
def adjoint(expr: Expr, wrt, *, cotangent: str = "dy", mode: str = "sparse", simplify: bool = True) -> Expr:
    """The adjoint derivative of ``expr`` as an expression with one new input,
    the output cotangent ``cotangent`` (of the output's type).

    ``mode="sparse"``: the inner-product calculus of Figs. 14-16 followed by
    simplification.  ``mode="naive"``: dense one-hot transposition, no
    predicate propagation, no simplification (for comparison).
    """
    from .passes.adjoint import transpose
    from .passes.naive_adjoint import naive_transpose
    from .passes.simplify import simplify as simp

    _check_mode(mode)
    _no_loop(expr, "tl.adjoint")
    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt)
    seed = _seed(expr, cotangent)
    ssa = normalize_for_adjoint(expr)
    if mode == "naive":
        out = naive_transpose(ssa, xs, seed)
    else:
        out = transpose(ssa, xs, seed)
        out = simp(out) if simplify else out
    bounds.inherit(out, expr)  # it runs only at sizes where the source's accesses are in range
    return out


# --------------------------------------------------------------------------
# Callables


class _Program:
    """A derived program run on the inputs of the original one.

    Sizes are inferred from the original program's inputs (the derived one
    may no longer mention the inputs that determine them) and inputs it does
    not use are not passed on.
    """

    def __init__(self, source: Expr, prog: Expr, mode: str, extra=()):
        from .runtime import make_callable

        self.source = source
        self.prog = prog
        # the source's accesses are proven in range, up to these size constraints
        self.constraints = bounds.check_program(source)
        if _DEBUG:  # and the derived program's own accesses, as a check of the passes
            bounds.check_program(prog)
        self.extra = {v.name: v for v in extra}
        self.fn = make_callable(prog, mode=mode)
        self.inputs = {v.name for v in input_vars(prog)}
        self.sizes = {s.name for s in size_vars(prog)}
        self.rels = {r.name for r in relations_of(prog)}
        self._plans: dict = {}  # call signature -> (sizes passed on, finiteness checks)
        self._plannable = not relations_of(source)
        from .sparse import sparse_inputs

        self.sparse_src = source if not extra else _with_inputs(source, extra)
        self.sparse = bool(sparse_inputs(self.sparse_src))
        self.packed_ok = False  # set by grad/vjp for sparse wrt (their outputs go through _sparse_out)

    def prepared(self, kwargs: dict) -> dict:
        """The inputs with sparse data prepared (once per call, shared by the
        kernels this call runs)."""
        if not self.sparse:
            return kwargs
        from .sparse import prepare

        return prepare(self.sparse_src, kwargs)

    @deep
    def __call__(self, kwargs: dict):
        from .backend.dispatch import check_finite, finite_checks, remember, signature

        if self.sparse:  # sparse tensors and relation data prepared once per call (issue 16)
            from .sparse import prepare

            kwargs = prepare(self.sparse_src, kwargs)
        sig = signature(kwargs) if self._plannable else None
        plan = self._plans.get(sig) if sig is not None else None
        if plan is not None:  # this signature passed the checks below once (backend/dispatch.py)
            check_finite(kwargs, plan[1])
            call_sizes = plan[0]
        else:
            from .evaluator import prepare_inputs

            src_kw = {k: v for k, v in kwargs.items() if k not in self.extra}
            missing = [k for k in self.extra if k not in kwargs]
            if missing:
                raise InputError(f"missing input(s) {missing}")
            _, sizes, _, _ = prepare_inputs(self.source, src_kw, compressed=True)  # sizes only: no dense copies
            bounds.check_sizes(self.constraints, sizes)
            call_sizes = {k: v for k, v in sizes.items() if k in self.sizes}
            if sig is not None:
                # the inputs passed on are checked by the kernel's own plan
                checks = tuple(c for c in finite_checks(self.source, src_kw) if c[0] not in self.inputs)
                remember(self._plans, sig, (call_sizes, checks))
        call = {k: v for k, v in kwargs.items() if k in self.inputs or k in self.rels}
        call.update(call_sizes)
        if self.packed_ok:
            from .sparse import keep_packed

            with keep_packed():  # sparse cotangents come back packed on their relation
                return self.fn(**call)
        return self.fn(**call)


def _with_inputs(source: Expr, extra) -> Expr:
    """A pair program mentioning ``source`` and the extra inputs (tangents,
    cotangent), so that their sparse data is prepared with the source's."""
    from .ir import Pair

    out = source
    for v in extra:
        out = Pair(out, v)
    return out


def _sparse_out(xs, vals: tuple, inputs: dict, source: Expr) -> tuple:
    """Cotangents of sparse tensors as scipy.sparse.csr_matrix on their relation."""
    from .ir import SparseVar
    from .sparse import prepare, to_sparse, unpack_outputs

    if not any(isinstance(x, SparseVar) for x in xs):
        return tuple(unpack_outputs(v) for v in vals)
    prepared = prepare(source, inputs)
    return tuple(to_sparse(x, v, prepared) if isinstance(x, SparseVar) else unpack_outputs(v) for x, v in zip(xs, vals))


def _unpack(val, n: int):
    if n == 1:
        return val
    out = []
    for _ in range(n - 1):
        a, val = val
        out.append(a)
    out.append(val)
    return tuple(out)


def _grad_program(loss: Expr, xs, mode: str) -> Expr:
    from .passes.simplify import simplify as simp

    if type_of(loss) is not REAL:
        raise TensorLangError(
            f"grad needs a scalar loss, but the program has type {type_of(loss)}; use tl.vjp for non-scalar outputs"
        )
    names = {v.name for v in input_vars(loss)}
    name = "dy"
    while name in names:
        name = "_" + name
    # simplified once, after the seed is 1 (simplifying before as well did the work twice)
    adj = adjoint(loss, xs, cotangent=name, mode=mode, simplify=False)
    seed = Var(name, 0, REAL)
    # ∇l(x) = DT l(x, 1)  (RULES.md 5.1)
    out = subst(adj, vals={seed: Const(1)})
    return simp(out) if mode == "sparse" else out


@deep
def grad(loss: Expr, wrt, *, mode: str = "sparse"):
    """``grad(loss, wrt=x)(**inputs) -> ndarray`` (a tuple for ``wrt=[x, c]``)."""
    if has_loop(_as_expr_or_none(loss)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.grad(loss, wrt, mode=mode)
    _check_mode(mode)
    check_program(loss)
    bounds.check_program(loss)
    xs, single = _wrt_list(wrt)
    prog = _Program(loss, _grad_program(loss, xs, mode), mode)
    prog.packed_ok = True

    def g(**inputs):
        inputs = prog.prepared(inputs)
        out = _sparse_out(xs, (_unpack(prog(inputs), len(xs)),) if single else _unpack(prog(inputs), len(xs)), inputs, loss)
        return out[0] if single else out

    g.program = prog.prog
    return g


@deep
def value_and_grad(loss: Expr, wrt, *, mode: str = "sparse"):
    """``value_and_grad(loss, wrt)(**inputs) -> (value, grad)``."""
    if has_loop(_as_expr_or_none(loss)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.value_and_grad(loss, wrt, mode=mode)
    _check_mode(mode)
    check_program(loss)
    bounds.check_program(loss)
    xs, single = _wrt_list(wrt)
    gprog = _Program(loss, _grad_program(loss, xs, mode), mode)
    gprog.packed_ok = True
    vprog = _Program(loss, loss, mode)

    def vg(**inputs):
        inputs = gprog.prepared(inputs)
        gs = _unpack(gprog(inputs), len(xs))
        gs = _sparse_out(xs, (gs,) if single else gs, inputs, loss)
        return vprog(inputs), gs[0] if single else gs

    vg.program = gprog.prog
    return vg


@deep
def vjp(expr: Expr, wrt, *, mode: str = "sparse", cotangent: str = "dy"):
    """``vjp(expr, wrt)(**inputs, dy=...)``: the cotangents of ``wrt`` for the output cotangent ``dy``."""
    if has_loop(_as_expr_or_none(expr)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.vjp(expr, wrt, mode=mode, cotangent=cotangent)
    _check_mode(mode)
    check_program(expr)
    bounds.check_program(expr)
    xs, single = _wrt_list(wrt)
    seed = _seed(expr, cotangent)
    prog = _Program(expr, adjoint(expr, xs, cotangent=cotangent, mode=mode), mode, extra=(seed,))
    prog.packed_ok = True

    def f(**inputs):
        inputs = prog.prepared(inputs)
        gs = _unpack(prog(inputs), len(xs))
        gs = _sparse_out(xs, (gs,) if single else gs, inputs, expr)
        return gs[0] if single else gs

    f.program = prog.prog
    return f


@deep
def jvp(expr: Expr, wrt, *, mode: str = "sparse"):
    """``jvp(expr, wrt)(**inputs, dx=...) -> (value, tangent)``; tangents are named ``d<name>``."""
    from .passes.total_derivative import tangent_inputs

    if has_loop(_as_expr_or_none(expr)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.jvp(expr, wrt, mode=mode)
    _check_mode(mode)
    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt)
    from .sparse import tangent_of

    dense_t = tangent_inputs(expr, xs)
    # a sparse tensor's tangent is sparse on the same relation (issue 16)
    tangents = [tangent_of(x, dense_t[x]) for x in xs]
    dexpr = subst(derivative(expr, xs), vals={dense_t[x]: t for x, t in zip(xs, tangents) if t is not dense_t[x]})
    dprog = _Program(expr, dexpr, mode, extra=tangents)
    vprog = _Program(expr, expr, mode)

    def f(**inputs):
        return vprog({k: v for k, v in inputs.items() if k not in dprog.extra}), dprog(inputs)

    f.program = dprog.prog
    return f


_ = np
