"""Obligations for the derivative rules of Section 6 (Figures 13-16).

The rules of ``D`` (6.1-6.16) and ``D^T`` (6.20-6.49) rewrite meta-level
terms (``D⟦e⟧σ``, inner products, ``dlet``), so an instance is a program
whose derivative needs the rule: each obligation builds programs containing
the rule's left-hand-side construct, runs ``tl.derivative`` / ``tl.adjoint``
under a rule trace, requires the rule to fire, and checks

(a) semantics against an oracle that shares no code with the passes: the
    primal is evaluated exactly over sympy symbols and differentiated by
    sympy; the total derivative must equal ``Σ_k ∂f/∂x_k · dx_k`` and the
    adjoint must equal ``Σ_j dy_j ∂f_j/∂x_k`` (the dot-product identity
    ``<dy | Df dx> = <D^T f dy | dx>`` for symbolic ``dx``, ``dy``), exactly;
(b) cost: the derivative of the instance stays within the theorem the rule
    serves (``$(D e) <= 4 $(e)``, ``$_IO(D^T e) <= 4 $_IO(e)``, ``e`` the
    tensor-SSA form of the instance), symbolically for all sizes >= 1.
"""

from __future__ import annotations

import numpy as np
import sympy

import tensorlang as tl
from tensorlang.ir import (
    REAL,
    Access,
    Add,
    Call,
    Const,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    PairT,
    Proj,
    Sum,
    TensorT,
    fresh_index,
    fresh_var,
    input_vars,
    size_vars,
    sym_aff,
)

from .framework import NOT_IMPL, Result, Tally, cost_within, first_registered, guarded, obligation, traced
from .terms import EXACT_SIZES, A, M, N, S, X, Y, Scope, Terms, symbol_value

COUNT = {True: 2, False: 8}
P = tl.var("P", PairT(TensorT(N, REAL), TensorT(N, REAL)))  # a struct-of-arrays pair input


# -- the oracle ------------------------------------------------------------------


def _flat(v):
    if isinstance(v, tuple):
        return [y for x in v for y in _flat(x)]
    if isinstance(v, np.ndarray):
        return list(v.ravel())
    return [v]


def _symbols_of(val):
    return [s for s in _flat(val)]


def _inputs(prog, sizes):
    names = {s.name for s in size_vars(prog)}
    out = {v.name: symbol_value(v.name, v.type, sizes) for v in input_vars(prog)}
    out.update({k: v for k, v in sizes.items() if k in names})
    return out


def _new_input(expr, prog, name_hint: str):
    """The input of ``expr`` that ``prog`` does not have and is named ``name_hint`` (or the only one)."""
    old = {v.name for v in input_vars(prog)}
    new = [v for v in input_vars(expr) if v.name not in old]
    for v in new:
        if v.name == name_hint:
            return v
    return new[0] if len(new) == 1 else None


def _equal(a, b) -> bool:
    d = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    return d == 0 or sympy.simplify(d) == 0


def check_forward(prog, wrt, D, sizes) -> str | None:
    """``D`` (from tl.derivative) equals sympy's directional derivative of ``prog``."""
    ins = _inputs(prog, sizes)
    f = _flat(tl.evaluate(prog, **ins))
    d_ins = dict(ins)
    dirs = []
    for w in wrt:
        if w.name not in ins:  # x ∉ FV(e): its tangent cannot contribute
            continue
        dv = _new_input(D, prog, "d" + w.name)
        if dv is None:
            return f"cannot find the tangent input for {w.name} among {sorted(v.name for v in input_vars(D))}"
        d_ins[dv.name] = symbol_value(dv.name, dv.type, sizes)
        dirs.append((_symbols_of(ins[w.name]), _symbols_of(d_ins[dv.name])))
    d_ins = {k: v for k, v in d_ins.items() if k in {v.name for v in input_vars(D)} | {s.name for s in size_vars(D)}}
    got = _flat(tl.evaluate(D, **d_ins))
    if len(got) != len(f):
        return f"derivative has {len(got)} scalars, the program {len(f)}"
    for fj, gj in zip(f, got):
        want = sum((sympy.diff(fj, x) * dx for xs, dxs in dirs for x, dx in zip(xs, dxs)), sympy.Integer(0))
        if not _equal(want, gj):
            return f"at sizes {sizes}: D gives {gj}, sympy gives {want}"
    return None


