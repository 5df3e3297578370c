"""The three oracles of DESIGN.md for the normal-form passes (paper Section 5).

:func:`check_pass` is the one entry point: it runs a pass on a program and
compares the pass's OUTPUT with its INPUT (it cannot test the wrong object:
it computes the output itself), by

1. semantics: ``tl.evaluate`` gives the same value (float tolerance; and
   exactly, over sympy symbols, when symbolic inputs are given);
2. normal form: the pass's checker accepts the output, and running the pass
   again changes nothing (``pass(out) is out``, by interning);
3. cost: ``tl.cost`` does not rise at the given sizes (and, on request,
   ``tl.symbolic_cost`` does not rise where the difference simplifies).

Every rule application recorded by ``rules.trace()`` during the run is
checked too: its left and right sides are closed (free let variables by
their bindings in the program, free index variables by generating over their
ranges) and evaluated; they must be equal — for pair elimination up to the
array-of-structs/struct-of-arrays isomorphism, for the tensor-SSA rules where
the left side's mask holds (5.29: "consumers re-mask").  Applications that
cannot be closed, or whose closure reads out of range (a guard outside the
rule's redex protected the access), are counted as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

import tensorlang as tl
from tensorlang.errors import TensorLangError
from tensorlang.ir import (
    Access,
    Exists,
    Expr,
    Gen,
    Let,
    PairT,
    Pair,
    Proj,
    RealT,
    Sum,
    TensorT,
    Var,
    access,
    children,
    free_indices,
    free_vars,
    fresh_index,
    make_gens,
    rebuild,
    relations_of,
    sym_aff,
    walk,
)
from tensorlang.typecheck import iverson
from tensorlang.passes import rules
from tensorlang.passes.gen_pushout import gen_pushout
from tensorlang.passes.let_lift import let_lift
from tensorlang.passes.normal_forms import is_gen_pushed_out, is_let_lifted, is_pair_free
from tensorlang.passes.pair_elim import pair_elim
from tensorlang.passes.ssa_form import is_tensor_ssa
from tensorlang.passes.tensor_ssa import split, tensor_ssa
from tensorlang.typecheck import type_of

try:  # the cost model (engineer H2); the cost oracle is skipped without it
    from tensorlang.costmodel import cost as _cost
except ImportError:  # pragma: no cover - only before tensorlang.costmodel exists
    _cost = None


def _show(e) -> str:
    try:
        return tl.pretty(e, sharing=False)
    except TypeError:  # a printer without the sharing switch
        return tl.pretty(e)


CHECKERS = {
    let_lift: is_let_lifted,
    pair_elim: is_pair_free,
    gen_pushout: is_gen_pushed_out,
    tensor_ssa: is_tensor_ssa,
}

# rules whose two sides are equal only up to the isomorphism [n](A×B) ≅ [n]A × [n]B
ISO_RULES = {f"5.{k}" for k in range(11, 21)}
# rules of ⟦gen[~i] [p]·e⟧SSA: equal where p holds (5.29's dropped mask)
MASKED_RULES = {f"5.{k}" for k in range(27, 35)}


@dataclass
class Report:
    """What :func:`check_pass` checked (tests may assert on it)."""

    output: Expr
    cost_in: int | None = None
    cost_out: int | None = None
    applied: dict = field(default_factory=dict)  # rule number -> count
    rule_checked: int = 0
    rule_skipped: int = 0


# --------------------------------------------------------------------------
# Values


def _leaves(v, t, out=None, path=()):
    """A value as struct-of-arrays leaves ``{pair path: ndarray}`` (the
    isomorphism on values: an array of pairs becomes a pair of arrays)."""
    out = {} if out is None else out
    match t:
        case RealT():
            out[path] = np.asarray(v)
        case PairT(fst=a, snd=b):
            _leaves(v[0], a, out, path + (0,))
            _leaves(v[1], b, out, path + (1,))
        case TensorT(elem=el):
            if not _has_pair(el):
                out[path] = np.asarray(v)
            else:
                parts = [_leaves(v[k], el, None, ()) for k in range(len(v))]
                if parts:
                    for p in parts[0]:
                        out[path + p] = np.stack([np.asarray(q[p]) for q in parts])
                else:
                    out[path] = np.zeros((0,))
        case _:
            raise TypeError(f"not a type: {t!r}")
    return out


def _has_pair(t) -> bool:
    while isinstance(t, TensorT):
        t = t.elem
    return isinstance(t, PairT)


def _to_float(a):
    a = np.asarray(a)
    if a.dtype == object:
        return np.array([float(x) for x in a.ravel()], dtype=np.float64).reshape(a.shape)
    return a.astype(np.float64)


def assert_values_close(a, b, ta, tb, what: str, rtol=1e-9, atol=1e-9):
    la, lb = _leaves(a, ta), _leaves(b, tb)
    assert set(la) == set(lb), f"{what}: different structure {sorted(la)} vs {sorted(lb)}"
    for p in la:
        x, y = _to_float(la[p]), _to_float(lb[p])
        if x.size == 0 and y.size == 0:
            continue
        assert x.shape == y.shape, f"{what}: shapes {x.shape} vs {y.shape} at {p}"
        scale = max(1.0, float(np.nanmax(np.abs(x))) if x.size else 1.0)
        assert np.allclose(x, y, rtol=rtol, atol=atol * scale, equal_nan=True), f"{what}: values differ at {p}:\n{x}\nvs\n{y}"


def assert_values_exact(a, b, ta, tb, what: str):
    la, lb = _leaves(a, ta), _leaves(b, tb)
    assert set(la) == set(lb), f"{what}: different structure"
    for p in la:
        x, y = np.asarray(la[p], dtype=object), np.asarray(lb[p], dtype=object)
        assert x.shape == y.shape, f"{what}: shapes {x.shape} vs {y.shape}"
        for u, w in zip(x.ravel(), y.ravel()):
            d = sympy.expand(sympy.sympify(u) - sympy.sympify(w))
            if d != 0:
                d = sympy.simplify(d)
            assert d == 0, f"{what}: exact values differ: {u} vs {w}"


def symbolize(inputs: dict, relations=()) -> dict:
    """The inputs with every number replaced by a real sympy symbol (for the
    exact comparison of hand-written programs); relation data unchanged."""

    def sym(name, val):
        if isinstance(val, tuple):
            return tuple(sym(f"{name}_{k}", x) for k, x in enumerate(val))
        if isinstance(val, np.ndarray):
            out = np.empty(val.shape, dtype=object)
            for idx in np.ndindex(*val.shape):
                out[idx] = sympy.Symbol(f"{name}_" + "_".join(map(str, idx)), real=True)
            return out
        return sympy.Symbol(name, real=True)

    return {k: (v if k in relations else sym(k, v)) for k, v in inputs.items()}


def _relations_kw(e: Expr, inputs: dict) -> dict:
    return {r.name: inputs[r.name] for r in relations_of(e) if r.name in inputs}


def _inputs_for(e: Expr, inputs: dict) -> dict:
    names = {v.name for v in free_vars(e)} | {r.name for r in relations_of(e)}
    return {k: v for k, v in inputs.items() if k in names}


def _evaluate(e: Expr, inputs: dict, sizes: dict):
    return tl.evaluate(e, **_inputs_for(e, inputs), **_sizes_for(e, sizes))


# --------------------------------------------------------------------------
# The check


def check_pass(pass_fn, program: Expr, inputs: dict, sizes: dict, *, symbolic_inputs: dict | None = None,
               symbolic_cost: bool = False, max_rule_checks: int = 40, rtol: float = 1e-9) -> Report:
    """Run ``pass_fn`` on ``program`` and judge its output against its input
    by the three oracles (module doc).  ``inputs`` are the program's inputs
    (and relation data) by name, ``sizes`` its sizes; ``symbolic_inputs``
    (e.g. ``Program.symbolic_inputs()``) adds the exact comparison."""
    from tensorlang.evaluator import prepare_inputs

    _, inferred, _, _ = prepare_inputs(program, {**_inputs_for(program, inputs), **_sizes_for(program, sizes)})
    sizes = {**{k: v for k, v in inferred.items() if isinstance(k, str)}, **sizes}
    with rules.trace() as t:
        out = pass_fn(program)
    report = Report(out)
    for num, _, _ in t:
        report.applied[num] = report.applied.get(num, 0) + 1

    # (1) semantics
    v_in = _evaluate(program, inputs, sizes)
    v_out = _evaluate(out, inputs, sizes)
    assert_values_close(v_in, v_out, type_of(program), type_of(out), f"{pass_fn.__name__} changed the value", rtol=rtol)
    if symbolic_inputs is not None:
        s_in = _evaluate(program, symbolic_inputs, sizes)
        s_out = _evaluate(out, symbolic_inputs, sizes)
        assert_values_exact(s_in, s_out, type_of(program), type_of(out), f"{pass_fn.__name__} changed the exact value")

    # (2) normal form, and the output is a fixed point
    checker = CHECKERS.get(pass_fn)
    if checker is None and pass_fn.__name__ == "normalize":
        checker = is_tensor_ssa
    assert checker is not None, f"no normal-form checker for {pass_fn.__name__}"
    assert checker(out), f"{pass_fn.__name__}: output not in normal form ({checker.__name__}):\n{_show(out)}"
    again = pass_fn(out)
    assert again is out, f"{pass_fn.__name__} is not idempotent:\n{_show(out)}\n--- became ---\n{_show(again)}"

    # (3) cost
    if _cost is not None:
        rel_in = _relations_kw(program, inputs)
        report.cost_in = _cost(program, **_sizes_for(program, sizes), **rel_in)
        report.cost_out = _cost(out, **_sizes_for(out, sizes), **_relations_kw(out, inputs))
        assert report.cost_out <= report.cost_in, (
            f"{pass_fn.__name__} raised the cost from {report.cost_in} to {report.cost_out} at {sizes}:\n"
            f"{_show(program)}\n--- became ---\n{_show(out)}"
        )
        if symbolic_cost:
            check_symbolic_cost(program, out, pass_fn.__name__)

    # per-rule oracle
    check_rule_applications(t, program, out, inputs, sizes, report, max_rule_checks)
    return report


def _sizes_for(e: Expr, sizes: dict) -> dict:
    from tensorlang.ir import size_vars

    names = {s.name for s in size_vars(e)}
    for r in relations_of(e):
        for a in r.extents:
            names |= {s.name for s in a.size_vars()}
    return {k: v for k, v in sizes.items() if k in names}


def check_symbolic_cost(before: Expr, after: Expr, what: str) -> None:
    """``symbolic_cost(after) <= symbolic_cost(before)`` where the difference
    simplifies to something sympy can sign; otherwise sampled at sizes 1..5."""
    c0, c1 = tl.symbolic_cost(before), tl.symbolic_cost(after)
    d = sympy.simplify(sympy.sympify(c0) - sympy.sympify(c1))
    if d.is_number:
        assert d >= 0, f"{what} raised the symbolic cost by {-d}"
        return
    if d.is_nonnegative:
        return
    syms = sorted(d.free_symbols, key=lambda s: s.name)
    rng = np.random.default_rng(0)
    for _ in range(8):
        point = {s: int(rng.integers(1, 6)) for s in syms}
        try:
            val = d.subs(point)
        except Exception:  # a piecewise the sizes do not satisfy
            continue
        if val.is_number:
            assert val >= 0, f"{what} raised the symbolic cost at {point}: difference {d}"


# --------------------------------------------------------------------------
# Per-rule oracle


def _binder_ranges(*terms) -> dict:
    out = {}
    for t in terms:
        for x in walk(t):
            if isinstance(x, (Gen, Sum, Exists)):
                out.setdefault(x.var, x.extent)
    return out


def _let_values(*terms) -> dict:
    out = {}
    for t in terms:
        for x in walk(t):
            if isinstance(x, Let):
                out.setdefault(x.var, x.value)
    return out


def _close(term: Expr, lets: dict, ranges: dict):
    """``term`` with its free let variables bound (in dependency order) and
    its free index variables generated over; None if that is impossible."""
    order, seen = [], set()

    def need(v, depth=0):
        if v in seen:
            return True
        if v not in lets or depth > 200:
            return False
        val = lets[v]
        if free_indices(val):
            return False
        for w in free_vars(val):
            if w.uid != 0 and not need(w, depth + 1):
                return False
        seen.add(v)
        order.append(v)
        return True

    for v in free_vars(term):
        if v.uid != 0 and not need(v):
            return None
    closed = term
    for v in reversed(order):
        closed = Let(v, lets[v], closed)
    return closed


def _close_pair(lhs: Expr, rhs: Expr, lets: dict, ranges: dict):
    """Both sides closed over the same generated index variables (a side may
    not mention all of them, e.g. 5.11 drops a component)."""
    a, b = _close(lhs, lets, ranges), _close(rhs, lets, ranges)
    if a is None or b is None:
        return None
    fi = sorted(free_indices(a) | free_indices(b), key=lambda i: (i.name, i.uid))
    if any(i not in ranges or free_indices(ranges[i]) for i in fi):
        return None
    binds = [(i, ranges[i]) for i in fi]
    return make_gens(binds, a), make_gens(binds, b)


def _wellform(e: Expr) -> Expr:
    """Read a term typed only up to the isomorphism as a well-typed one:
    ``π_k`` of an array of pairs is ``gen[i] π_k e[i]``; an access of a pair
    of arrays is the pair of accesses."""
    match e:
        case Proj(index=k, arg=a):
            a2 = _wellform(a)
            t = type_of(a2)
            if isinstance(t, TensorT):
                i = fresh_index("w")
                return Gen(i, t.extent, _wellform(Proj(k, Access(a2, sym_aff(i)))))
            return Proj(k, a2)
        case Access(arr=a, index=ix):
            a2 = _wellform(a)
            if isinstance(type_of(a2), PairT):
                return Pair(_wellform(Access(Proj(0, a2), ix)), _wellform(Access(Proj(1, a2), ix)))
            return Access(a2, ix)
        case _:
            kids = [
                _wellform(c) if isinstance(c, Expr) and not isinstance(c, Var)
                else (tuple(_wellform(x) for x in c) if isinstance(c, tuple) else c)
                for c in children(e)
            ]
            return rebuild(e, kids)


def _masked(lhs: Expr, rhs: Expr) -> Expr:
    """``gen[~i] [p]·rhs[~i]`` for ``lhs = gen[~i] [p]·e``."""
    G, p, _ = split(lhs)
    return make_gens(G, iverson(p, access(rhs, [sym_aff(i) for i, _ in G])))


def check_rule_applications(trace, program, out, inputs, sizes, report: Report, limit: int) -> None:
    """Each recorded ``(number, lhs, rhs)``: both sides evaluate equal."""
    if not trace:
        return
    sources = [program, out] + [r for _, _, r in trace]
    lets = _let_values(*sources)
    ranges = _binder_ranges(*sources, *(l for _, l, _ in trace))
    # spread the checks over the rule numbers: round-robin, in trace order
    groups: dict = {}
    for k, (num, _, _) in enumerate(trace):
        groups.setdefault(num, []).append(k)
    picked, depth = [], 0
    while len(picked) < limit and any(depth < len(g) for g in groups.values()):
        for g in groups.values():
            if depth < len(g) and len(picked) < limit:
                picked.append(g[depth])
        depth += 1
    for k in picked:
        num, lhs, rhs = trace[k]
        if num in MASKED_RULES:
            rhs = _masked(lhs, rhs)
        if num in ISO_RULES:
            try:
                lhs, rhs = _wellform(lhs), _wellform(rhs)
            except TensorLangError:
                report.rule_skipped += 1
                continue
        closed = _close_pair(lhs, rhs, lets, ranges)
        if closed is None:
            report.rule_skipped += 1
            continue
        a, b = closed
        try:
            va, vb = _evaluate(a, inputs, sizes), _evaluate(b, inputs, sizes)
        except TensorLangError:  # out of range outside the redex's guard
            report.rule_skipped += 1
            continue
        assert_values_close(va, vb, type_of(a), type_of(b), f"rule {num}: {_show(lhs)}  ==>  {_show(rhs)}")
        report.rule_checked += 1


def check_rule(num: str, lhs: Expr, rhs: Expr, inputs: dict, sizes: dict | None = None) -> None:
    """One rule application on a closed left side (unit tests of single
    rules): both sides evaluate equal, up to the isomorphism for 5.11-5.20
    and where the mask holds for 5.27-5.34."""
    assert rhs is not None, f"rule {num} did not match {_show(lhs)}"
    assert rhs is not lhs, f"rule {num} returned its left side"
    a, b = lhs, (_masked(lhs, rhs) if num in MASKED_RULES else rhs)
    if num in ISO_RULES:
        a, b = _wellform(a), _wellform(b)
    sizes = sizes or {}
    va, vb = _evaluate(a, inputs, sizes), _evaluate(b, inputs, sizes)
    assert_values_close(va, vb, type_of(a), type_of(b), f"rule {num}: {_show(lhs)}  ==>  {_show(rhs)}")
