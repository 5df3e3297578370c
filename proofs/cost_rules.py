"""Cost obligations: the cost model's rules 4.22-4.34 (Figure 6) and 6.50-6.54 (Figure 17).

For a cost rule the "right-hand side" is a number: the obligation checks that
``tl.cost`` and ``tl.symbolic_cost`` (through isl) agree with an independent
reading of the rule, :func:`count`, a direct structural recursion over the
program at concrete sizes that enumerates every index point (it shares no
code with ``tensorlang.costmodel``).  Instances are random programs whose root is
the rule's construct, after explicit sharing (so a sub-term the user computed
once is costed once by both sides).
"""

from __future__ import annotations

import itertools

import sympy

import tensorlang as tl
from tensorlang import costmodel as C
from tensorlang.audit import size_sym
from tensorlang.errors import TensorLangError
from tensorlang.evaluator import Evaluator, Domain
from tensorlang.ir import (
    Access,
    Add,
    Call,
    Const,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    Proj,
    Sum,
    Var,
    fresh_index,
    as_aff,
    fresh_var,
    size_vars,
)
from tensorlang.sharing import explicit_sharing

from .framework import FAIL, PASS, Result, guarded, obligation
from .terms import EXACT_SIZES, X, Scope, Terms

SIZES = EXACT_SIZES + ({"n": 4, "m": 5},)


class _Counter:
    """Figure 6, rule by rule, at concrete sizes (index environments explicit)."""

    def __init__(self, sizes: dict):
        self.sizes = dict(sizes)
        env_sizes = {**sizes, **{tl.ir.SizeVar(k): v for k, v in sizes.items()}}
        self.ev = Evaluator(Const(0), {}, env_sizes, {}, Domain(False))  # only its predicate semantics is used

    def n(self, a) -> int:
        return a.evaluate({**self.sizes, **{tl.ir.SizeVar(k): v for k, v in self.sizes.items()}})

    def truth(self, p, env) -> bool:
        return self.ev.pred(p, env)

    def cost(self, e, env) -> int:
        """Signature: cost : Expr × index env -> int (rules 4.22-4.34)."""
        match e:
            case Var():  # 4.22
                return 0
            case Const():  # 4.23
                return 0
            case Add(lhs=a, rhs=b):  # 4.24 (p = true for an unbracketed operand)
                pa, _ = _brackets(a)
                pb, _ = _brackets(b)
                both = self.truth(pa, env) and self.truth(pb, env)
                return self.cost(a, env) + self.cost(b, env) + (1 if both else 0)
            case Mul(lhs=a, rhs=b):  # 4.25
                return 1 + self.cost(a, env) + self.cost(b, env)
            case Call(args=args):  # 4.26
                return 1 + sum(self.cost(x, env) for x in args)
            case Pair(fst=a, snd=b):  # 4.27
                return self.cost(a, env) + self.cost(b, env)
            case Proj(arg=a):  # 4.28
                return self.cost(a, env)
            case Gen(var=i, extent=n, body=b):  # 4.29
                return sum(self.cost(b, {**env, i: v}) for v in range(self.n(n)))
            case Sum():  # 4.30, nested sums and one predicate costed jointly
                binds, body = tl.ir.sums(e)
                p, inner = _brackets(body)
                total, hit = 0, False
                for pt in itertools.product(*[range(self.n(n)) for _, n in binds]):
                    env2 = {**env, **{i: v for (i, _), v in zip(binds, pt)}}
                    if self.truth(p, env2):
                        hit = True
                        total += 1 + self.cost(inner, env2)
                return total - (1 if hit else 0)
            case Access(arr=a):  # 4.31
                return self.cost(a, env)
            case Let(value=e0, body=e1):  # 4.32
                return self.cost(e0, env) + self.cost(e1, env)
            case Iverson(pred=p, body=b):  # 4.33 / 4.34
                return self.cost(b, env) if self.truth(p, env) else 0
            case _:
                raise TensorLangError(f"no cost rule for {e!r}")


