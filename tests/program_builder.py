"""The program builder behind tests/strategies.py: draws a random well-typed
program of the core language (paper Figure 3, RULES.md Section 3.1) construct
by construct, with an Iverson guard on every access whose range it cannot
prove, and magnitudes kept bounded.

Internal to the tests: use :func:`tests.strategies.programs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy
from hypothesis import assume, strategies as st

import tensorlang as tl
from tensorlang.ir import (
    REAL,
    Access,
    Add,
    Aff,
    Call,
    Cmp,
    Const,
    Exists,
    Expr,
    Gen,
    IndexVar,
    Iverson,
    Let,
    Mul,
    Pair,
    PairT,
    Pred,
    Proj,
    RealT,
    TRUE,
    Relation,
    Rel,
    SizeVar,
    Sum,
    TensorT,
    Type,
    Var,
    children,
    conj,
    disj,
    free_indices,
    free_vars,
    fresh_uid,
    rebuild,
    scalar_elem,
    size_vars,
    sym_aff,
)
from tensorlang.typecheck import iverson
from tensorlang.typecheck import type_of

# A user-registered binary black-box function, so random programs exercise
# the registry path as well as the built-ins: mix(a, b) = a·b + sin(a).
MIX = tl.register_function(
    "strat_mix",
    2,
    numpy=lambda a, b: a * b + np.sin(a),
    sympy=lambda a, b: a * b + sympy.sin(a),
    partials=lambda a, b: (b + tl.cos(a), a),
    replace=True,
)

_MAX_SIZE = 4


# --------------------------------------------------------------------------
# Affine range reasoning for guards: prove 0 <= a < E for all sizes >= 1.


def _extreme(a: Aff, ranges: dict, upper: bool) -> Aff:
    """The minimum (or maximum) of ``a`` over the index ranges, as an Aff of sizes."""
    mapping = {}
    for s, c in a.terms:
        if isinstance(s, IndexVar):
            top = ranges[s] - 1
            mapping[s] = (top if c > 0 else Aff((), 0)) if upper else (Aff((), 0) if c > 0 else top)
    return a.subst(mapping)


def _nonneg(a: Aff) -> bool:
    """Is the size-only affine ``a`` >= 0 whenever every size is >= 1?"""
    if any(c < 0 for _, c in a.terms):
        return False
    return a.const + sum(c for _, c in a.terms) >= 0


def _range_guard(a: Aff, extent: Aff, ranges: dict) -> Pred:
    """The part of ``0 <= a < extent`` not provable from the index ranges."""
    parts = []
    if not _nonneg(_extreme(a, ranges, upper=False)):
        parts.append(Cmp("<=", Aff((), 0), a))
    if not _nonneg(extent - 1 - _extreme(a, ranges, upper=True)):
        parts.append(Cmp("<", a, extent))
    return conj(*parts)


# --------------------------------------------------------------------------
# The generator


@dataclass(frozen=True)
class _Scope:
    idx: tuple = ()  # ((IndexVar, extent Aff), ...) usable in expressions
    pidx: tuple = ()  # extra indices usable in predicates only (exists)
    lets: tuple = ()  # ((Var, bound), ...)

    def ranges(self) -> dict:
        return {i: n for i, n in self.idx + self.pidx}

    def with_idx(self, i, n):
        return _Scope(self.idx + ((i, n),), self.pidx, self.lets)

    def with_pidx(self, i, n):
        return _Scope(self.idx, self.pidx + ((i, n),), self.lets)

    def with_let(self, v, b):
        return _Scope(self.idx, self.pidx, self.lets + ((v, b),))


class _Builder:
    def __init__(self, draw, opts):
        self.draw = draw
        self.o = opts
        self.n_size = SizeVar("n")
        self.m_size = SizeVar("m")
        n, m = sym_aff(self.n_size), sym_aff(self.m_size)
        # extents, simplest first (hypothesis shrinks towards the front)
        self.extents = [n, m, n + m - 1, n + 1, Aff((), 3), 2 * n]
        self.inputs: dict = {}  # name -> Var
        self.relations: dict = {}  # name -> Relation
        self.pool: list = []  # (expr, type, bound) for DAG sharing
        self.limit = 1e3 if opts["smooth"] else 1e6
        self.top = 10**9  # depth budget of the whole program (set by programs())
        self.max_size = _MAX_SIZE  # largest size value (set by programs())

    # -- drawing helpers ------------------------------------------------------
    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def coin(self, p_true_in_8=4) -> bool:
        return self.draw(st.integers(0, 7)) < p_true_in_8

    def extent(self) -> Aff:
        return self.pick(self.extents[:3] + self.extents[:2] + self.extents[3:])

    # -- types ---------------------------------------------------------------
    def rand_type(self, allow_pairs=True, allow_aos=True, level=2) -> Type:
        kinds = ["R", "T1", "T1", "T2"]
        if allow_pairs and self.o["pairs"] and level > 0:
            kinds += ["P"]
            if allow_aos:
                kinds += ["AOS"]
        k = self.pick(kinds)
        if k == "R":
            return REAL
        if k == "T1":
            return TensorT(self.extent(), REAL)
        if k == "T2":
            return TensorT(self.extent(), TensorT(self.extent(), REAL))
        if k == "P":
            return PairT(
                self.rand_type(allow_pairs=False, level=level - 1),
                self.rand_type(allow_pairs=False, level=level - 1),
            )
        return TensorT(self.extent(), PairT(REAL, REAL))

    # -- inputs ----------------------------------------------------------------
    def input_of(self, t: Type) -> Var:
        same = [v for v in self.inputs.values() if v.type is t]
        if same and self.coin(5):
            return self.pick(same)
        prefix = {RealT: "s", TensorT: "x", PairT: "p"}[type(t)]
        name = f"{prefix}{len(self.inputs)}"
        v = tl.var(name, t)
        self.inputs[name] = v
        return v

    def relation(self, extents: tuple) -> Relation:
        same = [r for r in self.relations.values()
                if len(r.extents) == len(extents) and all(a is b for a, b in zip(r.extents, extents))]
        if same and self.coin(5):
            return self.pick(same)
        name = f"R{len(self.relations)}"
        r = tl.relation(name, *extents)
        self.relations[name] = r
        return r

    # -- bounds ----------------------------------------------------------------
    def ext_max(self, a: Aff) -> int:
        return max(1, a.evaluate({s: self.max_size for s in a.size_vars()}))

    def remember(self, e: Expr, b: float):
        self.pool.append((e, type_of(e), b))
        return e, b

    def reusable(self, t: Type, sc: _Scope):
        idx = {i for i, _ in sc.idx}
        lets = {v for v, _ in sc.lets}
        out = []
        for e, te, b in self.pool:
            if te is t and free_indices(e) <= idx and all(v.uid == 0 or v in lets for v in free_vars(e)):
                out.append((e, b))
        return out

    def tame(self, e: Expr, b: float):
        """Keep magnitudes below the limit (squash with tanh, or drop)."""
        if b <= self.limit:
            return e, b
        if self.o["functions"]:
            return Call("tanh", (e,)), 1.0
        return Const(1), 1.0

    # -- indices -----------------------------------------------------------------
    def index_into(self, extent: Aff, sc: _Scope, pred_ok: bool = False):
        """An affine index for an axis of length ``extent`` and the guard it needs."""
        pool = sc.idx + (sc.pidx if pred_ok else ())
        matching = [i for i, n in pool if n is extent]
        kinds = ["const", "last"]
        if pool:
            kinds = ["var", "offset", "offset", "reverse", "stride", "const", "last"]
            if len(pool) >= 2:
                kinds += ["conv", "conv", "plus"]
        if matching:
            kinds = ["match", "match", "match"] + kinds
        k = self.pick(kinds)
        if k == "match":
            a = sym_aff(self.pick(matching))
        elif k == "const":
            a = Aff((), self.draw(st.integers(0, 3)))
        elif k == "last":
            a = extent - 1
        else:
            i, ni = self.pick(list(pool))
            if k == "var":
                a = sym_aff(i)
            elif k == "offset":
                a = sym_aff(i) + self.pick([-1, 1, -2, 2])
            elif k == "reverse":
                a = extent - 1 - sym_aff(i)
            elif k == "stride":
                a = 2 * sym_aff(i) + self.pick([0, 1])
            else:
                j, nj = self.pick([p for p in pool if p[0] is not i])
                if k == "conv":  # x[i - j + m - 1], in range for x : [n + m - 1]
                    a = sym_aff(i) - sym_aff(j) + (nj - 1)
                else:
                    a = sym_aff(i) + sym_aff(j)
        return a, _range_guard(a, extent, sc.ranges())

    # -- predicates -----------------------------------------------------------------
    def pred(self, sc: _Scope, d: int) -> Pred:
        kinds = ["cmp", "cmp", "cmp"]
        if self.o["relations"]:
            kinds += ["rel", "rel"]
        if d > 0:
            kinds += ["and", "or", "or"]
            if self.o["exists"]:
                kinds += ["exists", "exists", "exists"]
        k = self.pick(kinds)
        if k == "and":
            return conj(self.pred(sc, d - 1), self.pred(sc, d - 1))
        if k == "or":
            return disj(self.pred(sc, d - 1), self.pred(sc, d - 1))
        if k == "exists":
            kv = IndexVar("k", fresh_uid())
            n = self.extent()
            inner = sc.with_pidx(kv, n)
            body = self.pred_about(kv, inner, d - 1)
            return Exists(kv, n, body)
        if k == "rel":
            return self.rel_atom(sc)
        return self.cmp_atom(sc)

    def pred_about(self, kv: IndexVar, sc: _Scope, d: int) -> Pred:
        """A predicate that mentions ``kv`` (the body of an exists)."""
        atom = self.cmp_atom(sc, focus=kv) if not (self.o["relations"] and self.coin(3)) else self.rel_atom(sc, focus=kv)
        if d > 0 and self.coin(3):
            other = self.pred(sc, d - 1)
            return conj(atom, other) if self.coin() else disj(atom, other)
        return atom

    def cmp_atom(self, sc: _Scope, focus=None) -> Pred:
        pool = [i for i, _ in sc.idx + sc.pidx]
        rng = sc.ranges()
        n, m = sym_aff(self.n_size), sym_aff(self.m_size)
        if not pool:
            # no index in scope: a predicate on sizes only
            return self.pick([Cmp("<", Aff((), 2), n), Cmp("==", n, m), Cmp("<=", m, n), Cmp("==", n, Aff((), 1))])
        i = focus if focus is not None else self.pick(pool)
        others = [j for j in pool if j is not i]
        ia = sym_aff(i)
        kinds = ["eq_const", "lt_const", "last", "eq_size"]
        if others:
            kinds = ["eq", "lt", "le", "stride", "band", "anti", "eq_const", "lt_const", "last", "ne"]
        k = self.pick(kinds)
        c = self.draw(st.integers(0, 3))
        if k == "eq_const":
            return ia == c
        if k == "lt_const":
            return ia < c
        if k == "last":
            return ia == rng[i] - 1
        if k == "eq_size":
            return ia + 1 == self.pick([n, m])
        j = sym_aff(self.pick(others))
        if self.coin():
            ia, j = j, ia
        if k == "eq":
            return ia == j
        if k == "lt":
            return ia < j
        if k == "le":
            return ia <= j + self.pick([0, 1])
        if k == "stride":
            return 2 * ia + self.pick([0, 1]) == j
        if k == "band":
            return conj(ia <= j + 1, j <= ia + 1)
        if k == "anti":
            return ia + j == self.pick([n, m]) - 1
        return ia != j

    def rel_atom(self, sc: _Scope, focus=None) -> Pred:
        pool = list(sc.idx + sc.pidx)
        arity = self.pick([2, 1]) if pool else 1
        exts, args, guards = [], [], []
        for pos in range(arity):
            if pool and self.coin(6):
                cands = pool if focus is None or pos > 0 else [p for p in pool if p[0] is focus]
                i, n = self.pick(cands)
                ext = n if self.coin(6) else self.extent()
                a = sym_aff(i) if self.coin(6) else sym_aff(i) + self.pick([-1, 1])
                g = _range_guard(a, ext, sc.ranges())
            else:
                ext = self.extent()
                a, g = self.index_into(ext, sc, pred_ok=True)
            exts.append(ext)
            args.append(a)
            guards.append(g)
        r = self.relation(tuple(exts))
        if self.coin(2):
            # a relation outside its extents is false (membership), so the guard
            # is optional: every stage must read it that way
            return Rel(r, tuple(args))
        return conj(*guards, Rel(r, tuple(args)))

    # -- expressions --------------------------------------------------------------
    def expr(self, t: Type, sc: _Scope, d: int, ops: int = 2):
        """An expression of type ``t`` valid in scope ``sc``; returns (expr, bound)."""
        match t:
            case RealT():
                return self.scalar(sc, d, ops)
            case TensorT():
                return self.tensor(t, sc, d)
            case PairT():
                return self.pair(t, sc, d)
        raise AssertionError(t)

    def var_candidates(self, t: Type, sc: _Scope):
        return [(v, b) for v, b in sc.lets if v.type is t]

    def leaf_scalar(self, sc: _Scope):
        kinds = ["const", "access", "access", "access"]
        if any(isinstance(v.type, (TensorT, PairT)) or v.type is REAL for v, _ in sc.lets):
            kinds += ["letvar", "letvar", "letvar"]
        if self.o["pairs"]:
            kinds += ["pair_input"]
        kinds += ["scalar_input"]
        if self.reusable(REAL, sc):
            kinds += ["reuse"]
        k = self.pick(kinds)
        if k == "const":
            c = self.pick([2, 1, -1, 0.5, 3, -0.25])
            return Const(c), abs(c)
        if k == "scalar_input":
            return self.input_of(REAL), 1.0
        if k == "reuse":
            return self.pick(self.reusable(REAL, sc))
        if k == "letvar":
            v, b = self.pick([vb for vb in sc.lets])
            return self.use_var(v, b, sc)
        if k == "pair_input":
            t = PairT(self.rand_type(allow_pairs=False), self.rand_type(allow_pairs=False))
            return self.use_var(self.input_of(t), 1.0, sc)
        t = TensorT(self.extent(), REAL) if self.coin(5) else TensorT(self.extent(), TensorT(self.extent(), REAL))
        return self.use_var(self.input_of(t), 1.0, sc)

    def use_var(self, e: Expr, b: float, sc: _Scope):
        """Project and index ``e`` down to a scalar (guarding every access)."""
        guards = []
        t = type_of(e)
        while t is not REAL:
            if isinstance(t, PairT):
                k = self.pick([0, 1])
                e = Proj(k, e)
                t = t.fst if k == 0 else t.snd
            else:
                a, g = self.index_into(t.extent, sc)
                e = Access(e, a)
                guards.append(g)
                t = t.elem
        g = conj(*guards)
        return (Iverson(g, e) if g is not TRUE else e), b

    def scalar(self, sc: _Scope, d: int, ops: int):
        # at the top of a program, no bare leaf: the program should do something
        kinds = ["leaf", "leaf"] if d < self.top else []
        if ops > 0:
            kinds += ["add", "mul", "sub", "square"]
            if self.o["functions"]:
                kinds += ["call", "call"]
        if d > 0:
            kinds += ["sum", "sum", "sum", "iverson", "iverson", "iverson", "index_gen"]
            if self.o["lets"]:
                kinds += ["let", "share"]
            if self.o["pairs"]:
                kinds += ["proj"]
        k = self.pick(kinds)
        if k == "leaf":
            return self.leaf_scalar(sc)
        if k in ("add", "sub", "mul"):
            a, ba = self.scalar(sc, d, ops - 1)
            b, bb = self.scalar(sc, d, ops - 1)
            if k == "add":
                return self.remember(*self.tame(Add(a, b), ba + bb))
            if k == "sub":
                return self.remember(*self.tame(a - b, ba + bb))
            # lift a guard over a product: [p]·(x[a]·e), as users write boundaries
            if isinstance(a, Iverson) and self.coin(3):
                return self.remember(*self.tame(Iverson(a.pred, Mul(a.body, b)), ba * bb))
            return self.remember(*self.tame(Mul(a, b), ba * bb))
        if k == "square":
            a, ba = self.scalar(sc, d, ops - 1)
            return self.remember(*self.tame(Mul(a, a), ba * ba))
        if k == "call":
            return self.remember(*self.call(sc, d, ops - 1))
        if k == "sum":
            i = IndexVar(self.pick(["j", "k", "i", "l"]), fresh_uid())
            n = self.extent()
            body, bb = self.scalar(sc.with_idx(i, n), d - 1, 2)
            return self.remember(*self.tame(Sum(i, n, body), bb * self.ext_max(n)))
        if k == "iverson":
            p = self.pred(sc, self.pick([0, 1, 2, 2]))
            body, bb = self.scalar(sc, d - 1, 2)
            return self.remember(iverson(p, body), bb)
        if k == "index_gen":
            # (gen[j:n] e)[a]: an intermediate tensor indexed in place
            t = TensorT(self.extent(), REAL)
            arr, ba = self.tensor(t, sc, d - 1)
            return self.use_var(arr, ba, sc)
        if k == "proj":
            other = self.rand_type(allow_pairs=False)
            k01 = self.pick([0, 1])
            pt = PairT(REAL, other) if k01 == 0 else PairT(other, REAL)
            pe, bp = self.pair(pt, sc, d - 1)
            return Proj(k01, pe), bp
        if k == "let":
            return self.let(REAL, sc, d)
        return self.shared_let(sc, d)

    def call(self, sc: _Scope, d: int, ops: int):
        smooth = self.o["smooth"]
        kinds = ["sin", "cos", "tanh", "sigmoid", "exp", "sqrt1", "log1", "div1", "mix", "pow3"]
        if not smooth:
            kinds += ["abs", "powm1"]
        k = self.pick(kinds)
        a, ba = self.scalar(sc, d, ops)
        if k in ("sin", "cos", "tanh", "sigmoid"):
            return Call(k, (a,)), 1.0
        if k == "exp":
            if ba > (3 if smooth else 20):
                a, ba = Call("tanh", (a,)), 1.0
            return Call("exp", (a,)), float(np.exp(ba))
        one_plus_sq = Add(Const(1), Mul(a, a))  # > 0: sqrt, log and division are smooth on it
        if k == "sqrt1":
            return Call("sqrt", (one_plus_sq,)), 1.0 + ba
        if k == "log1":
            return Call("log", (one_plus_sq,)), 1.0 + 2 * np.log1p(ba)
        if k == "div1":
            b, bb = self.scalar(sc, d, ops)
            return self.tame(Call("div", (b, Add(Const(1), Mul(a, a)))), bb)
        if k == "mix":
            b, bb = self.scalar(sc, d, ops)
            return self.tame(MIX(a, b), ba * bb + 1)
        if k == "pow3":
            return self.tame(tl.power(a, 3), ba**3)
        if k == "abs":  # |a|, not smooth at 0
            return Call("sqrt", (Mul(a, a),)), ba
        return tl.power(one_plus_sq, -1), 1.0  # (1 + a²)^-1

    def let(self, t: Type, sc: _Scope, d: int):
        vt = self.rand_type()
        val, bv = self.expr(vt, sc, d - 1)
        v = Var(self.pick(["t", "y", "u"]), fresh_uid(), vt)
        body, bb = self.expr(t, sc.with_let(v, bv), d - 1)
        if t is REAL and v not in free_vars(body) and self.coin(6):
            use, bu = self.use_var(v, bv, sc)
            body, bb = self.tame(Add(body, use), bb + bu)
        return Let(v, val, body), bb

    def shared_let(self, sc: _Scope, d: int):
        """``let y = gen[..] .. in f(y[a0], y[a1])``: a tensor built once, indexed twice."""
        t = TensorT(self.extent(), REAL) if self.coin(5) else TensorT(self.extent(), TensorT(self.extent(), REAL))
        val, bv = self.tensor(t, sc, d - 1, prefer_gen=True)
        v = Var("y", fresh_uid(), t)
        inner = sc.with_let(v, bv)
        u0, b0 = self.use_var(v, bv, inner)
        u1, b1 = self.use_var(v, bv, inner)
        if self.coin(3) and d > 1:
            i = IndexVar("i", fresh_uid())
            n = self.extent()
            s2 = inner.with_idx(i, n)
            u2, b2 = self.use_var(v, bv, s2)
            u3, b3 = self.use_var(v, bv, s2)
            body, bb = self.tame(Sum(i, n, Mul(u2, u3)), b2 * b3 * self.ext_max(n))
            body, bb = self.tame(Add(Mul(u0, u1), body), b0 * b1 + bb)
        else:
            body, bb = self.tame(Add(u0, u1) if self.coin() else Mul(u0, u1), b0 + b1 + b0 * b1)
        return Let(v, val, body), bb

    def tensor(self, t: TensorT, sc: _Scope, d: int, prefer_gen: bool = False):
        aos = isinstance(scalar_elem(t), PairT)
        kinds = ["gen", "gen", "gen"] if prefer_gen else ["gen", "gen"]
        if not aos:
            kinds += ["input"]
        if self.var_candidates(t, sc):
            kinds += ["letvar", "letvar"]
        if self.reusable(t, sc):
            kinds += ["reuse", "reuse"]
        if d > 0 and not prefer_gen:
            kinds += ["iverson"]
            if self.o["lets"]:
                kinds += ["let"]
            if self.o["pairs"]:
                kinds += ["proj"]
            kinds += ["slice"]
        if d >= self.top:  # the whole program: not a bare input
            kinds = [k for k in kinds if k not in ("input", "letvar", "reuse")]
        k = self.pick(kinds)
        if k == "input":
            return self.input_of(t), 1.0
        if k == "letvar":
            return self.pick(self.var_candidates(t, sc))
        if k == "reuse":
            return self.pick(self.reusable(t, sc))
        if k == "iverson":
            p = self.pred(sc, self.pick([0, 1, 2]))
            body, bb = self.tensor(t, sc, d - 1)
            return iverson(p, body), bb
        if k == "let":
            return self.let(t, sc, d)
        if k == "proj":
            other = self.rand_type(allow_pairs=False)
            k01 = self.pick([0, 1])
            pe, bp = self.pair(PairT(t, other) if k01 == 0 else PairT(other, t), sc, d - 1)
            return Proj(k01, pe), bp
        if k == "slice":
            # a row of a matrix: A[a] : [m]T for A : [n][m]T
            outer = TensorT(self.extent(), t)
            arr, ba = self.tensor(outer, sc, d - 1)
            a, g = self.index_into(outer.extent, sc)
            return iverson(g, Access(arr, a)), ba
        i = IndexVar(self.pick(["i", "j", "k"]), fresh_uid())
        body, bb = self.expr(t.elem, sc.with_idx(i, t.extent), max(d - 1, 0))
        return self.remember(Gen(i, t.extent, body), bb)

    def pair(self, t: PairT, sc: _Scope, d: int):
        soa = not any(isinstance(scalar_elem(x), PairT) for x in (t.fst, t.snd)) and not any(
            isinstance(x, PairT) for x in (t.fst, t.snd))
        kinds = ["pair", "pair"]
        if soa:
            kinds += ["input"]
        if self.var_candidates(t, sc):
            kinds += ["letvar"]
        if self.reusable(t, sc):
            kinds += ["reuse"]
        if d > 0:
            kinds += ["iverson"]
            if self.o["lets"]:
                kinds += ["let"]
        if d >= self.top:
            kinds = [k for k in kinds if k not in ("input", "letvar", "reuse")]
        k = self.pick(kinds)
        if k == "input":
            return self.input_of(t), 1.0
        if k == "letvar":
            return self.pick(self.var_candidates(t, sc))
        if k == "reuse":
            return self.pick(self.reusable(t, sc))
        if k == "iverson":
            p = self.pred(sc, self.pick([0, 1, 2]))
            body, bb = self.pair(t, sc, d - 1)
            return iverson(p, body), bb
        if k == "let":
            return self.let(t, sc, d)
        a, ba = self.expr(t.fst, sc, max(d - 1, 0))
        b, bb = self.expr(t.snd, sc, max(d - 1, 0))
        return self.remember(Pair(a, b), max(ba, bb))

    # -- finishing: make every size inferable from the inputs -----------------------
    def anchor_sizes(self, e: Expr) -> Expr:
        known: set = set()
        cons = []
        for v in self.inputs.values():
            cons += list(_type_extents(v.type))
        for r in self.relations.values():
            cons += list(r.extents)
        progress = True
        while progress:
            progress = False
            for a in cons:
                unknown = [s for s in a.size_vars() if s not in known]
                if len(unknown) == 1:
                    known.add(unknown[0])
                    progress = True
        missing = sorted((s for s in size_vars(e) if s not in known), key=lambda s: s.name)
        if not missing:
            return e
        anchor = None
        for s in missing:
            u = self.input_of(TensorT(sym_aff(s), REAL))
            kv = IndexVar("k", fresh_uid())
            term = Sum(kv, sym_aff(s), Access(u, sym_aff(kv)))
            anchor = term if anchor is None else Add(anchor, term)
        target = _shallowest_scalar(e)
        assume(target is not None)
        return _replace(e, target, Add(target, anchor))


def _shallowest_scalar(e: Expr):
    """Breadth-first: the first sub-term of type ℝ (no arithmetic above it)."""
    queue, seen = [e], set()
    while queue:
        x = queue.pop(0)
        if x in seen:
            continue
        seen.add(x)
        if type_of(x) is REAL:
            return x
        for c in children(x):
            if isinstance(c, Expr) and not (isinstance(x, Let) and c is x.var):
                queue.append(c)
    return None


def _type_extents(t: Type):
    match t:
        case PairT(fst=a, snd=b):
            yield from _type_extents(a)
            yield from _type_extents(b)
        case TensorT(extent=n, elem=el):
            yield n
            yield from _type_extents(el)
        case _:
            return


def _replace(e: Expr, old: Expr, new: Expr) -> Expr:
    """Replace every occurrence of ``old`` (by identity) with the closed-over-``old`` term ``new``."""
    memo: dict = {}

    def go(x):
        if x is old:
            return new
        if not isinstance(x, Expr):
            return x
        if isinstance(x, Let):  # the binder itself is not an occurrence
            return rebuild(x, (x.var, go(x.value), go(x.body)))
        got = memo.get(x)
        if got is None:
            got = rebuild(x, tuple(
                go(c) if isinstance(c, Expr) else (tuple(go(y) for y in c) if isinstance(c, tuple) else c)
                for c in children(x)))
            memo[x] = got
        return got

    return go(e)


