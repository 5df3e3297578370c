"""``tensorlang audit``: certify the cost of a program and of its derivatives.

The paper's guarantees (Section 5: every normal-form pass is cost-neutral;
Theorem 6.1: ``$(D e) <= 4 $(e)``; Theorem 6.55: ``$_IO(D^T e) <= 4 $_IO(e)``,
Figure 17) are statements about the cost model of Figure 6.  This module runs
a program through every stage of the pipeline, costs each stage at the given
sizes and symbolically in the sizes, and decides each guarantee:

* symbolically, for all sizes >= 1, when the difference of the two costs is a
  polynomial (or a piecewise polynomial whose pieces are split by bounds on
  single sizes) that :func:`decide_nonnegative` can prove non-negative;
* otherwise on a grid of sizes, and the report says so.

A stage that is not built yet (or refuses the program) makes its row "not
available"; a verdict that needs it is not claimed.  :func:`audit` returns an
:class:`AuditReport` (the CLI prints it, ``--json`` serializes it).
"""

from __future__ import annotations

import os
import runpy
from dataclasses import dataclass, field

import sympy

from .errors import TensorLangError, UnsupportedError
from .ir import Expr, PairT, RealT, TensorT, Type, input_vars, size_vars
from .typecheck import check_program, type_of
from .loops import has_loop
from . import costmodel
from .autodiff import _seed_name
from .cost_relations import _REL_SYMS, relation_count_values
from .driver import compile as tl_compile, route, stage
from .passes.pipeline import STAGES, run_stage
from .passes.total_derivative import tangent_inputs

THEOREM_FACTOR = 4
DEFAULT_SIZE = 100
# Costs are products of sizes (n*m*k...): 2**40 keeps a cubic one exact in isl's
# 64-bit arithmetic paths and still far beyond any array that fits in memory.
MAX_SIZE = 2**40


from .decide import (  # noqa: F401  (re-exported: the audit's public decision API)
    GRID,
    SMALL_GRID,
    Decision,
    _grid,
    canonical_symbols,
    decide_nonnegative,
    is_count,
    leading_monomial,
    size_sym,
)


# --------------------------------------------------------------------------
# Costs (through tensorlang.costmodel)


def type_size_expr(t: Type) -> sympy.Expr:
    """``$(T)`` of Figure 17 as a sympy expression in the sizes."""
    match t:
        case RealT():
            return sympy.Integer(1)
        case PairT(fst=a, snd=b):
            return type_size_expr(a) + type_size_expr(b)
        case TensorT(extent=n, elem=el):
            ext = sympy.Integer(n.const) + sum(
                (c * size_sym(s.name) for s, c in n.terms), sympy.Integer(0)
            )
            return sympy.expand(ext * type_size_expr(el))
        case _:
            raise TensorLangError(f"not a type: {t!r}")


def io_size_expr(e: Expr, declared=()) -> sympy.Expr:
    """``$(T_I) + $(T_O)``: sizes of a program's inputs and of its output.

    ``declared``: inputs the function has even where a stage dropped them as
    dead (a normalized program or a derivative may no longer mention an input
    the user declared; it is still an argument of the function, Theorem 6.55's
    ``T_I``, and its cotangent is still an output)."""
    total = type_size_expr(type_of(e))
    seen = set()
    for v in list(input_vars(e)) + list(declared):
        if v.name not in seen:
            seen.add(v.name)
            total += type_size_expr(v.type)
    return sympy.expand(total)


def cost_at(e: Expr, sizes: dict, relations: dict | None = None) -> int:
    """``tl.cost`` at ``sizes`` (only those ``e`` uses), with relation data for its relations."""
    from .ir import relations_of

    needed = {s.name for s in size_vars(e)}
    for r in relations_of(e):
        for a in r.extents:
            needed |= {s.name for s in a.size_vars()}
    kw = {k: v for k, v in sizes.items() if k in needed}
    used = {r.name for r in relations_of(e)}
    kw.update({k: v for k, v in (relations or {}).items() if k in used})
    return int(costmodel.cost(e, **kw))


def symbolic_cost_of(e: Expr):
    return canonical_symbols(costmodel.symbolic_cost(e))


# --------------------------------------------------------------------------
# The pipeline's stages: the one stage list's (tensorlang.driver), route "audit"

PASS_LABELS = {  # Stage.name -> the report's label
    "let_lift": "let-lifting",
    "pair_elim": "pair elimination",
    "gen_pushout": "gen pushout",
    "tensor_ssa": "tensor SSA",
}


