"""Deciding cost inequalities ``f(sizes) >= 0`` for all sizes >= 1.

The cost guarantees of the paper (Section 5's cost-neutrality, Theorems 6.1
and 6.55) are inequalities between symbolic costs: piecewise polynomials in
the size variables (Figure 6 counted by isl/barvinok), sometimes with
relation counts ``nnz_R``.  :func:`decide_nonnegative` proves such an
inequality for every size >= 1 where a sound argument applies, and otherwise
checks a grid of sizes and says so.  Used by ``tensorlang audit`` and by
``proofs/``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy

from .errors import TensorLangError

GRID = (1, 2, 3, 4, 5, 8, 16, 64, 1000)
SMALL_GRID = (1, 2, 3, 5, 8)

@dataclass
class Decision:
    """Outcome of deciding ``expr >= 0`` for all sizes >= 1.

    ``holds`` is True (proved, or no counterexample on the grid when
    ``method`` says grid), False (a counterexample is given), None (could not
    be evaluated).  ``method`` is ``"symbolic"`` or ``"grid"``.
    """

    holds: bool | None
    method: str
    detail: str = ""
    counterexample: dict | None = None


def size_sym(name: str) -> sympy.Symbol:
    """The canonical sympy symbol of a size (an integer >= 1)."""
    return sympy.Symbol(name, integer=True, positive=True)


def canonical_symbols(expr) -> sympy.Expr:
    """Re-express ``expr`` over :func:`size_sym` symbols (matched by name), so
    costs from different modules combine whatever assumptions they used."""
    expr = sympy.sympify(expr)
    return expr.xreplace({s: size_sym(s.name) for s in expr.free_symbols})


def _poly_nonneg_shifted(expr, syms, base: dict) -> bool | None:
    """Prove ``expr >= 0`` for every ``s >= base[s]`` by substituting
    ``s = base[s] + t`` and finding every coefficient of the resulting
    polynomial in ``t >= 0`` non-negative.  None: not a polynomial."""
    ts = {s: sympy.Symbol(f"t_{s.name}", nonnegative=True) for s in syms}
    shifted = sympy.expand(expr.xreplace({s: base[s] + ts[s] for s in syms}))
    if not shifted.free_symbols <= set(ts.values()):
        return None
    try:
        poly = sympy.Poly(shifted, *ts.values()) if ts else None
    except sympy.PolynomialError:
        return None
    if poly is None:
        return bool(shifted >= 0) if shifted.is_number else None
    coeffs = poly.coeffs()
    if not all(c.is_number and c.is_real for c in coeffs):
        return None
    return all(c >= 0 for c in coeffs)


def _atoms_bounds(cond, syms) -> list | None:
    """Integer breakpoints ``k`` of univariate conditions ``a*s + b (op) 0``;
    None when a condition relates several sizes (not split-decidable)."""
    out = {s: set() for s in syms}
    for rel in cond.atoms(sympy.core.relational.Relational):
        d = sympy.expand(rel.lhs - rel.rhs)
        fs = d.free_symbols
        if len(fs) != 1:
            if not fs:
                continue
            return None
        (s,) = fs
        try:
            p = sympy.Poly(d, s)
        except sympy.PolynomialError:
            return None
        if p.degree() != 1:
            return None
        a, b = p.all_coeffs()
        root = -b / a
        out[s] |= {int(sympy.floor(root)), int(sympy.floor(root)) + 1, int(sympy.ceiling(root)) + 1}
    return out


def decide_nonnegative(expr, *, grid=GRID, evaluate=None) -> Decision:
    """Decide ``expr >= 0`` for every assignment of its size symbols to
    integers >= 1 (and of its relation counts ``nnz_R...`` to integers >= 0).

    Rigorous path: a polynomial is shifted to ``s = 1 + t`` and proved by
    non-negative coefficients; a Piecewise whose conditions bound single sizes
    is split into cells (single values below the largest breakpoint, a tail
    ``s = K + t`` above it), each decided the same way.  A relation count
    ``nnz_R`` is at least each of its projections ``nnz_R[*,_]`` (non-empty
    rows), which the proof may use.  Otherwise the expression (or
    ``evaluate(sizes)``) is checked on ``grid`` and the decision says so; a
    negative grid value is a definite counterexample.  An expression with
    relation counts and no ``evaluate`` (which must supply relation data) is
    left undecided rather than checked with impossible counts.
    """
    if expr is not None:
        expr = canonical_symbols(expr)
        counts = sorted((s for s in expr.free_symbols if is_count(s)), key=lambda s: s.name)
        syms = sorted((s for s in expr.free_symbols if not is_count(s)), key=lambda s: s.name)
        if counts:
            if _decide_counts(expr, syms, counts):
                return Decision(True, "symbolic", "proved for all sizes >= 1 and all relation data")
            if evaluate is None:
                return Decision(None, "not decided", "the bound depends on relation counts "
                                f"({', '.join(c.name for c in counts)}) and was not proved symbolically")
            return _grid(evaluate, [s.name for s in syms], SMALL_GRID, with_data=True)
        if not expr.has(sympy.floor, sympy.ceiling, sympy.Mod):
            proved = _decide_cells(expr, syms)
            if proved is True:
                return Decision(True, "symbolic", "proved for all sizes >= 1")
        evaluate = _evaluator_of(expr, syms)
        names = [s.name for s in syms]
    else:
        names = None
    return _grid(evaluate, names, grid)


def is_count(s) -> bool:
    """A data-dependent symbol of the symbolic cost, not a size: a relation
    count (``nnz_R``, ``nnz_R[*,_]``) or a relational truth value ``[p]``
    (0 or 1).  Sizes are identifiers (``tl.size`` requires it)."""
    return s.name.startswith("nnz_") or not s.name.isidentifier()


def _decide_counts(expr, syms, counts) -> bool:
    """Sizes ``1 + t``, counts ``0 + t``; additionally try ``nnz_R = q + u`` for
    one projection ``q = nnz_R[...]`` per relation (a projection counts at most
    as many points as the relation has)."""
    if expr.has(sympy.Piecewise, sympy.floor, sympy.ceiling, sympy.Mod):
        return False
    base = {s: 1 for s in syms}
    base.update({c: 0 for c in counts})
    if _poly_nonneg_shifted(expr, syms + counts, base) is True:
        return True
    by_rel = {}
    for c in counts:
        rel = c.name.split("[", 1)[0]
        by_rel.setdefault(rel, {"total": None, "proj": []})
        if "[" in c.name:
            by_rel[rel]["proj"].append(c)
        else:
            by_rel[rel]["total"] = c
    choices = [[(v["total"], q) for q in v["proj"]] for v in by_rel.values() if v["total"] is not None and v["proj"]]
    for pick in itertools.product(*choices):
        sub = {}
        for total, q in pick:
            sub[total] = q + sympy.Symbol(f"u_{total.name}", integer=True, nonnegative=True)
        e2 = sympy.expand(expr.xreplace(sub))
        rest = sorted((s for s in e2.free_symbols if s not in syms), key=lambda s: s.name)
        b2 = {s: 1 for s in syms}
        b2.update({c: 0 for c in rest})
        if _poly_nonneg_shifted(e2, syms + rest, b2) is True:
            return True
    return False


def _univariate_nonneg(expr, s, lo: int) -> bool | None:
    """Exact for one size: a polynomial is >= 0 at every integer ``>= lo`` iff
    its leading coefficient is positive (or it is constant and >= 0) and it is
    >= 0 at each integer from ``lo`` up to the Cauchy bound on its real roots."""
    try:
        p = sympy.Poly(sympy.expand(expr), s)
    except sympy.PolynomialError:
        return None
    cs = p.all_coeffs()
    if not all(c.is_number and c.is_real for c in cs):
        return None
    if p.degree() <= 0:
        return bool(cs[0] >= 0)
    if cs[0] < 0:
        return False
    bound = 1 + max(abs(c / cs[0]) for c in cs[1:])
    top = int(sympy.ceiling(bound))
    if top - lo > 100000:
        return None
    return all(p.eval(k) >= 0 for k in range(lo, max(lo, top) + 1))


def _poly_nonneg(expr, syms, base: dict) -> bool | None:
    ok = _poly_nonneg_shifted(expr, syms, base)
    if ok is True or len(syms) != 1:
        return ok
    return _univariate_nonneg(expr, syms[0], base[syms[0]])


def _decide_cells(expr, syms) -> bool | None:
    """Split every size's range [1, inf) into single values below a cut ``K``
    and a tail ``K + t``; decide each cell (Piecewise conditions that bound a
    single size are constant on a cell once ``K`` exceeds their breakpoints)."""
    floor_k = 1
    if expr.has(sympy.Piecewise):
        bounds = {s: set() for s in syms}
        for pw in expr.atoms(sympy.Piecewise):
            for _, c in pw.args:
                if c in (sympy.true, sympy.false):
                    continue
                b = _atoms_bounds(c, syms)
                if b is None:
                    return None
                for s in syms:
                    bounds[s] |= b[s]
        floor_k = max([k for ks in bounds.values() for k in ks] + [1])
    for extra in (0, 1, 3, 7):
        k = floor_k + extra
        if k ** max(len(syms), 1) > 4096:
            return None
        verdict = _decide_split(expr, syms, k)
        if verdict is not None:
            return verdict
    return None


def _decide_split(expr, syms, k: int) -> bool | None:
    """True: proved on every cell; False: a cell of single values is negative;
    None: some tail cell is undecided at this cut."""
    undecided = False
    choices = [[(s, v, False) for v in range(1, k)] + [(s, k, True)] for s in syms]
    for cell in itertools.product(*choices):
        fixed = {s: sympy.Integer(v) for s, v, tail in cell if not tail}
        tails = [s for s, v, tail in cell if tail]
        piece = _fold_piecewise(expr.xreplace(fixed), {s: k for s in tails})
        if piece is None:
            return None
        ok = _poly_nonneg(piece, tails, {s: k for s in tails})
        if ok is False and not tails:
            return False
        if ok is not True:
            undecided = True
    return None if undecided else True


def _fold_piecewise(expr, at: dict):
    def fold(pw):
        for val, cond in pw.args:
            c = cond.xreplace({s: sympy.Integer(v) for s, v in at.items()})
            c = sympy.simplify(c) if c not in (sympy.true, sympy.false) else c
            if c is sympy.true:
                return val
            if c is not sympy.false:
                return None
        return sympy.Integer(0)

    for pw in sorted(expr.atoms(sympy.Piecewise), key=sympy.count_ops):
        v = fold(pw)
        if v is None:
            return None
        expr = expr.xreplace({pw: v})
    return None if expr.has(sympy.Piecewise) else expr


def _evaluator_of(expr, syms):
    def ev(sizes):
        v = expr.xreplace({s: sympy.Integer(sizes[s.name]) for s in syms})
        return v

    return ev


def _grid(evaluate, names, grid, with_data: bool = False) -> Decision:
    if evaluate is None:
        return Decision(None, "grid", "nothing to evaluate")
    names = names or []
    points = list(itertools.product(grid, repeat=len(names)))
    cap = 64 if with_data else 2000  # with data, each point costs the program three times
    sampled = len(points) > cap
    if sampled:
        import random

        rng = random.Random(0)
        points = [tuple(g for _ in names) for g in grid]
        points += [tuple(rng.choice(grid) for _ in names) for _ in range(cap - len(points))]
    for pt in points:
        sizes = dict(zip(names, pt))
        try:
            v = evaluate(sizes)
        except (TensorLangError, ArithmeticError, TypeError, ValueError) as exc:
            return Decision(None, "grid", f"cannot evaluate at {sizes}: {exc}")
        if v is None:
            return Decision(None, "grid", f"cannot evaluate at {sizes}")
        if v < 0:
            return Decision(False, "counterexample", f"fails at {_fmt_sizes(sizes)} (value {v})", sizes)
    where = "{" + ", ".join(str(g) for g in grid) + "}" + (f"^{len(names)}" if len(names) > 1 else "")
    if sampled:
        where = f"{len(points)} points sampled from {where}"
    data = " with relation data all-true, all-false and random" if with_data else ""
    return Decision(True, "grid", f"checked on the grid of sizes {where}{data} only (not proved for all sizes)")


def _fmt_sizes(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "(no sizes)"


def leading_monomial(expr) -> str:
    """The asymptotic class of a cost: its monomials of highest total degree
    (coefficients dropped), taking the piece that holds for large sizes."""
    if expr is None:
        return "n/a"
    expr = canonical_symbols(expr)
    if expr.has(sympy.Piecewise):
        big = {s: sympy.Integer(10**6) for s in expr.free_symbols}
        for pw in expr.atoms(sympy.Piecewise):
            for val, cond in pw.args:
                if cond.xreplace(big) in (True, sympy.true):
                    expr = expr.xreplace({pw: val})
                    break
    expr = sympy.expand(expr)
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    if not syms:
        return "1" if expr != 0 else "0"
    try:
        poly = sympy.Poly(expr, *syms)
    except sympy.PolynomialError:
        return str(expr)
    deg = poly.total_degree()
    monos = [m for m in poly.monoms() if sum(m) == deg]
    parts = []
    for m in monos:
        factors = [f"{s.name}^{k}" if k > 1 else s.name for s, k in zip(syms, m) if k]
        parts.append("·".join(factors) or "1")
    return " + ".join(sorted(parts))