def check_adjoint(prog, wrt, DT, sizes) -> str | None:
    """``DT`` (from tl.adjoint) equals ``Σ_j dy_j ∂f_j/∂w`` for each ``w`` in ``wrt``."""
    ins = _inputs(prog, sizes)
    f = _flat(tl.evaluate(prog, **ins))
    dy = _new_input(DT, prog, "dy")
    a_ins = dict(ins)
    if dy is None:
        return f"cannot find the cotangent input among {sorted(v.name for v in input_vars(DT))}"
    a_ins[dy.name] = symbol_value("dy" if dy.name != "dy" else dy.name, dy.type, sizes)
    dys = _symbols_of(a_ins[dy.name])
    if len(dys) != len(f):
        return f"cotangent input {dy.name} has {len(dys)} scalars, the output {len(f)}"
    keep = {v.name for v in input_vars(DT)} | {s.name for s in size_vars(DT)}
    got = _flat(tl.evaluate(DT, **{k: v for k, v in a_ins.items() if k in keep}))
    want = []
    for w in wrt:
        for x in _symbols_of(ins[w.name]):
            want.append(sum((dj * sympy.diff(fj, x) for dj, fj in zip(dys, f)), sympy.Integer(0)))
    if len(got) != len(want):
        return f"adjoint has {len(got)} scalars, expected {len(want)} (the wrt inputs' sizes)"
    for g, w in zip(got, want):
        if not _equal(g, w):
            return f"at sizes {sizes}: D^T gives {g}, sympy gives {w}"
    return None


# -- instance programs, by the construct a rule needs -----------------------------


def _vec(T, body):
    n, i = T.extent(), fresh_index("i")
    return Gen(i, n, body(Scope().with_idx(i, n)))


def _contract(T):
    # gen[i:n] sum[k:m] [p]·A[i][k]·y[k]: a binary contraction in SSA (6.48)
    i, k = fresh_index("i"), fresh_index("k")
    sc = Scope().with_idx(i, N).with_idx(k, M)
    return Gen(i, N, Sum(k, M, Iverson(T.pred(sc), Mul(Access(Access(A, sym_aff(i)), sym_aff(k)), Access(Y, sym_aff(k))))))


def _unary(T):
    # sum[i:n] [p]·x[i]: a unary contraction (6.49)
    i = fresh_index("i")
    return Sum(i, N, Iverson(T.pred(Scope().with_idx(i, N)), Access(X, sym_aff(i))))


def _fanout(T):
    # a bound tensor used twice: contributions to one differential merge (6.39)
    v = fresh_var("u", TensorT(N, REAL))
    i, k = fresh_index("i"), fresh_index("k")
    u = Gen(i, N, Mul(Access(X, sym_aff(i)), Access(X, sym_aff(i))))
    body = Sum(k, N, Mul(Access(v, sym_aff(k)), Call("sin", (Access(v, sym_aff(k)),))))
    return Let(v, u, body)


def _add(T):
    return _vec(T, lambda sc: Add(Iverson(T.pred(sc), T.leaf(sc)), Iverson(T.pred(sc), T.leaf(sc))))


def _mul(T):
    return _vec(T, lambda sc: Mul(T.leaf(sc), T.leaf(sc)))


def _call(T):
    return _vec(T, lambda sc: Call(T.rng.choice(("sin", "exp")), (Add(T.leaf(sc), S),)))


def _pair_out(T):
    return Pair(_unary(T), _mul(T))


def _pair_in(T):
    i = fresh_index("i")
    return Sum(i, N, Mul(Access(Proj(0, P), sym_aff(i)), Access(Proj(1, P), sym_aff(i))))


def _pair_in_one(T):
    i = fresh_index("i")
    return Sum(i, N, Mul(Access(Proj(0, P), sym_aff(i)), Access(Proj(0, P), sym_aff(i))))


def _const(T):
    return _vec(T, lambda sc: Add(Const(T.rng.choice((2, 3))), T.leaf(sc)))