_PASS_ROWS = tuple((st.name, PASS_LABELS[st.name]) for st in STAGES)


def normal_form_passes():
    """``[(label, fn)]`` for the four passes of Section 5, in order: exactly
    ``tensorlang.passes.pipeline.STAGES`` (each run through ``run_stage``, so
    debug mode checks its pre- and post-condition as ``tl.normalize`` does)."""
    return [(PASS_LABELS[st.name], lambda e, st=st: run_stage(st, e)) for st in STAGES]


def _derivative(e: Expr, wrt):
    # the paper's D⟦e⟧σ (Theorem 6.1), before any simplification
    return run_stage(stage("derivative"), e, sigma=tangent_inputs(e, list(wrt)))


def _adjoint(e: Expr, wrt, naive: bool = False):
    """Dᵀ⟦e⟧ of the tensor-SSA row (Theorem 6.55), unsimplified; the cotangent
    is a fresh input of the output's type."""
    from .ir import Var

    seed = Var(_seed_name(e), 0, type_of(e))
    return run_stage(stage("naive_adjoint" if naive else "adjoint"), e, wrt=list(wrt), seed=seed)


# --------------------------------------------------------------------------
# The report


@dataclass
class StageRow:
    name: str
    expr: Expr | None = None
    cost: int | None = None
    symbolic: object = None  # sympy expression or None
    io_symbolic: object = None
    ratio: float | None = None
    reason: str | None = None  # why the row is not available / partial
    declared: tuple = ()  # the program's declared inputs (see io_size_expr)

    @property
    def available(self) -> bool:
        return self.expr is not None

    def io_cost_at(self, sizes: dict):
        if self.cost is None or self.expr is None:
            return None
        return self.cost + int(io_size_expr(self.expr, self.declared).xreplace(
            {size_sym(k): v for k, v in sizes.items()}))

    def symbolic_io(self):
        if self.symbolic is None or self.expr is None:
            return None
        return sympy.expand(self.symbolic + io_size_expr(self.expr, self.declared))

    def to_json(self, sizes) -> dict:
        return {
            "stage": self.name,
            "available": self.available,
            "reason": self.reason,
            "cost": self.cost,
            "symbolic_cost": None if self.symbolic is None else str(self.symbolic),
            "io_cost": self.io_cost_at(sizes),
            "symbolic_io_cost": None if self.symbolic_io() is None else str(self.symbolic_io()),
            "ratio_to_primal": self.ratio,
        }


@dataclass
class Verdict:
    name: str
    claim: str
    holds: bool | None  # None: not checked (a stage is missing)
    method: str  # "symbolic" | "grid" | "not available"
    detail: str = ""

    @property
    def status(self) -> str:
        if self.holds is None:
            return "not available"
        return "holds" if self.holds else "FAILS"

    def to_json(self) -> dict:
        return {"name": self.name, "claim": self.claim, "holds": self.holds, "status": self.status,
                "method": self.method, "detail": self.detail}


@dataclass
class AuditReport:
    program: str
    entry: str
    wrt: list
    sizes: dict
    rows: list = field(default_factory=list)
    verdicts: list = field(default_factory=list)
    asymptotic: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)

    @property
    def failed(self) -> list:
        return [v for v in self.verdicts if v.holds is False]

    @property
    def unchecked(self) -> list:
        return [v for v in self.verdicts if v.holds is None]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def row(self, name: str) -> StageRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_json(self) -> dict:
        return {
            "program": self.program,
            "entry": self.entry,
            "wrt": self.wrt,
            "sizes": self.sizes,
            "stages": [r.to_json(self.sizes) for r in self.rows],
            "verdicts": [v.to_json() for v in self.verdicts],
            "asymptotic": self.asymptotic,
            "kernels": self.kernels,
            "exit_code": self.exit_code,
        }


# --------------------------------------------------------------------------
# Loading the user's program


