"""Tensor SSA conversion: paper Section 5.4, Figures 11-12 (RULES.md Section 4.5),
rules 5.25-5.34 and the four fix-ups; the target grammar (Figure 10) is
:mod:`tensorlang.passes.ssa_form`.

``⟦e⟧SSA`` processes right-hand sides of the form ``gen[~i] [p]·e`` (``~i``
empty and ``p = true`` when absent), so the computation mask ``p`` reaches
every primitive.  Readings, following the Notes of RULES.md:

* 5.29 drops the mask, but only where the consumer re-applies exactly that
  mask (5.31-5.34 pass it down).  At a statement, an output, or under a
  bracket of the term's own, a masked constant is bound unmasked and then
  masked by 5.30 on that intermediate.  A literally false mask makes the
  primitive the constant 0.
* 5.30 covers accesses to inputs and to intermediates; without an access it
  is a broadcast ``gen[~g] [p]·X``; a partial access (a tensor-valued
  ``x[a]`` or ``[p]·x``) is eta-expanded with fresh generators.  An access
  that is the identity on an intermediate ``X`` (all of its dimensions, in
  order) is ``X`` itself where the consumer re-masks (fix-up 1).
* 5.32 and 5.34 produce contractions whose factors are accessed by fresh
  summation variables (``~i0``, ``~i1``) tied to the output indices ``~g``
  (the generator list) and the extra sums ``~s`` by equalities in ``p``.
  When a factor is itself an access of a variable it is used directly
  (5.30 fused into the contraction, so the convolution and matrix products
  become the single contractions of Figure 10 instead of a chain of copies);
  any other factor is bound first, generated over the full index list.

Fix-ups: (1) ``let X0 = X1`` is never emitted (rebindings are looked up in an
environment); (2) statements are emitted into one flat block in dependency
order; (3) outputs are always named; (4) every right-hand side is brought
into canonical form — canonical index names (``ir.canonicalize``), addends
and factors ordered by their variables' positions in the block, contraction
sums ordered ``~s ~i0 ~i1`` — and interned, so equal right-hand sides are
one statement (CSE).  Finally statements the result does not use are
dropped.

Each rule below takes the left-hand side ``gen[~i] [p]·e`` as an expression
(plus the conversion state) and returns the right-hand side as ``let <new
statements> in <primitive or variable>``, which is what the rule trace
records.  Where the consumer re-applies the mask ``p`` (``remask is p``), the
right side equals the left side only where ``p`` holds.
"""

from __future__ import annotations

from dataclasses import replace

from tensorlang.errors import UnsupportedError, describe
from tensorlang.ir import (
    FALSE,
    conjuncts,
    TRUE,
    Access,
    Add,
    Call,
    Cmp,
    Const,
    Expr,
    Gen,
    IndexVar,
    Iverson,
    Let,
    Mul,
    Pair,
    Pred,
    Proj,
    Sum,
    Var,
    access,
    canonicalize,
    conj,
    free_vars,
    fresh_index,
    fresh_var,
    make_gens,
    make_lets,
    make_sums,
    shape_of,
    sym_aff,
)
from tensorlang.typecheck import type_of

from . import rules as rules_mod
from .rewrite import ResultCache
from .rules import rule
from .ssa_form import AddRHS, ConstRHS, ContractRHS, MapRHS, classify, to_expr

# --------------------------------------------------------------------------
# Small helpers on the ``gen[~i] [p]·e`` form


def _br(p: Pred, e: Expr) -> Expr:
    """``[p]·e``, with no bracket for ``true`` (a false bracket is kept)."""
    return e if p is TRUE else Iverson(p, e)


def split(term: Expr):
    """``gen[~i] [p]·e -> (~i, p, e)``; one bracket at most (5.28 merges more)."""
    G = []
    while isinstance(term, Gen):
        G.append((term.var, term.extent))
        term = term.body
    if isinstance(term, Iverson):
        return G, term.pred, term.body
    return G, TRUE, term