def _random(T):
    return _vec(T, lambda sc: T.scalar(sc, 2))


def _let(T):
    v = fresh_var("v", REAL)
    return Let(v, _unary(T), Mul(v, v))


def _dead(T):
    v = fresh_var("dead", TensorT(N, REAL))
    i = fresh_index("i")
    return Let(v, Gen(i, N, Call("exp", (Access(X, sym_aff(i)),))), _unary(T))


def _const_input(T):
    # y is used but not differentiated (6.2 / 6.34)
    return _contract(T)


FORWARD = {
    "6.1": ("D⟦x⟧(σ[x ↦ dx]) ==> dx", _mul, None),
    "6.2": ("D⟦x⟧σ ==> 0, x ∉ σ", lambda T: Y if T.coin() else A, "direct"),
    "6.3": ("D⟦c⟧σ ==> 0", lambda T: Const(T.rng.choice((2, 3, -1))), "direct"),
    "6.4": ("D⟦e0 + e1⟧σ ==> D⟦e0⟧σ + D⟦e1⟧σ", _add, None),
    "6.5": ("D⟦e0 · e1⟧σ ==> D⟦e0⟧σ · e1 + e0 · D⟦e1⟧σ", _mul, None),
    "6.6": ("D⟦f(e0, …)⟧σ ==> Df(e0, …; D⟦e0⟧σ, …)", _call, None),
    "6.7": ("D⟦(e0, e1)⟧σ ==> (D⟦e0⟧σ, D⟦e1⟧σ)", _pair_out, None),
    "6.8": ("D⟦π0 e⟧σ ==> π0 D⟦e⟧σ", _pair_in, None),
    "6.9": ("D⟦gen[i:n] e⟧σ ==> gen[i:n] D⟦e⟧σ", _mul, None),
    "6.10": ("D⟦sum[i:n] e⟧σ ==> sum[i:n] D⟦e⟧σ", _unary, None),
    "6.11": ("D⟦e[a]⟧σ ==> (D⟦e⟧σ)[a]", _contract, None),
    "6.12": ("D⟦[p]·e⟧σ ==> [p]·D⟦e⟧σ", _unary, None),
    "6.16": ("D⟦let x = e0 in e1⟧σ ==> let x = e0 in let dx = D⟦e0⟧σ in D⟦e1⟧(σ[x ↦ dx])", _let, None),
}

ADJOINT = {
    "6.20": ("<dY | D⟦let X = e0 in e1⟧σ> ==> let X = e0 in dlet dX = D⟦e0⟧σ in <dY | D⟦e1⟧(σ[X ↦ dX])>", _let, None),
    "6.25": ("dlet dX = D⟦e0⟧σ in let X = e1 in e^L ==> let X = e1 in dlet dX = D⟦e0⟧σ in e^L", _fanout, None),
    "6.26": ("<dY | D⟦(e0, e1)⟧σ> ==> <π0 dY | D⟦e0⟧σ> ⊕ <π1 dY | D⟦e1⟧σ>", _pair_out, None),
    "6.27": ("<dY | D⟦π0 e⟧σ> ==> <(dY, 0) | D⟦e⟧σ>", _pair_in_one, None),
    "6.28": ("<(dY0, 0) | e> ⊕ <(0, dY1) | e> ==> <(dY0, dY1) | e>", _pair_in, None),
    "6.31": ("dlet dX = D⟦e0⟧σ in (<e1 | dX>_[p] ⊕ e^S) ==> let dX = e1 in (<dX | D⟦e0⟧σ>_[p] ⊕ e^S)", _fanout, None),
    "6.32": ("dlet dX = D⟦e0⟧σ in e^S ==> e^S, dX ∉ FV(e^S)", _mul, "meta"),
    "6.33": ("<e | D⟦X⟧(σ[X ↦ dX])>_[p] ==> <e | dX>_[p]", _mul, None),
    "6.34": ("<e | D⟦X⟧σ>_[p] ==> ZERO, X ∉ σ", _const_input, "y"),
    "6.35": ("<e | D⟦C⟧σ>_[p] ==> ZERO", _const, None),
    "6.36": ("e^I ⊕ ZERO ==> e^I", _const_input, "y"),
    "6.39": ("<e0 | dX>_[p0] ⊕ <e1 | dX>_[p1] ==> let dY = [p0]·e0 + [p1]·e1 in <dY | dX>_[p0 ∨ p1]", _fanout, None),
    "6.44": ("<dY | D⟦[p0]·X0 + [p1]·X1⟧σ>_[p2] ==> <dY | D⟦X0⟧σ>_[p0 ∧ p2] ⊕ <dY | D⟦X1⟧σ>_[p1 ∧ p2]", _add, None),
    "6.47": ("<dY | D⟦[p0]·f(X)⟧σ>_[p1] ==> let dX' = [p0 ∧ p1]·DTf(X, dY) in <dX' | D⟦X⟧σ>_[p0 ∧ p1]", _call, None),
    "6.48": ("binary contraction: dX0' = gen[~i0] sum[~g ~i1 ~s] [p ∧ p']·dY[~g]·X1[~i1], dX1' likewise", _contract, None),
    "6.49": ("unary contraction: dX' = gen[~i] sum[~g ~s] [p ∧ p']·dY[~g], filter exists[~g ~s](p ∧ p')", _unary, None),
}