def load_program(path: str, entry: str = "loss") -> Expr:
    """Run the Python file ``path`` and return its ``entry``: an expression,
    or a zero-argument function returning one."""
    if not os.path.isfile(path):
        raise TensorLangError(f"no such file: {path}")
    try:
        ns = runpy.run_path(path, run_name="__tensorlang_audit__")
    except TensorLangError:
        raise
    except SystemExit as exc:
        raise TensorLangError(f"{path} exited while being loaded (SystemExit {exc.code})") from None
    except Exception as exc:  # the user's file failed: report it, as a bad program
        raise TensorLangError(f"running {path} failed: {type(exc).__name__}: {exc}") from None
    if entry not in ns:
        names = sorted(k for k, v in ns.items() if isinstance(v, Expr) and not k.startswith("_"))
        raise TensorLangError(f"{path} defines no {entry!r}; expressions it defines: {names or 'none'} (use --entry NAME)")
    val = ns[entry]
    if callable(val) and not isinstance(val, Expr):
        try:
            val = val()
        except TensorLangError:
            raise
        except Exception as exc:  # the user's entry failed: a bad program, not a compiler bug
            raise TensorLangError(f"calling {entry}() from {path} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(val, Expr):
        raise TensorLangError(f"{entry} in {path} is a {type(val).__name__}, not a tensorlang expression")
    check_program(val)
    return val


def parse_sizes(text: str | None) -> dict:
    """``"n=1000,m=16"`` -> ``{"n": 1000, "m": 16}`` (sizes must be ints >= 1)."""
    out = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise TensorLangError(f"bad size {part!r}: write NAME=INT, e.g. n=1000")
        k, v = (s.strip() for s in part.split("=", 1))
        try:
            iv = int(v)
        except ValueError:
            raise TensorLangError(f"bad size {part!r}: {v!r} is not an integer") from None
        if iv < 1:
            raise TensorLangError(f"size {k} must be >= 1, got {iv}")
        if iv > MAX_SIZE:
            raise TensorLangError(f"size {k}={v} is too large: sizes are 64-bit, at most {MAX_SIZE} (2**40)")
        out[k] = iv
    return out


def resolve_wrt(e: Expr, names) -> list:
    """The input variables to differentiate: the named ones, or every tensor input."""
    ins = input_vars(e)
    if not names:
        tensors = [v for v in ins if isinstance(v.type, TensorT)]
        return tensors or list(ins)
    by_name = {v.name: v for v in ins}
    out = []
    for nm in names:
        if nm not in by_name:
            raise TensorLangError(f"--wrt {nm}: the program has no input {nm!r}; its inputs are {sorted(by_name)}")
        out.append(by_name[nm])
    return out


# --------------------------------------------------------------------------
# The audit


def audit_sizes(expr, sizes) -> tuple:
    """``(the program's size names, sizes)``: the sizes given, checked against
    the program's, the others at DEFAULT_SIZE."""
    known = sorted({s.name for s in size_vars(expr)})
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(known))
    if unknown:
        raise TensorLangError(f"--sizes names {unknown}, which the program does not use; its sizes are {known}")
    for k in known:
        sizes.setdefault(k, DEFAULT_SIZE)
    return known, sizes


def audit(expr: Expr, *, wrt=None, sizes: dict | None = None, entry: str = "loss",
          show_kernels: bool = False) -> AuditReport:
    """Cost every stage of ``expr``'s pipeline and decide the paper's guarantees.

    ``wrt``: input names or Vars (default: every tensor input); ``sizes``: the
    sizes to report costs at (default :data:`DEFAULT_SIZE` for each).
    """
    from .sharing import pretty

    if isinstance(expr, Expr) and has_loop(expr):  # issue #17: loop_audit (above this module) audits loops
        raise UnsupportedError("audit: the program has a loop; use tensorlang.loop_audit.audit_loop "
                               "(tensorlang audit on the command line does)")
    check_program(expr, "tensorlang audit")
    check_bounds(expr)
    wrt_vars = resolve_wrt(expr, [w if isinstance(w, str) else w.name for w in (wrt or [])])
    known, sizes = audit_sizes(expr, sizes)
    report = AuditReport(pretty(expr), entry, [v.name for v in wrt_vars], {k: sizes[k] for k in known})

    # the stages of route "audit", in its order: each row costs one stage's output
    steps = route("audit").names
    assert steps[:2] == ("hoist_guards", "sharing") and tuple(n for n, _ in _PASS_ROWS) == steps[2:6], steps
    prog = run_stage(stage("sharing"), run_stage(stage("hoist_guards"), expr))
    rows = report.rows
    primal = _row("input program", lambda: prog, sizes)
    rows.append(primal)

    # Section 5: the four normal-form passes, in order.
    cur = prog
    pass_rows = []
    for label, fn in normal_form_passes():
        if cur is None:
            pass_rows.append(StageRow(label, reason="an earlier pass refused the program"))
            continue
        r = _row(label, lambda fn=fn, cur=cur: fn(cur), sizes)
        pass_rows.append(r)
        cur = r.expr
    rows.extend(pass_rows)
    ssa = pass_rows[-1] if pass_rows and pass_rows[-1].available else None
    base = ssa.expr if ssa is not None else None

    def need_ssa(label, thunk):
        if base is None:
            return StageRow(label, reason="needs the tensor-SSA form, which is not available")
        return _row(label, thunk, sizes)

    deriv = need_ssa("total derivative", lambda: _derivative(base, wrt_vars))
    adj_raw = need_ssa("adjoint", lambda: _adjoint(base, wrt_vars))
    if adj_raw.available:
        adj = _row("simplified adjoint", lambda: run_stage(stage("simplify"), adj_raw.expr), sizes)
    else:
        adj = StageRow("simplified adjoint", reason=adj_raw.reason)
    naive = need_ssa("naive adjoint", lambda: _adjoint(base, wrt_vars, naive=True))
    rows.extend([deriv, adj_raw, adj, naive])

    declared = tuple(input_vars(expr))
    for r in rows:
        r.declared = declared
        if primal.cost and r.cost is not None:
            r.ratio = r.cost / primal.cost
        elif primal.cost == 0 and r.cost is not None:
            r.ratio = None

    _verdicts(report, primal, pass_rows, ssa, deriv, adj_raw, adj)
    report.asymptotic = {
        "primal": leading_monomial(primal.symbolic),
        "adjoint": leading_monomial(adj.symbolic),
        "naive adjoint": leading_monomial(naive.symbolic),
    }
    if show_kernels:
        report.kernels = _kernels(prog, adj.expr)
    return report