def _peel(e: Expr, p: Pred):
    """Move the brackets at the top of ``e`` into the mask ``p``."""
    while isinstance(e, Iverson):
        p = conj(p, e.pred)
        e = e.body
    return e, p


def _gvars(G) -> list:
    return [sym_aff(i) for i, _ in G]


def _atom(e: Expr):
    """``x[a0]…[ak]`` with ``x`` a variable or a projected input -> (base, (a0, …)), else None."""
    idxs = []
    while isinstance(e, Access):
        idxs.append(e.index)
        e = e.arr
    base = e
    while isinstance(e, Proj):
        e = e.arg
    if not isinstance(e, Var):
        return None
    if base is not e and e.uid != 0:
        raise UnsupportedError(f"tensor SSA: projection of a non-input {describe(base)} (run pair_elim first)")
    return base, tuple(reversed(idxs))


def _plain(a):
    """The index variable ``i`` if the affine index is exactly ``i``."""
    if a.const == 0 and len(a.terms) == 1 and a.terms[0][1] == 1 and isinstance(a.terms[0][0], IndexVar):
        return a.terms[0][0]
    return None


def _stated(cx, mark: int, out: Expr) -> Expr:
    """A rule's right-hand side: the statements it emitted, as lets, around
    ``out``.  The driver keeps the statements in the block and uses only
    ``out``, so the lets are built only when a rule trace records the
    equation: building them always was quadratic in a long chain (each
    level re-wrapped every statement below it)."""
    if rules_mod._TRACE is None:
        return out
    return make_lets(cx.since(mark), out)


# --------------------------------------------------------------------------
# The conversion state: the statement block being emitted


