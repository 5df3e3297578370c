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
from .passes.profile import build as _build, stage as _timed
from .errors import InputError, TensorLangError, UnsupportedError, describe
from .ir import REAL, Const, Expr, Let, Var, input_vars, relations_of, size_vars, subst
from .typecheck import check_program, type_of

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

    return normalize(expr)


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

    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt)
    sigma = tangent_inputs(expr, xs)
    with _timed("derivative"):
        out = total_derivative(expr, sigma)
    out = simp(out) if simplify else out
    with _timed("bounds"):
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
    with _timed("bounds"):
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
        with _timed("bounds"):
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

    @deep
    def __call__(self, kwargs: dict):
        from .backend.dispatch import check_finite, finite_checks, remember, signature

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
            _, sizes, _, _ = prepare_inputs(self.source, src_kw)
            bounds.check_sizes(self.constraints, sizes)
            call_sizes = {k: v for k, v in sizes.items() if k in self.sizes}
            if sig is not None:
                # the inputs passed on are checked by the kernel's own plan
                checks = tuple(c for c in finite_checks(self.source, src_kw) if c[0] not in self.inputs)
                remember(self._plans, sig, (call_sizes, checks))
        call = {k: v for k, v in kwargs.items() if k in self.inputs or k in self.rels}
        call.update(call_sizes)
        return self.fn(**call)


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
    if mode != "sparse":
        return subst(adj, vals={seed: Const(1)})
    # as a binding, propagated by simplify's one pass over the let-block: a
    # substitution into the whole block computed the free variables of every
    # suffix of it (quadratic in its length, issue #14)
    return simp(Let(seed, Const(1), adj))


@deep
def grad(loss: Expr, wrt, *, mode: str = "sparse"):
    """``grad(loss, wrt=x)(**inputs) -> ndarray`` (a tuple for ``wrt=[x, c]``).

    ``g.profile``: seconds per stage of building ``g`` (filled when profiling
    is on, ``TENSORLANG_PROFILE=1`` or ``passes.profile.recording()``)."""
    with _build("grad") as times:
        _check_mode(mode)
        check_program(loss)
        with _timed("bounds"):
            bounds.check_program(loss)
        xs, single = _wrt_list(wrt)
        prog = _Program(loss, _grad_program(loss, xs, mode), mode)

    def g(**inputs):
        return _unpack(prog(inputs), 1 if single else len(xs))

    g.program = prog.prog
    g.profile = times
    return g


@deep
def value_and_grad(loss: Expr, wrt, *, mode: str = "sparse"):
    """``value_and_grad(loss, wrt)(**inputs) -> (value, grad)``."""
    with _build("value_and_grad") as times:
        _check_mode(mode)
        check_program(loss)
        bounds.check_program(loss)
        xs, single = _wrt_list(wrt)
        gprog = _Program(loss, _grad_program(loss, xs, mode), mode)
        vprog = _Program(loss, loss, mode)

    def vg(**inputs):
        return vprog(inputs), _unpack(gprog(inputs), 1 if single else len(xs))

    vg.program = gprog.prog
    vg.profile = times
    return vg


@deep
def vjp(expr: Expr, wrt, *, mode: str = "sparse", cotangent: str = "dy"):
    """``vjp(expr, wrt)(**inputs, dy=...)``: the cotangents of ``wrt`` for the output cotangent ``dy``."""
    with _build("vjp") as times:
        _check_mode(mode)
        check_program(expr)
        bounds.check_program(expr)
        xs, single = _wrt_list(wrt)
        seed = _seed(expr, cotangent)
        prog = _Program(expr, adjoint(expr, xs, cotangent=cotangent, mode=mode), mode, extra=(seed,))

    def f(**inputs):
        return _unpack(prog(inputs), 1 if single else len(xs))

    f.program = prog.prog
    f.profile = times
    return f


@deep
def jvp(expr: Expr, wrt, *, mode: str = "sparse"):
    """``jvp(expr, wrt)(**inputs, dx=...) -> (value, tangent)``; tangents are named ``d<name>``."""
    from .passes.total_derivative import tangent_inputs

    with _build("jvp") as times:
        _check_mode(mode)
        check_program(expr)
        bounds.check_program(expr)
        xs, _ = _wrt_list(wrt)
        tangents = list(tangent_inputs(expr, xs).values())
        dprog = _Program(expr, derivative(expr, xs), mode, extra=tangents)
        vprog = _Program(expr, expr, mode)

    def f(**inputs):
        return vprog({k: v for k, v in inputs.items() if k not in dprog.extra}), dprog(inputs)

    f.program = dprog.prog
    f.profile = times
    return f


_ = np