def check_bounds(expr: Expr) -> None:
    """Refuse a program with an access not proven in range (``tensorlang.bounds``
    raises a TensorLangError naming it and the guard that would make it legal)."""
    from . import bounds

    bounds.check_program(expr)


def _row(label: str, thunk, sizes) -> StageRow:
    try:
        e = thunk()
    except UnsupportedError as exc:
        return StageRow(label, reason=f"unsupported: {exc}")
    row = StageRow(label, expr=e)
    reasons = []
    rels = _relations(e)
    try:
        # A relation's cost depends on its data: report it on seeded random
        # data of density 1/2 (the verdicts also try all-true and all-false).
        row.cost = cost_at(e, sizes, _relation_data(rels, sizes)[-1])
        if rels:
            reasons.append("cost at sizes on random relation data (density 1/2)")
    except TensorLangError as exc:
        reasons.append(f"cost at sizes: {exc}")
    try:
        row.symbolic = symbolic_cost_of(e)
    except TensorLangError as exc:
        reasons.append(f"symbolic cost: {exc}")
    row.reason = "; ".join(reasons) or None
    return row


def _compare(name, claim, small: StageRow, big: StageRow, factor, io: bool) -> Verdict:
    """Decide ``cost(small) <= factor * cost(big)`` (``io``: with ``$_IO``)."""
    if not small.available or not big.available:
        missing = small if not small.available else big
        return Verdict(name, claim, None, "not available", f"{missing.name}: {missing.reason}")
    s_sym = small.symbolic_io() if io else small.symbolic
    b_sym = big.symbolic_io() if io else big.symbolic
    rels = _relations(small.expr, big.expr)

    def io_at(e, sz):
        row = small if e is small.expr else big
        return int(io_size_expr(e, row.declared).xreplace({size_sym(k): v for k, v in sz.items()})) if io else 0

    if s_sym is not None and b_sym is not None:
        diff = sympy.expand(factor * b_sym - s_sym)

        def ev_sym(sz):  # the symbolic difference, relation counts taken from data
            return min(_at(diff, sz, data) for data in _relation_data(rels, sz))

        d = decide_nonnegative(diff, evaluate=ev_sym if rels else None)
    else:
        def ev(sz):
            worst = None
            for data in _relation_data(rels, sz):
                cs = cost_at(small.expr, sz, data) + io_at(small.expr, sz)
                cb = cost_at(big.expr, sz, data) + io_at(big.expr, sz)
                v = factor * cb - cs
                worst = v if worst is None else min(worst, v)
            return worst

        names = sorted({s.name for s in size_vars(small.expr) | size_vars(big.expr)})
        d = _grid(ev, names, SMALL_GRID, with_data=bool(rels))
    if d.holds is None:
        return Verdict(name, claim, None, "not available", d.detail)
    detail = d.detail
    if d.holds is False:
        detail = f"{detail}: compiler bug, the cost model says {small.name} exceeds the bound"
    return Verdict(name, claim, d.holds, d.method, detail)