class _Block:
    def __init__(self):
        self.binds: list = []  # [(X, rhs)] in dependency order (fix-up 2)
        self.table: dict = {}  # canonical rhs -> X (fix-up 4: CSE by interning)
        self.pos: dict = {}  # X -> position in the block (the order on names)
        self.env: dict = {}  # source let variable -> X (5.25, fix-up 1)

    def mark(self) -> int:
        return len(self.binds)

    def since(self, mark: int) -> list:
        return self.binds[mark:]

    # -- fix-ups 1, 3, 4 ---------------------------------------------------
    def emit(self, rhs: Expr, name: str, var: Var | None = None) -> Var:
        """Name a primitive right-hand side; an existing variable is returned
        as is (no ``let X0 = X1``), an equal right-hand side is shared."""
        if isinstance(rhs, Var) and rhs.uid != 0:
            return rhs
        view = classify(rhs)
        if view is None:  # a bug in a rule, not in the user's program
            raise AssertionError(f"tensor SSA produced a non-Figure-10 right-hand side: {describe(rhs)}")
        view = _without_false(view)
        rhs = self._canonical(view)
        got = self.table.get(rhs)
        if got is not None:
            return got
        t = type_of(rhs)
        if var is not None and var.type is t and var not in self.pos:
            x = var  # keep the program's own name for its statement
        else:
            x = fresh_var(name, t)
        self.pos[x] = len(self.binds)
        self.binds.append((x, rhs))
        self.table[rhs] = x
        return x

    def _canonical(self, view) -> Expr:
        """Fix-up 4: canonical index names and operand order."""
        match view:
            case AddRHS(gens=g, p0=p0, x0=x0, p1=p1, x1=x1):
                cands = [view, AddRHS(g, p1, x1, p0, x0)]
                keys = [(self.pos[v.x0], self.pos[v.x1]) for v in cands]
            case ContractRHS(gens=g, sums=s, p=p, factors=fs):
                orders = [fs] if len(fs) == 1 else [fs, (fs[1], fs[0])]
                cands, keys = [], []
                for o in orders:
                    acc = [i for _, idx in o for i in idx]
                    rest = [b for b in s if b[0] not in acc]
                    by_var = {b[0]: b for b in s}
                    seen, ordered = set(), []
                    for i in acc:
                        if i in by_var and i not in seen:
                            seen.add(i)
                            ordered.append(by_var[i])
                    cands.append(ContractRHS(g, tuple(rest + ordered), p, o))
                    keys.append(tuple(self.pos[x] for x, _ in o))
            case _:
                return _sorted_conjuncts(canonicalize(to_expr(view)))
        best = min(keys)
        # only the candidates of the least key are canonicalized (each costs a
        # walk of the right-hand side); the printed form breaks ties only
        # (printing every candidate cost a tenth of building a long chain's
        # derivative)
        tied = [_sorted_conjuncts(canonicalize(to_expr(v))) for k, v in zip(keys, cands) if k == best]
        return tied[0] if len(tied) == 1 else min(tied, key=repr)

    # -- variables -----------------------------------------------------------
    def var_of(self, base: Expr) -> Var:
        """An input line (bound once) or the statement of a let variable."""
        if isinstance(base, Var) and base.uid != 0:
            if base in self.pos:  # already a statement of the block
                return base
            got = self.env.get(base)
            if got is None:
                raise UnsupportedError(f"tensor SSA: unbound variable {describe(base)}")
            return got
        root = base
        while isinstance(root, Proj):
            root = root.arg
        return self.emit(base, root.name)

    # -- the driver ------------------------------------------------------------
    def convert(self, term: Expr, remask: Pred | None, name: str = "t", var: Var | None = None) -> Var:
        """Signature: ⟦gen[~i] [p]·e⟧SSA -> X, emitting X's statement (and those
        it needs) into the block.  ``remask`` is the mask the consumer
        re-applies to X (None at a statement or output): where the mask of
        the term is exactly that one, X need only be right where it holds."""
        while True:
            out = gen_gen(term)
            if out is None:
                out = bracket_bracket(term)
            if out is None:
                break
            term = out
        for r in _CONVERSIONS:
            out = r(term, self, remask)
            if out is not None:
                break
        else:
            raise UnsupportedError(
                f"tensor SSA needs gen-pushed-out input (run gen_pushout first); cannot convert {describe(term)}"
            )
        while isinstance(out, Let):
            out = out.body
        return self.emit(out, name, var)

    def operand(self, G, S, p: Pred, e: Expr):
        """A factor of a contraction: ``(X, indices)``.  A constant is a scalar
        statement (5.29); a variable access is used as is (5.30 fused); any
        other term is bound over the full index list ``~i ~s`` under ``p``."""
        if isinstance(e, Const):
            return self.convert(e, TRUE, "c"), ()
        at = _atom(e)
        if at is not None:
            base, idxs = at
            x = self.var_of(base)
            if len(shape_of(x.type)) == len(idxs):
                return x, idxs
        x = self.convert(make_gens(list(G) + list(S), _br(p, e)), p)
        return x, tuple(_gvars(list(G) + list(S)))


def _without_false(view):
    """A mask that is literally false makes a primitive zero (or an addition
    a masked copy of its other operand): Figure 10 has no false brackets."""
    match view:
        case MapRHS(gens=g, p=p) | ContractRHS(gens=g, p=p) if p is FALSE:
            return ConstRHS(g, 0)
        case AddRHS(gens=g, p0=p0, x0=x0, p1=p1, x1=x1) if p0 is FALSE or p1 is FALSE:
            if p0 is FALSE and p1 is FALSE:
                return ConstRHS(g, 0)
            p, x = (p1, x1) if p0 is FALSE else (p0, x0)
            return classify(_contraction(list(g), (), p, [(x, tuple(_gvars(g)))]))
    return view


def _sort_pred(p: Pred) -> Pred:
    """A conjunction with its conjuncts in a canonical order (by their printed
    form under canonical index names), so ``a ∧ b`` and ``b ∧ a`` intern alike."""
    cs = conjuncts(p)
    if len(cs) == 1:
        return p
    return conj(*sorted(cs, key=repr))