def _wrt(prog, exclude):
    """Every non-scalar input but ``exclude`` (which then stays a constant, x ∉ σ)."""
    ins = input_vars(prog)
    tensors = [v for v in ins if not isinstance(v.type, type(REAL)) and v.name != exclude]
    return tensors or [v for v in ins if v.name != exclude] or list(ins)


def _ssa(prog):
    return tl.normalize(prog)


def _run(number, title, maker, exclude, kind, quick) -> Result:
    if first_registered(number) is None:
        return Result(number, title, NOT_IMPL, detail="no rule registered under this number")
    from tensorlang import autodiff
    forward = kind == "derivative"
    tally = Tally(number, title,
                  semantics="exact: sympy derivative of the exact primal" if forward else
                  "exact: Σ_j dy_j ∂f_j/∂x (dot-product identity, symbolic dx, dy)",
                  cost="Theorem 6.1 bound on the instance" if forward else "Theorem 6.55 bound on the instance")
    sizes_list = EXACT_SIZES[:1] if quick else EXACT_SIZES[:2]
    for k in range(COUNT[quick]):
        T = Terms(seed=7000 + 13 * k + int(number.split(".")[1]), lets=False)
        prog = maker(T)
        for retry in range(5):  # an instance needs an input to differentiate
            if input_vars(prog) or exclude == "direct":
                break
            prog = maker(T)
        tally.instances += 1
        if exclude == "meta":
            # 6.32 needs a differential binding nothing contributes to, which
            # tensor SSA's dead-code removal never leaves for tl.adjoint: apply
            # the rule to a meta-term and compare the de-sugared terms (Fig. 14).
            ok = _meta_instance(tally, number, T, k, sizes_list)
            tally.fired += ok
            continue
        if exclude == "direct":
            # The transform short-cuts sub-terms without differentiated
            # variables, so 6.2 / 6.3 never fire inside tl.derivative: apply
            # the rule function itself, D⟦e⟧σ with x ∉ FV(e), σ = [x ↦ dx].
            from tensorlang.passes.total_derivative import _D, tangent_inputs

            wrt = [X]
            out = first_registered(number).fn(prog, tangent_inputs(prog, wrt), _D())
            if out is None:
                continue
        else:
            wrt = _wrt(prog, exclude)
            if forward:
                # Theorem 6.1 is about D of the tensor-SSA form; the rule may
                # also fire only on the unnormalized program.
                ssa = _ssa(prog)
                d_ssa, tr = traced(autodiff.derivative, ssa, wrt=wrt, simplify=False)
                out = d_ssa
                if not any(n == number for n, _, _ in tr):
                    out, tr = traced(autodiff.derivative, prog, wrt=wrt, simplify=False)
            else:
                out, tr = traced(autodiff.adjoint, prog, wrt=wrt, simplify=False)
            if not any(n == number for n, _, _ in tr):
                continue
        tally.fired += 1
        for sizes in sizes_list:
            sz = {k2: v for k2, v in sizes.items() if k2 in {s.name for s in size_vars(prog)}}
            msg = (check_forward if forward else check_adjoint)(prog, wrt, out, sz)
            if msg:
                tally.fail(f"instance {k}: {msg}")
                break
        else:
            if not forward:
                _per_application(tally, number, tr, k)
            if forward and exclude != "direct":
                tally.decision(cost_within(d_ssa, ssa, 4), f"instance {k} cost")
            elif forward:
                tally.decision(cost_within(out, prog, 4), f"instance {k} cost")
            else:
                tally.decision(cost_within(out, _ssa(prog), 4, io=True, declared=input_vars(prog)),
                               f"instance {k} cost")
    return tally.result()


