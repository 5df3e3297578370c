"""Derivatives as programs, and the gradient API (paper Section 6).

* ``derivative(expr, wrt)``: the total derivative ``D⟦e⟧σ`` (Fig. 13) as an
  expression whose new inputs are the tangents ``d<name>``;
* ``adjoint(expr, wrt)``: ``simplify(DT⟦normalize(e)⟧σ)`` (Figs. 14-16), an
  expression with one new input, the output cotangent (default ``dy``),
  computing the cotangents of ``wrt`` (a nested pair ``(E0, (E1, …))`` for
  several); ``mode="naive"`` gives the dense textbook transposition instead;
* ``grad``, ``value_and_grad``, ``vjp``, ``jvp``: callables on named inputs,
  run through ``tensorlang.runtime.make_callable`` (compiled kernels once
  the backend provides them); ``threads=`` as for ``tl.compile`` (None:
  chosen by the work, 1: single-threaded, k: k threads).

One kernel per derivative callable (issue #13 item 5): the adjoint of a
tensor-SSA program keeps the program's own bindings in front of the reverse
pass (``let primal… in let adjoint… in cotangents``, Section 6.3), and the
total derivative keeps each primal binding before its differential (rule
6.16).  So ``value_and_grad``, ``jvp`` and ``vjp(..., with_value=True)``
compile ONE program ``let primal… in let derivative… in (value, derivative)``:
the primal is computed once and its residuals (the let-bound intermediates)
are read by the derivative in the same kernel.

Every derivative is built by its route of the one stage list
(``tensorlang.driver.ROUTES``: tensor SSA, then D or Dᵀ, then simplify; the
kernel is prepared when it is built); this module chooses the route and its
parameters, and wraps the result in a callable.
"""

from __future__ import annotations

from .deep import deep

import numpy as np

from . import bounds
from .derived_program import _Program
from .driver import route as _route
from .passes.pipeline import with_primal  # noqa: F401  (re-exported: the derivative stages' value form)
from .passes.profile import build as _build, stage as _timed
from .errors import TensorLangError, UnsupportedError
from .ir import REAL, Const, Expr, Var, input_vars, subst
from .typecheck import check_program, type_of, wrt_inputs as _wrt_list
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
ADJOINTS = ("sparse", "naive")  # the derivative rules: Figs. 14-16 + simplify, or dense one-hot
LOOPS = ("sparse", "box")  # the kernel's loops: isl-narrowed, or full boxes testing predicates inside


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise TensorLangError(f"mode must be one of {MODES}, got {mode!r}")


def options(mode=None, adjoint=None, loops=None) -> tuple:
    """``(adjoint, loops)`` of a derivative callable (issue #13 item 8).

    ``adjoint="naive"`` asks for the dense one-hot adjoint, compiled with the
    same backend and isl-narrowed loops as the sparse one (so comparing the
    two measures the adjoint alone); ``loops="box"`` runs every loop over its
    full box and tests its predicate inside.  ``mode`` is the older spelling
    of both at once: ``mode="naive"`` is ``adjoint="naive", loops="box"``."""
    if mode is not None:
        _check_mode(mode)
        if adjoint is not None or loops is not None:
            raise TensorLangError("mode= is the older spelling of adjoint= and loops= together: pass mode= or those, not both")
        return (mode, "box" if mode == "naive" else "sparse")
    adjoint = "sparse" if adjoint is None else adjoint
    loops = "sparse" if loops is None else loops
    if adjoint not in ADJOINTS:
        raise TensorLangError(f"adjoint must be one of {ADJOINTS}, got {adjoint!r}")
    if loops not in LOOPS:
        raise TensorLangError(f"loops must be one of {LOOPS}, got {loops!r}")
    return adjoint, loops


# --------------------------------------------------------------------------
# Expressions