def _sorted_conjuncts(rhs: Expr) -> Expr:
    """Fix-up 4 on the predicates of a canonically named right-hand side."""
    view = classify(rhs)
    # (dataclasses.replace only when a predicate is reordered: it inspects
    # the fields per call, once per statement of a long chain)
    match view:
        case AddRHS():
            p0, p1 = _sort_pred(view.p0), _sort_pred(view.p1)
            if p0 is not view.p0 or p1 is not view.p1:
                view = replace(view, p0=p0, p1=p1)
        case MapRHS() | ContractRHS():
            p = _sort_pred(view.p)
            if p is not view.p:
                view = replace(view, p=p)
        case _:
            return rhs
    return to_expr(view)


def _contraction(G, S, p: Pred, ops) -> Expr:
    """``gen[~g] sum[~s ~i0 ~i1] [p ∧ ~i0 = ~a0 ∧ ~i1 = ~a1]·X0[~i0]·X1[~i1]``:
    every access position gets a summation variable of its own; a summation
    variable used plainly at exactly one position serves as that position's."""
    counts: dict = {}
    for _, idxs in ops:
        for a in idxs:
            v = _plain(a)
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
    s_ext = dict(S)
    rest = list(S)
    accs, eqs, factors = [], [], []
    for x, idxs in ops:
        shape = shape_of(x.type)
        if len(shape) != len(idxs):
            raise UnsupportedError(f"tensor SSA: {describe(x)} is accessed with {len(idxs)} of {len(shape)} indices")
        tl = []
        for a, n in zip(idxs, shape):
            v = _plain(a)
            if v is not None and v in s_ext and counts[v] == 1:
                rest.remove((v, s_ext[v]))
                accs.append((v, s_ext[v]))
                tl.append(v)
            else:
                t = fresh_index("t")
                accs.append((t, n))
                eqs.append(Cmp("==", sym_aff(t), a))
                tl.append(t)
        factors.append(access(x, [sym_aff(t) for t in tl]))
    body = factors[0] if len(factors) == 1 else Mul(factors[0], factors[1])
    return make_gens(G, make_sums(rest + accs, _br(conj(p, *eqs), body)))


# --------------------------------------------------------------------------
# Figure 11


@rule("5.25", figure=11)
def ssa_let(e: Expr, cx: _Block):
    """⟦let x = e0 in e1⟧SSA ==> let X = ⟦e0⟧SSA in ⟦[x ↦ X] e1⟧SSA      (X fresh)
    (the substitution is an environment x ↦ X; the trace shows
    ``let <statements of X> in let x = X in e1``)"""
    if not isinstance(e, Let):
        return None
    mark = cx.mark()
    x = e.var
    X = cx.convert(e.value, None, x.name, var=x)
    cx.env[x] = X
    rest = e.body if X is x else Let(x, X, e.body)
    return _stated(cx, mark, rest)


@rule("5.26", figure=11)
def ssa_var(e: Expr, cx: _Block, remask: Pred | None = None):
    """⟦X⟧SSA ==> X"""
    if isinstance(e, Var) and e.uid != 0:
        return cx.var_of(e)
    return None


@rule("5.27", figure=11)
def gen_gen(e: Expr):
    """⟦gen[~i] [p]·gen[j:n] e⟧SSA ==> ⟦gen[~i, j] [p]·e⟧SSA"""
    G, p, core = split(e)
    if isinstance(core, Gen):
        return make_gens(G + [(core.var, core.extent)], _br(p, core.body))
    return None


@rule("5.28", figure=11)
def bracket_bracket(e: Expr):
    """⟦gen[~i] [p0]·[p1]·e⟧SSA ==> ⟦gen[~i] [p0 ∧ p1]·e⟧SSA"""
    G, p, core = split(e)
    if isinstance(core, Iverson):
        return make_gens(G, _br(conj(p, core.pred), core.body))
    return None