def _meta_instance(tally, number, T, k, sizes_list) -> int:
    """``dlet dX = D⟦e0⟧σ in <c | D⟦e1⟧σ>`` with ``dX`` unused: the rule must
    drop the binding; de-sugared, both sides agree exactly and the Figure 17
    cost does not rise."""
    from tensorlang.audit import decide_nonnegative
    from tensorlang.cost_symbolic import symbolic_extended_cost
    from tensorlang.passes.adjoint_rules import DLet, Deriv, Inner, OPlus, desugar
    from tensorlang.passes.total_derivative import tangent_inputs

    from .framework import same_semantics

    i, j = fresh_index("i"), fresh_index("j")
    e0 = Gen(i, N, Mul(Access(X, sym_aff(i)), T.scalar(Scope().with_idx(i, N), 1)))
    e1 = Gen(j, N, Call("sin", (Access(X, sym_aff(j)),)))
    sigma = tangent_inputs(Pair(e0, e1), [X])
    dX = fresh_var("dX", TensorT(N, REAL))
    c = Gen(fresh_index("c"), N, Const(T.rng.choice((2, 3))))
    lhs = DLet(dX, Deriv(e0, sigma), OPlus((Inner(c, Deriv(e1, sigma)),)))
    rhs = first_registered(number).fn(lhs)
    if rhs is None:
        return 0
    tally.semantics = "exact sympy, de-sugared meta-terms (Fig. 14), rule called directly"
    tally.cost = "Fig. 17 cost of the meta-term, symbolic"
    msg = same_semantics(desugar(lhs), desugar(rhs), sizes_list)
    if msg:
        tally.fail(f"instance {k}: {msg}")
        return 1
    d = decide_nonnegative(symbolic_extended_cost(lhs) - symbolic_extended_cost(rhs))
    tally.decision(d, f"instance {k}: Fig. 17 cost")
    return 1


# Rules whose single application may raise the Figure 17 cost: 6.27 (the
# paper pays for it with one $(T_I) allowance, absorbed by 6.28 when both
# halves of a pair get contributions).
MAY_RAISE = {"6.27"}


def _per_application(tally, number, tr, k):
    """Step 1 of Theorem 6.55's proof: each application of the rule keeps the
    Figure 17 cost (``tensorlang.cost_symbolic.symbolic_extended_cost``),
    decided symbolically.  Applications on terms with unexpanded parts (a
    rule's ``Hole``) cannot be costed and are skipped."""
    if number in MAY_RAISE:
        return
    from tensorlang.cost_symbolic import symbolic_extended_cost
    from tensorlang.audit import decide_nonnegative

    for n, lhs, rhs in tr:
        if n != number:
            continue
        try:
            before, after = symbolic_extended_cost(lhs), symbolic_extended_cost(rhs)
        except Exception:  # a partial term (Hole) or a construct the cost model refuses
            continue
        tally.cost = "Theorem 6.55 bound on the instance; Fig. 17 cost per application"
        tally.decision(decide_nonnegative(before - after), f"instance {k}: one application raises the Fig. 17 cost")


def _register():
    for kind, table, fig in (("derivative", FORWARD, 13), ("adjoint", ADJOINT, 15)):
        for number, (title, maker, exclude) in table.items():
            figure = 16 if number in ("6.48", "6.49") else fig

            def run(quick, number=number, title=title, maker=maker, exclude=exclude, kind=kind):
                return guarded(number, title, lambda: _run(number, title, maker, exclude, kind, quick))

            obligation(number, figure=figure, kind=kind, title=title)(run)


_register()