def _brackets(e):
    """``[p0]·[p1]·e`` -> ``(p0 ∧ p1, e)``.  Reading: immediately nested
    brackets are one bracket on the conjunction (they denote the same term,
    and rules 5.24 / 5.28 merge them); Figure 6 prints a single ``[p]``."""
    ps = []
    while isinstance(e, Iverson):
        ps.append(e.pred)
        e = e.body
    return tl.ir.conj(*ps), e


def count(e, sizes: dict) -> int:
    """The independent Figure 6 count of a closed program at ``sizes``."""
    return _Counter(sizes).cost(e, {})


def _vec(T, body):
    n, i = T.extent(), fresh_index("i")
    return Gen(i, n, body(Scope().with_idx(i, n)))


def _sc(T, depth=1):
    return _vec(T, lambda sc: T.scalar(sc, depth))


MAKERS = {
    "4.22": ("$⟦x⟧σ = 0", lambda T: X if T.coin() else Let(fresh_var("v", X.type), X, X)),
    "4.23": ("$⟦c⟧σ = 0", lambda T: _vec(T, lambda sc: Const(3))),
    "4.24": ("$⟦[p0]·e0 + [p1]·e1⟧σ = $⟦[p0]·e0⟧σ + $⟦[p1]·e1⟧σ + [⟦p0 ∧ p1⟧σ]",
             lambda T: _vec(T, lambda sc: Add(Iverson(T.pred(sc), T.leaf(sc)), Iverson(T.pred(sc), T.leaf(sc))))),
    "4.25": ("$⟦e0 · e1⟧σ = 1 + $⟦e0⟧σ + $⟦e1⟧σ", lambda T: _vec(T, lambda sc: Mul(T.scalar(sc, 1), T.leaf(sc)))),
    "4.26": ("$⟦f(e0, …)⟧σ = 1 + $⟦e0⟧σ + …", lambda T: _vec(T, lambda sc: Call("sin", (T.scalar(sc, 1),)))),
    "4.27": ("$⟦(e0, e1)⟧σ = $⟦e0⟧σ + $⟦e1⟧σ", lambda T: Pair(_sc(T), _sc(T))),
    "4.28": ("$⟦π0 e⟧σ = $⟦e⟧σ", lambda T: Proj(T.rng.randrange(2), Pair(_sc(T), _sc(T)))),
    "4.29": ("$⟦gen[i:n] e⟧σ = Σ_î $⟦e⟧σ[i ↦ î]", lambda T: _sc(T, 2)),
    "4.30": ("$⟦sum[~i] [p]·e⟧σ = Σ_{~î: p} (1 + $⟦e⟧) − [∃~i p]", lambda T: _sums(T)),
    "4.31": ("$⟦e[a]⟧σ = $⟦e⟧σ", lambda T: Access(_vec(T, lambda sc: T.scalar(sc, 1)), as_aff(0))),
    "4.32": ("$⟦let x = e0 in e1⟧σ = $⟦e0⟧σ + $⟦e1⟧σ", lambda T: _let_of(T)),
    "4.33": ("$⟦[p]·e⟧σ = 0 where ⟦p⟧σ = false", lambda T: _vec(T, lambda sc: Iverson(T.pred(sc), T.scalar(sc, 1)))),
    "4.34": ("$⟦[p]·e⟧σ = $⟦e⟧σ where ⟦p⟧σ = true", lambda T: _vec(T, lambda sc: Iverson(T.pred(sc), T.scalar(sc, 1)))),
}