@rule("5.29", figure=11)
def ssa_const(e: Expr, cx: _Block, remask: Pred | None):
    """⟦gen[~i] [p]·c⟧SSA ==> C        (C ≡ gen[~i] c; the mask is dropped)"""
    G, p, core = split(e)
    if not isinstance(core, Const):
        return None
    rhs = make_gens(G, core)
    if p is TRUE or p is remask:
        return rhs
    # nothing re-applies this mask (a statement, an output, or a bracket of
    # the term's own): bind the constant, then mask it by 5.30
    mark = cx.mark()
    c = cx.convert(rhs, TRUE, "c")
    masked = ssa_access(make_gens(G, Iverson(p, access(c, _gvars(G)))), cx, None)
    return _stated(cx, mark, masked)


@rule("5.30", figure=11)
def ssa_access(e: Expr, cx: _Block, remask: Pred | None):
    """⟦gen[~g] [p]·(π_{j0}⋯π_{jl} x)[a0, …, ak]⟧SSA
         ==> let X = π_{j0}⋯π_{jl} x in
             gen[~g] sum[i0, …, ik] [p ∧ i0 = a0 ∧ ⋯ ∧ ik = ak]·X[i0, …, ik]
    (also for an intermediate X; no access: the broadcast gen[~g] [p]·X)"""
    G, p, core = split(e)
    at = _atom(core)
    if at is None:
        return None
    base, idxs = at
    if isinstance(base, Var) and base.uid != 0 and not G and p is TRUE and not idxs:
        return None  # a bare intermediate: 5.26
    mark = cx.mark()
    if not G and p is TRUE and not idxs:
        return base  # a whole input: its input line is the statement
    x = cx.var_of(base)
    shape = shape_of(x.type)
    G, idxs = list(G), list(idxs)
    for n in shape[len(idxs):]:  # a partial access: eta-expand
        j = fresh_index("j")
        G.append((j, n))
        idxs.append(sym_aff(j))
    identity = len(idxs) == len(G) and all(
        _plain(a) is i and n is m for a, (i, n), m in zip(idxs, G, shape)
    )
    if identity and (p is TRUE or p is remask):
        out = x  # fix-up 1: X itself
    else:
        out = _contraction(G, (), p, [(x, tuple(idxs))])
    return _stated(cx, mark, out)


# --------------------------------------------------------------------------
# Figure 12


@rule("5.31", figure=12)
def ssa_add(e: Expr, cx: _Block, remask: Pred | None):
    """⟦gen[~i] [p]·([p0]·e0 + [p1]·e1)⟧SSA
         ==> let X0 = ⟦gen[~i] [p ∧ p0]·e0⟧SSA in
             let X1 = ⟦gen[~i] [p ∧ p1]·e1⟧SSA in
             ([p ∧ p0]·X0 + [p ∧ p1]·X1)"""
    G, p, core = split(e)
    if not isinstance(core, Add):
        return None
    mark = cx.mark()
    e0, q0 = _peel(core.lhs, p)
    e1, q1 = _peel(core.rhs, p)
    x0 = cx.convert(make_gens(G, _br(q0, e0)), q0)
    x1 = cx.convert(make_gens(G, _br(q1, e1)), q1)
    iv = _gvars(G)
    out = make_gens(G, Add(_br(q0, access(x0, iv)), _br(q1, access(x1, iv))))
    return _stated(cx, mark, out)


@rule("5.32", figure=12)
def ssa_mul(e: Expr, cx: _Block, remask: Pred | None):
    """⟦gen[~i] [p]·e0·e1⟧SSA
         ==> let X0 = ⟦gen[~i] [p]·e0⟧SSA in
             let X1 = ⟦gen[~i] [p]·e1⟧SSA in
             gen[~g] sum[~i0 ~i1] [p ∧ ~g = ~i0 = ~i1]·X0[~i0]·X1[~i1]
    (a factor that is a variable access is used directly; brackets on the
    factors join p)"""
    G, p, core = split(e)
    if not isinstance(core, Mul):
        return None
    mark = cx.mark()
    f0, p = _peel(core.lhs, p)
    f1, p = _peel(core.rhs, p)
    ops = [cx.operand(G, (), p, f0), cx.operand(G, (), p, f1)]
    return _stated(cx, mark, _contraction(G, (), p, ops))