@deep
def derivative(expr: Expr, wrt, *, simplify: bool = True) -> Expr:
    """The total derivative of ``expr`` (any expression) as an expression.

    Its inputs are those of ``expr`` plus one tangent per ``wrt`` input,
    named ``"d" + name`` and of the input's type.
    """
    from .passes.total_derivative import tangent_inputs

    _no_loop(expr, "tl.derivative")
    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt, expr)
    sigma = tangent_inputs(expr, xs)
    out = _route("derivative" if simplify else "derivative raw").run(expr, derivative={"sigma": sigma})
    with _timed("bounds"):
        bounds.inherit(out, expr)  # it runs only at sizes where the source's accesses are in range
    return out


def _seed(expr: Expr, name: str) -> Var:
    names = {v.name for v in input_vars(expr)}
    if name in names:
        raise TensorLangError(f"the cotangent name {name!r} is already an input of the program; pass cotangent=...")
    return Var(name, 0, type_of(expr))


def _adjoint_route(kind: str, mode: str, simplify: bool = True):
    """The route of a reverse-mode entry point: Dᵀ then simplify, or the dense
    Dᵀ (never simplified: it is the comparison baseline)."""
    if mode == "naive":
        return _route(f"{kind} naive")
    return _route(kind if simplify else f"{kind} raw")


@deep
def adjoint(expr: Expr, wrt, *, cotangent: str = "dy", mode: str = "sparse", simplify: bool = True) -> Expr:
    """The adjoint derivative of ``expr`` as an expression with one new input,
    the output cotangent ``cotangent`` (of the output's type).

    ``mode="sparse"``: the inner-product calculus of Figs. 14-16 followed by
    simplification.  ``mode="naive"``: dense one-hot transposition, no
    predicate propagation, no simplification (for comparison).
    """
    _check_mode(mode)
    _no_loop(expr, "tl.adjoint")
    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt, expr)
    seed = _seed(expr, cotangent)
    dt = "naive_adjoint" if mode == "naive" else "adjoint"
    out = _adjoint_route("adjoint", mode, simplify).run(expr, **{dt: {"wrt": xs, "seed": seed}})
    with _timed("bounds"):
        bounds.inherit(out, expr)  # it runs only at sizes where the source's accesses are in range
    return out


# --------------------------------------------------------------------------
# Callables


def _sparse_out(xs, vals: tuple, inputs: dict, source: Expr) -> tuple:
    """Cotangents of sparse tensors as scipy.sparse.csr_matrix on their relation."""
    from .ir import SparseVar
    from .sparse import prepare, to_sparse, unpack_outputs

    if not any(isinstance(x, SparseVar) for x in xs):
        return tuple(unpack_outputs(v) for v in vals)
    prepared = prepare(source, inputs)
    return tuple(to_sparse(x, v, prepared) if isinstance(x, SparseVar) else unpack_outputs(v) for x, v in zip(xs, vals))


def _as_tuple(val, n: int) -> tuple:
    """The kernel's nested pairs of ``n`` cotangents as a tuple of ``n``."""
    return (val,) if n == 1 else _unpack(val, n)


def _loop_mode(adjoint: str, loops: str) -> str:
    """The loop programs' single ``mode`` (loop_autodiff): the naive adjoint, or
    the sparse one; full-box loops are a lowering option they do not take."""
    if loops == "box" and adjoint != "naive":
        raise UnsupportedError("loops='box' is not supported for programs with tl.loop (their parts are "
                               "lowered with narrowed loops); use adjoint='naive' or mode='naive'")
    return "naive" if adjoint == "naive" else "sparse"


def _checkpoint(checkpoint, what: str):
    """The call's checkpoint policy (``tl.grad(..., checkpoint=...)``), spelled
    as ``tl.loop`` accepts it (``loops.normalize_checkpoint``), or None: each
    loop keeps its own.  It overrides every loop's policy for that callable
    (all policies give bit-identical gradients; they trade stored states
    for recomputed steps); a loop-free program stores no loop states, so
    there it is checked and has no effect."""
    if checkpoint is None:
        return None
    from .loops import normalize_checkpoint

    try:
        return normalize_checkpoint(checkpoint)
    except TensorLangError as exc:
        raise TensorLangError(f"{what}(..., checkpoint={checkpoint!r}): {exc}") from None


