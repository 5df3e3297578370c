"""Schematic sub-terms for the obligations: small random well-typed terms.

An obligation instantiates a rule's left-hand side (paper Figures 7-16) by
filling each schematic sub-term (``e0``, ``e1``, ``p``, ...) with a random
term built here.  Terms live in a fixed signature of inputs

    x : [n]R    y : [m]R    A : [n][m]R    s : R

and a *scope* of index variables (each with its extent) and let-bound scalar
variables, so a filled left-hand side is closed once its context binders are
added.  Every access is in range for all sizes >= 1 (indices are bound
variables of the matching extent, or constants guarded by a bracket).
Predicates mix the shapes the cost model distinguishes: empty, single-point
(``i = j``, ``i = 0``), triangular (``i < j``) and dense.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import sympy

import tensorlang as tl
from tensorlang.ir import (
    REAL,
    Access,
    Add,
    Call,
    Cmp,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    SizeVar,
    Sum,
    Var,
    And,
    Or,
    as_aff,
    fresh_index,
    fresh_var,
    sym_aff,
)

N = sym_aff(SizeVar("n"))
M = sym_aff(SizeVar("m"))
X = tl.tensor("x", N)
Y = tl.tensor("y", M)
A = tl.tensor("A", N, M)
S = tl.scalar("s")
INPUTS = (X, Y, A, S)
FUNCTIONS = ("sin", "exp", "cos")

# Small sizes for exact evaluation: distinct values catch index confusions,
# size 1 catches empty sums and single-point predicates.
EXACT_SIZES = ({"n": 2, "m": 3}, {"n": 3, "m": 1}, {"n": 1, "m": 2})


@dataclass
class Scope:
    idx: list = field(default_factory=list)  # [(IndexVar, extent Aff)]
    vals: list = field(default_factory=list)  # [Var] scalar let-bound variables

    def with_idx(self, i, n) -> "Scope":
        return Scope(self.idx + [(i, n)], self.vals)

    def with_val(self, v) -> "Scope":
        return Scope(self.idx, self.vals + [v])


class Terms:
    """Random terms from a seeded generator (reproducible obligations)."""

    def __init__(self, seed: int = 0, *, lets: bool = True):
        self.rng = random.Random(seed)
        self.lets = lets  # False: let-free terms (the let-lifted normal form's ``e``)

    def coin(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    def extent(self):
        return N if self.coin() else M

    # -- predicates ---------------------------------------------------------
    def pred(self, scope: Scope):
        """A predicate over the scope's indices (closed comparisons of sizes
        when the scope is empty)."""
        if not scope.idx:
            return self.rng.choice([Cmp("<=", as_aff(2), N), Cmp("<", as_aff(0), M), Cmp("==", N, M)])
        i, ni = self.rng.choice(scope.idx)
        ai = sym_aff(i)
        others = [(j, nj) for j, nj in scope.idx if j is not i]
        choices = [
            lambda: Cmp("==", ai, as_aff(0)),  # single point
            lambda: Cmp("<", ai, ni - 1),  # dense but for the last
            lambda: Cmp("<", ni, ai),  # empty
            lambda: Cmp("<=", as_aff(1), ai),
        ]
        if others:
            j, _ = self.rng.choice(others)
            aj = sym_aff(j)
            choices += [lambda: Cmp("==", ai, aj), lambda: Cmp("<", ai, aj), lambda: Cmp("<=", aj + 1, ai)]
        p = self.rng.choice(choices)()
        if self.coin(0.2):
            q = self.rng.choice(choices)()
            p = And(p, q) if self.coin() else Or(p, q)
        return p

    # -- scalar terms -------------------------------------------------------
    def leaf(self, scope: Scope) -> Expr:
        ns = [i for i, n in scope.idx if n is N]
        ms = [i for i, n in scope.idx if n is M]
        opts = []  # (weight, thunk)
        if ns:
            opts.append((4, lambda: Access(X, sym_aff(self.rng.choice(ns)))))
        if ms:
            opts.append((4, lambda: Access(Y, sym_aff(self.rng.choice(ms)))))
        if ns and ms:
            opts.append((4, lambda: Access(Access(A, sym_aff(self.rng.choice(ns))), sym_aff(self.rng.choice(ms)))))
        if scope.vals:
            opts.append((5, lambda: self.rng.choice(scope.vals)))
        opts.append((2, lambda: S))
        opts.append((1, lambda: Const(self.rng.choice([2, 3, -1, 5]))))
        # an access at a constant index, guarded by its range condition
        opts.append((1, lambda: Iverson(Cmp("<=", as_aff(2), N), Access(X, as_aff(1)))))
        if not ns and not ms:  # no index in scope: reach into x, y through a sum
            opts.append((3, lambda: self._sum_leaf(scope)))
        total = sum(w for w, _ in opts)
        r = self.rng.uniform(0, total)
        for w, f in opts:
            r -= w
            if r <= 0:
                return f()
        return opts[-1][1]()

    def _sum_leaf(self, scope: Scope) -> Expr:
        n = self.extent()
        k = fresh_index("k")
        arr = X if n is N else Y
        return Sum(k, n, Mul(Access(arr, sym_aff(k)), Access(arr, sym_aff(k))))

    def scalar(self, scope: Scope, depth: int = 2) -> Expr:
        """A random scalar term over ``scope``."""
        if depth <= 0 or self.coin(0.25):
            return self.leaf(scope)
        k = self.rng.randrange(7)
        d = depth - 1
        if k == 0:
            return Add(self.scalar(scope, d), self.scalar(scope, d))
        if k == 1:
            return Mul(self.scalar(scope, d), self.scalar(scope, d))
        if k == 2:
            return Call(self.rng.choice(FUNCTIONS), (self.scalar(scope, d),))
        if k == 3:
            n = self.extent()
            i = fresh_index("k")
            inner = scope.with_idx(i, n)
            body = self.scalar(inner, d)
            if self.coin(0.5):
                body = Iverson(self.pred(inner), body)
            return Sum(i, n, body)
        if k == 4:
            return Iverson(self.pred(scope), self.scalar(scope, d))
        if k == 5 and self.lets:
            v = fresh_var("v", REAL)
            return Let(v, self.scalar(scope, d), self.scalar(scope.with_val(v), d))
        return Add(Iverson(self.pred(scope), self.scalar(scope, d)), Iverson(self.pred(scope), self.scalar(scope, d)))

    def uses(self, scope: Scope, v: Var, depth: int = 2) -> Expr:
        """A scalar term that mentions ``v`` (a let body that is not dead)."""
        e = self.scalar(scope.with_val(v), depth)
        return Mul(e, v) if self.coin() else Add(v, e)

    def vector(self, scope: Scope, depth: int = 2):
        """A tensor term ``gen[i:n] e`` and its extent."""
        n = self.extent()
        i = fresh_index("g")
        return Gen(i, n, self.scalar(scope.with_idx(i, n), depth)), n

    def context(self, k: int | None = None) -> Scope:
        """A scope of ``k`` generator indices (the binders a rule instance sits under)."""
        k = self.rng.randrange(3) if k is None else k
        sc = Scope()
        for name in "ij"[:k]:
            sc = sc.with_idx(fresh_index(name), self.extent())
        return sc


def close(scope: Scope, e: Expr) -> Expr:
    """Wrap ``e`` in the generators of ``scope`` (outermost first)."""
    for i, n in reversed(scope.idx):
        e = Gen(i, n, e)
    return e


# -- exact inputs -------------------------------------------------------------


def symbolic_inputs(program: Expr, sizes: dict, extra: dict | None = None) -> dict:
    """Sympy symbol arrays for every input of ``program`` at ``sizes``."""
    from tensorlang.ir import input_vars

    out = {}
    for v in input_vars(program):
        out[v.name] = symbol_value(v.name, v.type, sizes)
    out.update(extra or {})
    used = {s.name for s in tl.ir.size_vars(program)}
    for k, val in sizes.items():
        if k in used:
            out[k] = val
    return out


def symbol_value(name: str, t, sizes: dict):
    from tensorlang.ir import PairT, RealT, shape_of

    if isinstance(t, RealT):
        return sympy.Symbol(name, real=True)
    if isinstance(t, PairT):
        return (symbol_value(name + "_0", t.fst, sizes), symbol_value(name + "_1", t.snd, sizes))
    shape = tuple(a.evaluate(sizes) for a in shape_of(t))
    arr = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        arr[idx] = sympy.Symbol(f"{name}_" + "_".join(map(str, idx)), real=True)
    return arr