@rule("5.33", figure=12)
def ssa_call(e: Expr, cx: _Block, remask: Pred | None):
    """⟦gen[~i] [p]·f(e0, …)⟧SSA
         ==> let X0 = ⟦gen[~i] [p]·e0⟧SSA in …       (one let per argument)
             [p]·f(X0, …)"""
    G, p, core = split(e)
    if not isinstance(core, Call):
        return None
    mark = cx.mark()
    xs = [cx.convert(make_gens(G, _br(p, a)), p) for a in core.args]
    iv = _gvars(G)
    out = make_gens(G, _br(p, Call(core.fn, tuple(access(x, iv) for x in xs))))
    return _stated(cx, mark, out)


@rule("5.34", figure=12)
def ssa_sum(e: Expr, cx: _Block, remask: Pred | None):
    """⟦gen[~i] [p]·sum[j:n] e⟧SSA
         ==> let X = ⟦gen[~i, j] [p]·e⟧SSA in
             gen[~g] sum[~i, j] [p ∧ ~g = ~i]·X[~i, j]
    (nested sums and their brackets are taken together; a body that is a
    product of variable accesses becomes one contraction)"""
    G, p, core = split(e)
    if not isinstance(core, Sum):
        return None
    mark = cx.mark()
    S = []
    body = core
    while isinstance(body, (Sum, Iverson)):
        if isinstance(body, Sum):
            S.append((body.var, body.extent))
            body = body.body
        else:
            p = conj(p, body.pred)
            body = body.body
    if isinstance(body, Mul):
        f0, p = _peel(body.lhs, p)
        f1, p = _peel(body.rhs, p)
        ops = [cx.operand(G, S, p, f0), cx.operand(G, S, p, f1)]
    else:
        ops = [cx.operand(G, S, p, body)]
    return _stated(cx, mark, _contraction(G, S, p, ops))


_CONVERSIONS = (ssa_var, ssa_const, ssa_access, ssa_add, ssa_mul, ssa_call, ssa_sum)


# --------------------------------------------------------------------------
# The pass


_RESULTS = ResultCache()  # one result per input program (fresh names are drawn once)


def tensor_ssa(e: Expr) -> Expr:
    """Signature: tensor_ssa : Le (gen-pushed-out) -> S (Figure 10), with
    ⟦tensor_ssa(e)⟧σ = ⟦e⟧σ and $⟦tensor_ssa(e)⟧σ ≤ $⟦e⟧σ.

    5.25 walks the statement block (the substitution ``[x ↦ X]`` is the
    environment of the block); each output component is converted and named.
    A tensor-SSA program is a fixed point: its statements convert to
    themselves under their own names.
    """
    got = _RESULTS.get(e)
    if got is not None:
        return got
    cx = _Block()
    node = e
    while isinstance(node, Let):
        ssa_let(node, cx)
        node = node.body
    res = _output(node, cx)
    out = make_lets(_live(cx.binds, res), res)
    _RESULTS.put(e, out)
    return out


def _output(e: Expr, cx: _Block) -> Expr:
    """Fix-up 3: every output component is a named variable."""
    if isinstance(e, Pair):
        return Pair(_output(e.fst, cx), _output(e.snd, cx))
    return cx.convert(e, None, "out")


def _live(binds: list, res: Expr) -> list:
    """The statements the result depends on (the others are dead code)."""
    live = set(free_vars(res))
    keep = []
    for x, rhs in reversed(binds):
        if x in live:
            keep.append((x, rhs))
            live |= free_vars(rhs)
    return keep[::-1]