def _unpack(val, n: int):
    if n == 1:
        return val
    out = []
    for _ in range(n - 1):
        a, val = val
        out.append(a)
    out.append(val)
    return tuple(out)


def _seed_name(loss: Expr) -> str:
    names = {v.name for v in input_vars(loss)}
    name = "dy"
    while name in names:
        name = "_" + name
    return name


def _check_scalar(loss: Expr) -> None:
    if type_of(loss) is not REAL:
        raise TensorLangError(
            f"grad needs a scalar loss, but the program has type {type_of(loss)}; use tl.vjp for non-scalar outputs"
        )


def _grad_program(loss: Expr, xs, mode: str, *, value: bool = False):
    """``(∇l, entry)`` (``(l, ∇l)`` with ``value=True``, one program sharing the
    primal); ``entry``: its slot in the derived-program cache."""
    _check_scalar(loss)
    name = _seed_name(loss)
    seed = Var(name, 0, REAL)
    return _derived("grad", loss, xs, {"adjoint": mode, "value": value},
                    lambda: _grad_derive(loss, xs, mode, seed, value))


def _grad_derive(loss: Expr, xs, mode: str, seed: Var, value: bool) -> Expr:
    # ∇l(x) = DT l(x, 1)  (RULES.md 5.1); simplified once, after the seed is 1
    dt = "naive_adjoint" if mode == "naive" else "adjoint"
    kind = "value_and_grad" if value else "grad"
    return _adjoint_route(kind, mode).run(loss, **{dt: {"wrt": xs, "seed": seed, "value": value, "seed_value": 1}})


def _derived(kind: str, source: Expr, xs, opts: dict, build, extra=()):
    """``(program, entry)``: the derived program from the disk cache of derived
    programs (backend/derived_cache.py) or built by ``build()`` and stored there."""
    from .backend.derived_cache import Entry

    with _timed("derived cache"):
        entry = Entry(kind, source, xs, opts, extra)
    out = entry.derive(build)
    with _timed("bounds"):
        bounds.inherit(out, source)  # it runs only at sizes where the source's accesses are in range
    return out, entry