def _sums(T):
    n, m = T.extent(), T.extent()
    i, j = fresh_index("i"), fresh_index("j")
    sc = Scope().with_idx(i, n).with_idx(j, m)
    body = Iverson(T.pred(sc), T.scalar(sc, 1)) if T.coin(0.8) else T.scalar(sc, 1)
    if T.coin():
        return Sum(i, n, Sum(j, m, body))  # two sums and one predicate: costed jointly
    inner = Scope().with_idx(j, m)
    return Sum(j, m, Iverson(T.pred(inner), T.scalar(inner, 1)))


def _let_of(T):
    v = fresh_var("v", tl.ir.REAL)
    return Let(v, T.scalar(Scope(), 1), T.uses(Scope(), v, 1))


def _run_cost(number, title, maker, quick) -> Result:
    n_inst = 3 if quick else 12
    fails = []
    checked = 0
    for k in range(n_inst):
        T = Terms(seed=9000 + 7 * k + int(number.split(".")[1]))
        prog = explicit_sharing(maker(T))
        tl.typecheck.check_program(prog)
        names = {s.name for s in size_vars(prog)}
        sym = None
        try:
            sym = C.symbolic_cost(prog)
            sym = sympy.sympify(sym).xreplace({s: size_sym(s.name) for s in sympy.sympify(sym).free_symbols})
        except TensorLangError as exc:
            fails.append(f"instance {k}: symbolic_cost raised {exc}")
        for sizes in (SIZES[:2] if quick else SIZES):
            sz = {a: b for a, b in sizes.items() if a in names}
            want = count(prog, sz)
            got = int(C.cost(prog, **sz))
            checked += 1
            if got != want:
                fails.append(f"instance {k} at {sz}: tl.cost = {got}, Figure 6 by enumeration = {want}: {tl.pretty(prog)[:160]}")
                break
            if sym is not None:
                sv = sym.xreplace({size_sym(a): b for a, b in sz.items()})
                if sv != want:
                    fails.append(f"instance {k} at {sz}: symbolic_cost gives {sv}, enumeration {want}: {tl.pretty(prog)[:160]}")
                    break
    verdict = FAIL if fails else PASS
    return Result(number, title, verdict, n_inst, "", "tl.cost and tl.symbolic_cost vs enumeration of Figure 6",
                  "; ".join(fails[:2]) or f"{checked} (program, sizes) pairs agree")


def _register():
    for number, (title, maker) in MAKERS.items():
        def run(quick, number=number, title=title, maker=maker):
            return guarded(number, title, lambda: _run_cost(number, title, maker, quick))

        obligation(number, figure=6, kind="cost", title=title)(run)


_register()

# -- Figure 17: the inner-product extension ------------------------------------------

FIG17 = {
    "6.50": "$⟦dlet dx = e in e^L⟧σ = $⟦e⟧σ + $⟦e^L⟧σ",
    "6.51": "$⟦e^I ⊕ e^S⟧σ = $⟦e^I⟧σ + $⟦e^S⟧σ",
    "6.52": "$⟦ZERO⟧σ = 0",
    "6.53": "$⟦<e0 | e1>⟧σ = $(T) + $⟦e0⟧σ + $⟦e1⟧σ",
    "6.54": "$⟦<e0 | e1>_[p]⟧σ = #(p) + $⟦e0⟧σ + $⟦e1⟧σ",
}