def _relations(*exprs) -> list:
    from .ir import relations_of

    out = {}
    for e in exprs:
        for r in relations_of(e):
            out[r.name] = r
    return list(out.values())


def _relation_data(rels, sizes: dict) -> list:
    """Relation data to check a relation-dependent bound with: all-true,
    all-false and a seeded random half (one dict per data set)."""
    import numpy as np

    if not rels:
        return [{}]
    rng = np.random.default_rng(0)
    sets = [{}, {}, {}]
    for r in rels:
        shape = tuple(a.evaluate(sizes) for a in r.extents)
        sets[0][r.name] = np.ones(shape, dtype=bool)
        sets[1][r.name] = np.zeros(shape, dtype=bool)
        sets[2][r.name] = rng.random(shape) < 0.5
    return sets


def _at(expr, sizes: dict, data: dict):
    """Value of a symbolic cost at sizes, its relation counts computed from ``data``."""
    vals = {size_sym(k): v for k, v in sizes.items()}
    if any(is_count(s) for s in expr.free_symbols):
        counts = relation_count_values(_raw_count_symbols(expr), **sizes, **data)
        by_name = {k.name: v for k, v in counts.items()}
        vals.update({s: by_name[s.name] for s in expr.free_symbols if is_count(s)})
    return expr.xreplace(vals)


def _raw_count_symbols(expr):
    """``expr`` with its count symbols replaced by the cost model's own symbols
    (``canonical_symbols`` renamed them; relation_count_values keys on them)."""
    return expr.xreplace({s: _REL_SYMS[s.name] for s in expr.free_symbols if s.name in _REL_SYMS})


def _verdicts(report, primal, pass_rows, ssa, deriv, adj_raw, adj):
    vs = report.verdicts
    # Section 5: each pass does not raise the cost.
    prev = primal
    sub = []
    for r in pass_rows:
        sub.append(_compare(f"cost-neutral: {r.name}", f"$({r.name}) <= $({prev.name})", r, prev, 1, io=False))
        prev = r if r.available else prev
    if not pass_rows:
        vs.append(Verdict("pass cost-neutrality", "each pass: $(after) <= $(before)", None, "not available",
                          "no normal-form pass is available"))
    else:
        holds = None if any(v.holds is None for v in sub) else all(v.holds for v in sub)
        if any(v.holds is False for v in sub):
            holds = False
        method = "symbolic" if all(v.method == "symbolic" for v in sub) else (
            "not available" if holds is None else "grid")
        detail = "; ".join(f"{v.name.split(': ', 1)[1]}: {v.status} ({v.method if v.holds is not None else v.detail})"
                           for v in sub)
        vs.append(Verdict("pass cost-neutrality", "each pass: $(after) <= $(before)", holds, method, detail))
    ssa_row = ssa if ssa is not None else StageRow("tensor SSA", reason="not available")
    vs.append(_compare("Theorem 6.1", "$(D e) <= 4·$(e), e the tensor-SSA form", deriv, ssa_row,
                       THEOREM_FACTOR, io=False))
    t655 = _compare("Theorem 6.55", "$_IO(D^T e) <= 4·$_IO(e), e the tensor-SSA form", adj, ssa_row,
                    THEOREM_FACTOR, io=True)
    if adj_raw.available:
        raw = _compare("Theorem 6.55 (raw)", "", adj_raw, ssa_row, THEOREM_FACTOR, io=True)
        if raw.holds is False or t655.holds is None:
            t655 = Verdict("Theorem 6.55", t655.claim, raw.holds, raw.method,
                           f"unsimplified adjoint: {raw.detail}; simplified adjoint: {t655.status}")
        else:
            t655.detail = f"{t655.detail}; unsimplified adjoint also {raw.status} ({raw.method})"
    vs.append(t655)


def _kernels(prog: Expr, adjoint: Expr | None) -> dict:
    out = {}
    for label, e in (("primal", prog), ("adjoint", adjoint)):
        if e is None:
            out[label] = "(not available)"
            continue
        try:
            k = tl_compile(e)
            out[label] = getattr(k, "source", None) or "(this kernel has no generated source)"
        except TensorLangError as exc:
            out[label] = f"(compile failed: {exc})"
    return out