def _grad_build(loss: Expr, wrt, *, mode=None, adjoint=None, loops=None, threads=None, checkpoint=None):
    """``grad(loss, wrt=x)(**inputs) -> ndarray`` (a tuple for ``wrt=[x, c]``);
    ``adjoint=``, ``loops=`` (or the older ``mode=``): see :func:`options`;
    ``checkpoint=``: every loop's policy for this callable (:func:`_checkpoint`)."""
    adj, lp = options(mode, adjoint, loops)
    ck = _checkpoint(checkpoint, "grad")
    if has_loop(_as_expr_or_none(loss)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.grad(loss, wrt, mode=_loop_mode(adj, lp), threads=threads, checkpoint=ck)
    check_program(loss)
    bounds.check_program(loss)
    xs, single = _wrt_list(wrt, loss, reverse=True)
    derived, entry = _grad_program(loss, xs, adj)
    prog = _Program(loss, derived, lp, threads=threads, entry=entry)
    prog.packed_ok = True

    if prog.dense:  # no sparse data in or out: the kernel's outputs are the gradient (issue 13 item 7)
        k = len(xs)

        def g(**inputs):
            out = prog(inputs)
            return out if k == 1 else _unpack(out, k)
    else:
        def g(**inputs):
            inputs = prog.prepared(inputs)
            out = _sparse_out(xs, _as_tuple(prog(inputs), len(xs)), inputs, loss)
            return out[0] if len(xs) == 1 else out

    g.program = prog.prog
    return g


def _value_and_grad_build(loss: Expr, wrt, *, mode=None, adjoint=None, loops=None, threads=None, checkpoint=None):
    """``value_and_grad(loss, wrt)(**inputs) -> (value, grad)``: one kernel
    computes the loss once and the gradient from its residuals."""
    adj, lp = options(mode, adjoint, loops)
    ck = _checkpoint(checkpoint, "value_and_grad")
    if has_loop(_as_expr_or_none(loss)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.value_and_grad(loss, wrt, mode=_loop_mode(adj, lp), threads=threads, checkpoint=ck)
    check_program(loss)
    bounds.check_program(loss)
    xs, single = _wrt_list(wrt, loss, reverse=True)
    derived, entry = _grad_program(loss, xs, adj, value=True)
    prog = _Program(loss, derived, lp, threads=threads, entry=entry)
    prog.packed_ok = True

    if prog.dense:  # as in grad
        k = len(xs)

        def vg(**inputs):
            val, g = prog(inputs)
            return val, (g if k == 1 else _unpack(g, k))
    else:
        def vg(**inputs):
            inputs = prog.prepared(inputs)
            val, g = prog(inputs)
            gs = _sparse_out(xs, _as_tuple(g, len(xs)), inputs, loss)
            return val, gs[0] if len(xs) == 1 else gs

    vg.program = prog.prog
    return vg


def _vjp_build(expr: Expr, wrt, *, mode=None, adjoint=None, loops=None, cotangent: str = "dy", with_value: bool = False,
        threads=None, checkpoint=None):
    """``vjp(expr, wrt)(**inputs, dy=...)``: the cotangents of ``wrt`` for the
    output cotangent ``dy``; ``with_value=True`` gives ``(value, cotangents)``
    from the same kernel (the adjoint computes the primal anyway)."""
    kind, lp = options(mode, adjoint, loops)
    ck = _checkpoint(checkpoint, "vjp")
    if has_loop(_as_expr_or_none(expr)):  # issue #17: loops are differentiated per part
        if with_value:
            raise UnsupportedError("vjp(..., with_value=True) of a program with a loop: use tl.value_and_grad or "
                                   "call the program for its value")
        from . import loop_autodiff

        return loop_autodiff.vjp(expr, wrt, mode=_loop_mode(kind, lp), cotangent=cotangent, threads=threads,
                                 checkpoint=ck)
    check_program(expr)
    bounds.check_program(expr)
    xs, single = _wrt_list(wrt, expr, reverse=True)
    seed = _seed(expr, cotangent)

    def build():
        dt = "naive_adjoint" if kind == "naive" else "adjoint"
        return _adjoint_route("vjp", kind).run(expr, **{dt: {"wrt": xs, "seed": seed, "value": with_value}})

    adj, entry = _derived("vjp", expr, xs, {"adjoint": kind, "with_value": with_value, "cotangent": cotangent},
                          build, extra=(seed,))
    prog = _Program(expr, adj, lp, extra=(seed,), threads=threads, entry=entry)
    prog.packed_ok = True
    k = len(xs)

    def f(**inputs):
        if not prog.dense:
            inputs = prog.prepared(inputs)
        if with_value:
            val, cts = prog(inputs)
        else:
            val, cts = None, prog(inputs)
        if prog.dense:  # as in grad
            gs = cts if k == 1 else _unpack(cts, k)
        else:
            gs = _sparse_out(xs, _as_tuple(cts, k), inputs, expr)
            gs = gs[0] if k == 1 else gs
        return (val, gs) if with_value else gs

    f.program = prog.prog
    return f


def _jvp_program(expr: Expr, xs):
    """``((e, D⟦e⟧σ), entry)``: one program, the total derivative of the tensor-SSA
    form keeps every primal binding before its differential (rule 6.16)."""
    from .passes.total_derivative import tangent_inputs

    tangents = tangent_inputs(expr, xs)

    def build():
        return _route("jvp").run(expr, derivative={"sigma": tangents, "value": True})

    return _derived("jvp", expr, xs, {}, build, extra=tuple(tangents[x] for x in xs))


def _jvp_build(expr: Expr, wrt, *, mode=None, loops=None, threads=None, **rest):
    """``jvp(expr, wrt)(**inputs, dx=...) -> (value, tangent)``; tangents are
    named ``d<name>``.  One kernel computes both.  (Forward mode has no
    adjoint: ``mode="naive"`` only means ``loops="box"``; it stores no
    states, so ``checkpoint=`` is refused rather than ignored.)"""
    from .passes.total_derivative import tangent_inputs

    if "checkpoint" in rest:
        raise TensorLangError(
            f"jvp(..., checkpoint={rest['checkpoint']!r}): checkpoint= is a reverse-mode option (tl.grad, "
            "tl.value_and_grad, tl.vjp); forward mode carries the tangent with the state and stores no states"
        )
    if rest:
        raise TypeError(f"jvp() got unexpected keyword argument(s) {sorted(rest)}")
    adj, lp = options(mode, None, loops)
    if has_loop(_as_expr_or_none(expr)):  # issue #17: loops are differentiated per part
        from . import loop_autodiff

        return loop_autodiff.jvp(expr, wrt, mode=_loop_mode(adj, lp))
    check_program(expr)
    bounds.check_program(expr)
    xs, _ = _wrt_list(wrt, expr)
    from .sparse import tangent_of

    dense_t = tangent_inputs(expr, xs)
    # a sparse tensor's tangent is sparse on the same relation (issue 16)
    tangents = [tangent_of(x, dense_t[x]) for x in xs]
    jprog, entry = _jvp_program(expr, xs)
    swap = {dense_t[x]: t for x, t in zip(xs, tangents) if t is not dense_t[x]}
    if swap:
        jprog = subst(jprog, vals=swap)
        bounds.inherit(jprog, expr)
        entry = None  # the kernel compiles the substituted program, not the cached one
    prog = _Program(expr, jprog, lp, extra=tangents, threads=threads, entry=entry)

    def f(**inputs):
        return prog(inputs)

    f.program = prog.prog
    return f


_ = np


def _profiled(kind: str, build, *args, **kwargs):
    """Build a derivative callable with its stage times on ``.profile``
    (seconds per stage; filled when profiling is on, ``TENSORLANG_PROFILE=1``
    or ``passes.profile.recording()``)."""
    with _build(kind) as times:
        f = build(*args, **kwargs)
    try:
        f.profile = times
    except AttributeError:  # pragma: no cover - a callable without a __dict__
        pass
    return f


@deep
def grad(loss: Expr, wrt, **options_):
    """``grad(loss, wrt=x, *, mode=None, adjoint=None, loops=None, threads=None, checkpoint=None)(**inputs)``:
    the gradient (a tuple for ``wrt=[x, c]``); ``g.profile`` holds the build's stage times.
    ``checkpoint=`` ("all", an int k, "binomial", ("binomial", s)) overrides every
    ``tl.loop``'s own checkpoint policy for this callable (issue #17)."""
    return _profiled("grad", _grad_build, loss, wrt, **options_)


@deep
def value_and_grad(loss: Expr, wrt, **options_):
    """``value_and_grad(loss, wrt, ...)(**inputs) -> (value, grad)`` from one kernel;
    ``checkpoint=`` as for :func:`grad`."""
    return _profiled("value_and_grad", _value_and_grad_build, loss, wrt, **options_)


@deep
def vjp(expr: Expr, wrt, **options_):
    """``vjp(expr, wrt, *, cotangent="dy", with_value=False, ...)(**inputs, dy=...)``;
    ``checkpoint=`` as for :func:`grad`."""
    return _profiled("vjp", _vjp_build, expr, wrt, **options_)


@deep
def jvp(expr: Expr, wrt, **options_):
    """``jvp(expr, wrt, ...)(**inputs, dx=...) -> (value, tangent)`` from one kernel.
    ``checkpoint=`` is refused: forward mode carries the tangent with the
    state through every loop and stores no states."""
    return _profiled("jvp", _jvp_build, expr, wrt, **options_)
