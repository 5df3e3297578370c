"""The obligation framework: per-rule checks, verdicts, and the shared oracles.

An *obligation* belongs to one numbered rule of the paper.  It generates
instances of the rule's left-hand side, runs the implementing code (the
registered rule function, or the pass that applies it, observed through
``passes.rules.trace``), and checks

(a) semantics: left and right evaluate to the same exact sympy values
    (``tl.evaluate`` over sympy symbol arrays, several small sizes), or for a
    derivative rule, to the derivative computed by sympy from the exact
    value of the primal (an oracle that shares no code with the passes);
(b) cost: the cost does not rise, or stays within the rule's bound, decided
    symbolically for all sizes >= 1 (``tensorlang.audit.decide_nonnegative``)
    or on a grid, which the verdict then says.

Verdicts: ``pass`` (every instance checked), ``FAIL`` (a counterexample is
printed), ``rule not implemented`` (no registered rule has the number),
``not available`` (a stage the check needs is missing), ``not exercised``
(the rule is registered but no generated instance made it fire).
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import sympy

import tensorlang as tl
from tensorlang.audit import decide_nonnegative, io_size_expr
from tensorlang.errors import TensorLangError, UnsupportedError
from tensorlang.ir import Access, Expr, Gen, PairT, Pair, Proj, TensorT, input_vars, size_vars

PASS, FAIL, NOT_IMPL, NOT_AVAIL, NOT_EXERCISED = "pass", "FAIL", "rule not implemented", "not available", "not exercised"


@dataclass
class Result:
    number: str
    title: str
    verdict: str
    instances: int = 0
    semantics: str = ""  # how (a) was checked
    cost: str = ""  # how (b) was checked
    detail: str = ""

    @property
    def ok(self) -> bool:
        # only "pass" is a pass: an obligation that checked nothing (no rule
        # registered, no instance fired, a stage not available, an empty
        # corpus) fails the run instead of passing vacuously (issue #14 item 5)
        return self.verdict == PASS


@dataclass
class Obligation:
    number: str  # the paper's number, e.g. "5.21"
    figure: int
    kind: str  # rewrite | ssa | derivative | adjoint | cost | theorem
    title: str
    run: Callable  # (quick: bool) -> Result
    aliases: tuple = ()  # other registry numbers this obligation covers (e.g. "5.19")
    quick: bool = True  # part of the --quick subset


OBLIGATIONS: dict[str, Obligation] = {}


def obligation(number: str, *, figure: int, kind: str, title: str, aliases=(), quick=True):
    def deco(fn):
        ob = Obligation(number, figure, kind, title, fn, tuple(aliases), quick)
        OBLIGATIONS[number] = ob
        return fn

    return deco


def covered_numbers() -> set:
    out = set()
    for ob in OBLIGATIONS.values():
        out.add(ob.number)
        out.update(ob.aliases)
    return out


def obligation_for(number: str) -> Obligation | None:
    if number in OBLIGATIONS:
        return OBLIGATIONS[number]
    for ob in OBLIGATIONS.values():
        if number in ob.aliases:
            return ob
    return None


# -- the rule registry (filled as pass modules are imported) -----------------

PASS_MODULES = (
    "let_lift", "pair_elim", "gen_pushout", "tensor_ssa", "pipeline",
    "total_derivative", "adjoint", "simplify",
)


def load_rules() -> dict:
    """Import every pass module (so its rules register); return RULES."""
    from tensorlang.passes import rules

    # a pass module that does not import is a failure of the run, not a
    # reason to check fewer rules
    for m in PASS_MODULES:
        importlib.import_module(f"tensorlang.passes.{m}")
    for m in ("tensorlang.autodiff", "tensorlang.costmodel"):
        importlib.import_module(m)
    return rules.RULES


def registered(number: str):
    return load_rules().get(number)


def first_registered(*numbers):
    rules = load_rules()
    for n in numbers:
        if n in rules:
            return rules[n]
    return None


# -- isomorphism of Section 5.2 (struct of arrays) ------------------------------


def conjugate(e: Expr) -> Expr:
    """Give pair elimination's intermediate terms their meaning by conjugating
    with ``[n](T0 × T1) ≅ [n]T0 × [n]T1`` (paper §5.2): a projection of an
    array of pairs becomes ``gen[i:n] π e[i]`` and an access into a pair of
    arrays becomes ``(π0 e[a], π1 e[a])``.  Well-typed terms are unchanged.
    Signature: conjugate : Expr -> Expr."""
    from tensorlang.ir import children, rebuild
    from tensorlang.typecheck import type_of

    memo: dict = {}

    def go(x):
        if not isinstance(x, Expr):
            if isinstance(x, tuple):
                return tuple(go(y) for y in x)
            return x
        if x in memo:
            return memo[x]
        y = rebuild(x, [go(c) for c in children(x)])
        match y:
            case Proj(index=k, arg=a) if isinstance(type_of(a), TensorT):
                t = type_of(a)
                i = tl.ir.fresh_index("c")
                y = Gen(i, t.extent, go(Proj(k, Access(a, tl.ir.sym_aff(i)))))
            case Access(arr=a, index=ix) if isinstance(type_of(a), PairT):
                y = Pair(go(Access(Proj(0, a), ix)), go(Access(Proj(1, a), ix)))
            case _:
                pass
        memo[x] = y
        return y

    return go(e)


# -- (a) semantics ------------------------------------------------------------


def exact_value(e: Expr, sizes: dict, extra: dict | None = None):
    from .terms import symbolic_inputs

    return tl.evaluate(e, **symbolic_inputs(e, sizes, extra))


def canon(v):
    """A value in struct-of-arrays form as nested ``("P", a, b)`` / ``("A",
    [items])`` / scalar: the isomorphism ``[n](T0 × T1) ≅ [n]T0 × [n]T1`` of
    §5.2 applied to values, so pair elimination's results compare equal."""
    if isinstance(v, tuple):
        return ("P", canon(v[0]), canon(v[1]))
    if isinstance(v, np.ndarray):
        return _push([canon(x) for x in v])
    return v