def _run_fig17(number, title, quick) -> Result:
    fn = C.inner_product_cost
    if number not in ("6.53", "6.54"):
        return _run_meta(number, title, C, quick)
    fails, checked = [], 0
    for k in range(3 if quick else 10):
        T = Terms(seed=9500 + k)
        two = T.coin()
        n, m = T.extent(), T.extent()
        ivs = [fresh_index("q"), fresh_index("r")][: 2 if two else 1]
        sc = Scope().with_idx(ivs[0], n)
        if two:
            sc = sc.with_idx(ivs[1], m)

        def tensor():
            body = T.scalar(sc, 1)
            return Gen(ivs[0], n, Gen(ivs[1], m, body)) if two else Gen(ivs[0], n, body)

        e0, e1 = tensor(), tensor()
        pred = T.pred(sc) if number == "6.54" else None
        for sizes in (SIZES[:2] if quick else SIZES):
            names = {s.name for s in size_vars(Pair(e0, e1))} | {"n", "m"}
            sz = {a: b for a, b in sizes.items() if a in names}
            got = int(fn(e0, e1, pred, tuple(ivs), **sz)) if pred is not None else int(fn(e0, e1, **sz))
            iface = _count_points(ivs, [n, m][: len(ivs)], pred, sz) if pred is not None else \
                _Counter(sz).n(n) * (_Counter(sz).n(m) if two else 1)
            want = iface + count(explicit_sharing(e0), sz) + count(explicit_sharing(e1), sz)
            checked += 1
            if got != want:
                fails.append(f"instance {k} at {sz}: inner_product_cost = {got}, Figure 17 by enumeration = {want}")
                break
    return Result(number, title, FAIL if fails else PASS, 3 if quick else 10, "",
                  "inner_product_cost vs enumeration of Figure 17",
                  "; ".join(fails[:2]) or f"{checked} (instance, sizes) pairs agree")


def _count_points(ivs, extents, pred, sizes) -> int:
    c = _Counter(sizes)
    total = 0
    for pt in itertools.product(*[range(c.n(e)) for e in extents]):
        if c.truth(pred, dict(zip(ivs, pt))):
            total += 1
    return total


def _register17():
    for number, title in FIG17.items():
        def run(quick, number=number, title=title):
            return guarded(number, title, lambda: _run_fig17(number, title, quick))

        obligation(number, figure=17, kind="cost", title=title)(run)


_register17()


def _run_meta(number, title, C, quick) -> Result:
    """6.50-6.52: ``extended_cost`` of dlet / ⊕ / ZERO terms vs the enumeration
    (``dlet`` costs its de-sugared forward derivative, Fig. 13)."""
    fn = C.extended_cost
    from tensorlang.passes.adjoint_rules import DLet, Deriv, Inner, OPlus, ZERO_TERM
    from tensorlang.passes.total_derivative import tangent_inputs, total_derivative

    fails, checked = [], 0
    for k in range(3 if quick else 10):
        T = Terms(seed=9700 + k)
        e = explicit_sharing(_vec(T, lambda sc: T.scalar(sc, 2)))
        other = explicit_sharing(_vec(T, lambda sc: T.scalar(sc, 1)))
        i = fresh_index("q")
        left = Gen(i, e.extent, Const(1))
        if number == "6.50":
            sigma = tangent_inputs(e, [v for v in tl.ir.input_vars(e)][:1])
            dv = fresh_var("dX", e.type if hasattr(e, "type") else tl.type_of(e))
            term = DLet(dv, Deriv(e, sigma), Inner(left, e))
            want = lambda sz: count(explicit_sharing(total_derivative(e, sigma)), sz) + \
                _Counter(sz).n(e.extent) + count(e, sz)
        elif number == "6.51":
            term = OPlus((Inner(left, e), Inner(Gen(i, other.extent, Const(2)), other)))
            want = lambda sz: _Counter(sz).n(e.extent) + count(e, sz) + _Counter(sz).n(other.extent) + count(other, sz)
        else:
            term = OPlus((ZERO_TERM, Inner(left, e)))
            want = lambda sz: _Counter(sz).n(e.extent) + count(e, sz)
        for sizes in (SIZES[:2] if quick else SIZES):
            sz = dict(sizes)
            got = int(fn(term, **sz))
            checked += 1
            if got != want(sz):
                fails.append(f"instance {k} at {sz}: extended_cost = {got}, Figure 17 by enumeration = {want(sz)}")
                break
    return Result(number, title, FAIL if fails else PASS, 3 if quick else 10, "",
                  "extended_cost vs enumeration of Figure 17",
                  "; ".join(fails[:2]) or f"{checked} (term, sizes) pairs agree")