def _push(items):
    if items and all(isinstance(x, tuple) and x[0] == "P" for x in items):
        return ("P", _push([x[1] for x in items]), _push([x[2] for x in items]))
    return ("A", items)


def _canon_equal(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]):
            return False
        if a[0] == "P":
            return _canon_equal(a[1], b[1]) and _canon_equal(a[2], b[2])
        return len(a[1]) == len(b[1]) and all(_canon_equal(x, y) for x, y in zip(a[1], b[1]))
    d = sympy.sympify(a) - sympy.sympify(b)
    if d == 0 or sympy.expand(d) == 0:
        return True
    return sympy.simplify(d) == 0


def values_equal(a, b) -> bool:
    """Exact equality of evaluator values (sympy scalars, object arrays,
    tuples), up to the struct-of-arrays isomorphism."""
    return _canon_equal(canon(a), canon(b))


def same_semantics(lhs: Expr, rhs: Expr, sizes_list) -> str | None:
    """None when ``lhs`` and ``rhs`` agree exactly at every size; else a message."""
    from .terms import symbolic_inputs

    lhs_c, rhs_c = conjugate(lhs), conjugate(rhs)
    for sizes in sizes_list:
        names = {s.name for s in size_vars(lhs_c) | size_vars(rhs_c)}
        sz = {k: v for k, v in sizes.items() if k in names}
        ins = symbolic_inputs(lhs_c, sz)
        ins.update({k: v for k, v in symbolic_inputs(rhs_c, sz).items()})
        try:
            va = tl.evaluate(lhs_c, **{k: v for k, v in ins.items() if k in _names(lhs_c)})
            vb = tl.evaluate(rhs_c, **{k: v for k, v in ins.items() if k in _names(rhs_c)})
        except TensorLangError as exc:
            return f"evaluation failed at {sz}: {exc}"
        if not values_equal(va, vb):
            return f"values differ at sizes {sz}"
    return None


def _names(e: Expr) -> set:
    return {v.name for v in input_vars(e)} | {s.name for s in size_vars(e)}


# -- (b) cost -----------------------------------------------------------------


def symbolic_cost(e: Expr):
    from tensorlang.audit import symbolic_cost_of

    return symbolic_cost_of(conjugate(e))


def cost_within(small: Expr, big: Expr, factor=1, *, io: bool = False, declared=()):
    """Decide ``$(small) <= factor·$(big)`` for all sizes >= 1.  Returns a
    Decision (``tensorlang.audit``).
    ``declared``: the program's inputs, counted in ``$(T_I)`` even where a
    stage dropped one as dead (``tensorlang.audit.io_size_expr``)."""
    s, b = symbolic_cost(small), symbolic_cost(big)
    if io:
        s, b = s + io_size_expr(small, declared), b + io_size_expr(big, declared)
    return decide_nonnegative(factor * b - s)


# -- tracing --------------------------------------------------------------------


def traced(fn, *args, **kw):
    """Run ``fn`` and return ``(result, [(number, lhs, rhs), ...])``."""
    from tensorlang.passes.rules import trace

    with trace() as t:
        out = fn(*args, **kw)
    return out, list(t)


@dataclass
class Tally:
    """Accumulates instance outcomes into one Result."""

    number: str
    title: str
    instances: int = 0
    fired: int = 0
    failures: list = field(default_factory=list)
    unavailable: list = field(default_factory=list)
    grid_only: bool = False
    outside: int = 0  # instances outside the explicitly-shared precondition (cost by Fig. 6 enumeration)
    semantics: str = ""
    cost: str = ""

    def fail(self, msg: str):
        self.failures.append(msg)

    def decision(self, d, what: str):
        if d.holds is False:
            self.fail(f"{what}: {d.detail}")
        elif d.holds is None:
            self.unavailable.append(f"{what}: {d.detail}")
        elif d.method != "symbolic":
            self.grid_only = True

    def result(self) -> Result:
        cost = self.cost + (" (grid of sizes for some instances)" if self.grid_only else "")
        if self.failures:
            return Result(self.number, self.title, FAIL, self.instances, self.semantics, cost,
                          "; ".join(self.failures[:3]))
        if self.fired == 0:
            why = "; ".join(self.unavailable[:2]) or "no generated instance made the rule fire"
            return Result(self.number, self.title, NOT_EXERCISED if not self.unavailable else NOT_AVAIL,
                          self.instances, self.semantics, cost, why)
        detail = f"rule fired on {self.fired} of {self.instances} instances"
        if self.outside:
            detail += (f"; {self.outside} not in explicitly-shared form: cost by Figure 6 enumeration "
                       "at the exact sizes instead of tl.cost")
        if self.unavailable:
            detail += "; partly unchecked: " + "; ".join(self.unavailable[:2])
        return Result(self.number, self.title, PASS, self.instances, self.semantics, cost, detail)


def guarded(number: str, title: str, fn: Callable) -> Result:
    """Run an obligation body; an unexpected exception (a missing module included) is a FAIL verdict, not a crash."""
    try:
        return fn()
    except UnsupportedError as exc:
        return Result(number, title, NOT_AVAIL, detail=f"unsupported: {exc}")
    except Exception as exc:  # an obligation must report, not crash the run
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        return Result(number, title, FAIL, detail=f"{type(exc).__name__}: {exc} [{tb}]")
