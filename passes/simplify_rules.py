"""The local rewrites of simplification (paper §2.1, §2.2, §6), registered by name.

Simplification (passes/simplify.py) is not a numbered figure of the paper,
but each of its local rewrites is a rule like the numbered ones: a
registered function ``rule(node, ctx) -> node | None`` whose docstring
states the equation, applied by the simplifier through :data:`TABLE` (keyed
by node kind) and covered by an obligation in ``proofs/simplify.py``
(value preserved exactly, cost not raised).  ``ctx`` is the enclosing
binders and brackets (``simplify_preds.Ctx``); the rules that do not read
it take it as an optional argument, so an obligation can apply them to a
closed left-hand side.

Each rule sees its node with the children already simplified.  Entries
marked ``again`` expose new redexes (a bracket lifted out of a product, an
inlined gather), so the simplifier simplifies their result once more.
"""

from __future__ import annotations

from tensorlang.ir import (
    FALSE,
    is_zero,
    TRUE,
    Access,
    Add,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Pair,
    Proj,
    Sum,
    Var,
    children,
    conj,
    free_indices,
    free_vars,
    lets,
    make_lets,
    make_sums,
    subst,
    sym_aff,
)
from tensorlang.sharing import explicit_sharing, has_work
from tensorlang.typecheck import type_of, zero_of

from .rewrite import Entry, RuleTable
from .rules import rule
from .simplify_preds import Ctx, decide, eliminate, simplify_pred

SECTION = "simplify"  # the registry's figure for these rules (they belong to no figure)


def zero_like(e: Expr) -> Expr:
    return zero_of(type_of(e))


# --------------------------------------------------------------------------
# Zeros and units


@rule("simplify.add_zero", figure=SECTION)
def add_zero(e: Expr, ctx: Ctx | None = None):
    """0 + e ==> e        e + 0 ==> e        (0: a literal zero of any shape)"""
    if isinstance(e, Add):
        if is_zero(e.lhs):
            return e.rhs
        if is_zero(e.rhs):
            return e.lhs
    return None


@rule("simplify.mul_zero", figure=SECTION)
def mul_zero(e: Expr, ctx: Ctx | None = None):
    """0 · e ==> 0        e · 0 ==> 0"""
    if isinstance(e, Mul) and (is_zero(e.lhs) or is_zero(e.rhs)):
        return Const(0)
    return None


@rule("simplify.mul_one", figure=SECTION)
def mul_one(e: Expr, ctx: Ctx | None = None):
    """1 · e ==> e        e · 1 ==> e"""
    if isinstance(e, Mul):
        if e.lhs is Const(1):
            return e.rhs
        if e.rhs is Const(1):
            return e.lhs
    return None


@rule("simplify.gen_zero", figure=SECTION)
def gen_zero(e: Expr, ctx: Ctx | None = None):
    """gen[i:n] 0 ==> 0        (the zero of the gen's type)"""
    if isinstance(e, Gen) and is_zero(e.body):
        return zero_like(e)
    return None


@rule("simplify.access_zero", figure=SECTION)
def access_zero(e: Expr, ctx: Ctx | None = None):
    """0[a] ==> 0        (the zero of the element type)"""
    if isinstance(e, Access) and is_zero(e.arr):
        return zero_like(e)
    return None


def _plain_zero(e: Expr) -> bool:
    """A zero built of 0, gens and pairs only (what a simplified zero is): it
    costs nothing, where ``sum[k:n] 0`` or ``[q]·0`` would still be paid."""
    match e:
        case Const(value=v):
            return v == 0
        case Gen(body=b):
            return _plain_zero(b)
        case Pair(fst=a, snd=b):
            return _plain_zero(a) and _plain_zero(b)
        case _:
            return False


@rule("simplify.bracket_zero", figure=SECTION)
def bracket_zero(e: Expr, ctx: Ctx | None = None):
    """[p]·0 ==> 0        (the body itself when it is a plain zero, as the
    simplifier's children are; else the zero of the type: returning
    ``sum[k:n] 0`` from under a false bracket would raise the cost)"""
    if isinstance(e, Iverson) and is_zero(e.body):
        return e.body if _plain_zero(e.body) else zero_like(e)
    return None


# --------------------------------------------------------------------------
# Brackets


@rule("simplify.bracket_out_of_product", figure=SECTION)
def bracket_out_of_product(e: Expr, ctx: Ctx | None = None):
    """([p]·a)·b ==> [p]·(a·b)        a·([p]·b) ==> [p]·(a·b)
    (never more costly: rule 4.25 vs 4.33; it gathers the filters a sum
    eliminates with)"""
    if isinstance(e, Mul):
        a, b = e.lhs, e.rhs
        if isinstance(a, Iverson):
            return Iverson(a.pred, Mul(a.body, b))
        if isinstance(b, Iverson):
            return Iverson(b.pred, Mul(a, b.body))
    return None


@rule("simplify.decide_bracket", figure=SECTION)
def decide_bracket(e: Expr, ctx: Ctx | None = None):
    """[p]·e ==> [p']·e        [p]·e ==> 0 when p' = false
    (p' is p without the conjuncts the enclosing ranges and brackets imply,
    decided with isl, and a disjunction replaced by its isl gist there when
    that is smaller; relations are data and stay)"""
    if not isinstance(e, Iverson):
        return None
    p = decide(ctx or Ctx(), e.pred)
    if p is e.pred:
        return None
    if p is FALSE:
        return zero_like(e)
    return Iverson(p, e.body)


@rule("simplify.merge_brackets", figure=SECTION)
def merge_brackets(e: Expr, ctx: Ctx | None = None):
    """[p0]·[p1]·e ==> [p0 ∧ p1]·e        (as rule 5.24)"""
    if isinstance(e, Iverson) and isinstance(e.body, Iverson):
        return Iverson(conj(e.pred, e.body.pred), e.body.body)
    return None


@rule("simplify.bracket_true", figure=SECTION)
def bracket_true(e: Expr, ctx: Ctx | None = None):
    """[true]·e ==> e"""
    if isinstance(e, Iverson) and e.pred is TRUE:
        return e.body
    return None


# --------------------------------------------------------------------------
# Tensors


@rule("simplify.gen_eta", figure=SECTION)
def gen_eta(e: Expr, ctx: Ctx | None = None):
    """gen[i:n] a[i] ==> a        (i not free in a, a of extent n)"""
    if isinstance(e, Gen):
        b, i = e.body, e.var
        if isinstance(b, Access) and b.index is sym_aff(i) and i not in free_indices(b.arr):
            if type_of(b.arr).extent is e.extent:
                return b.arr
    return None


def inline_pays(g: Gen, ctx: Ctx) -> bool:
    """May ``(gen[i:n] e)[a]`` become ``e[i := a]`` (rule 5.21) here without
    raising the cost?

    The cost model builds a tensor once at its home, just inside the
    innermost binder it depends on (``explicit_sharing``): ``n`` times
    ``e``.  Substituted, ``e`` is paid at every evaluation of the access, so
    once per iteration of the binders between that home and here.  That is
    no dearer when ``e`` does no work, when there is no such binder, or when
    there is one of extent ``n`` (``gen[i:n] (gen[k:n] e)[i]``).  Inside
    ``gen[i:n] sum[j:n]`` of a closed ``gen[k:n] 2 + 2`` it would pay ``n²``
    additions for ``n`` (found by the random-program property)."""
    if not has_work(g.body):
        return True
    fi = free_indices(g)
    between = []
    for i, n in reversed(ctx.binds):
        if i in fi:
            break
        between.append(n)
    return not between or (len(between) == 1 and between[0] is g.extent)


@rule("simplify.inline_gather", figure=SECTION)
def inline_gather(e: Expr, ctx: Ctx | None = None):
    """(gen[i:n] e)[a] ==> e[i := a]        (rule 5.21, where it does not
    raise the cost: see inline_pays)"""
    if isinstance(e, Access) and isinstance(e.arr, Gen) and inline_pays(e.arr, ctx or Ctx()):
        return subst(e.arr.body, idx={e.arr.var: e.index})
    return None


@rule("simplify.access_bracket", figure=SECTION)
def access_bracket(e: Expr, ctx: Ctx | None = None):
    """([p]·e)[a] ==> [p]·e[a]        (rule 5.22)"""
    if isinstance(e, Access) and isinstance(e.arr, Iverson):
        return Iverson(e.arr.pred, Access(e.arr.body, e.index))
    return None


def project(pair: Pair, k: int) -> Expr:
    """``π_k (e0, e1)`` (rule 5.11) without losing what ``e_k`` shared with
    the dropped component.

    The cost model charges the DAG once per shared sub-term, bound at its
    home (``explicit_sharing``, Fig. 6 with 4.32): in
    ``π0 (gen[i:n] 2 + Σx, 2 + Σx)`` the loop-invariant ``2 + Σx`` costs once,
    but ``gen[i:n] 2 + Σx`` alone recomputes it per ``i``.  So the pair's
    sharing is made explicit first and the projection pushed through its
    lets (rule 5.5), then 5.11: ``let v = 2 + Σx in gen[i:n] v``.  Lets only
    the dropped component used are dead and removed by the next round."""
    kept = pair.fst if k == 0 else pair.snd
    other = pair.snd if k == 0 else pair.fst
    if not (has_work(kept) and has_work(other)):
        return kept  # nothing with work can be shared between them
    binds, body = lets(explicit_sharing(pair))
    if not binds or not isinstance(body, Pair):
        return kept
    return make_lets(binds, body.fst if k == 0 else body.snd)


@rule("simplify.project_pair", figure=SECTION)
def project_pair(e: Expr, ctx: Ctx | None = None):
    """π_k (e0, e1) ==> e_k        (rule 5.11, keeping what e_k shared with
    the other component bound: see project)"""
    if isinstance(e, Proj) and isinstance(e.arg, Pair):
        return project(e.arg, e.index)
    return None


def _gather_sum_block(e: Sum):
    """``sum[~b] [p]·body`` with nested sums and brackets gathered into one block."""
    binds, preds = [], []
    cur: Expr = e
    while True:
        if isinstance(cur, Sum):
            # a binder that shadows one gathered already, or an index the gathered
            # brackets mention, starts a block of its own
            if any(cur.var in free_indices(q) for q in preds) or any(cur.var is i for i, _ in binds):
                break
            binds.append((cur.var, cur.extent))
            cur = cur.body
        elif isinstance(cur, Iverson):
            preds.append(cur.pred)
            cur = cur.body
        else:
            break
    return binds, conj(*preds), cur


def sum_block(e: Sum):
    """``(binds, pred, body)`` of ``sum[~b] [p]·body`` after single-point
    elimination: the block of nested sums and brackets gathered, the
    predicate simplified, and every summed index fixed by an equality with
    coefficient ±1 substituted away, its range kept (RULES.md Note in §2.1).
    The simplifier's sum handling starts from this (then decides the
    predicate under the enclosing context and simplifies the body)."""
    binds, pred, body = _gather_sum_block(e)
    return eliminate(binds, simplify_pred(pred), body)


@rule("simplify.sum_single_point", figure=SECTION)
def sum_single_point(e: Expr, ctx: Ctx | None = None):
    """sum[i:n] [k = i - j ∧ q]·e ==> [0 <= k + j < n ∧ q']·e[i := k + j]
    (every summed index fixed by an equality, see sum_block; None when no
    index is eliminated)"""
    if not isinstance(e, Sum):
        return None
    before = len(_gather_sum_block(e)[0])
    binds, pred, body = sum_block(e)
    if len(binds) == before and pred is not FALSE:
        return None
    if pred is FALSE:
        return zero_like(e)
    return make_sums(binds, body if pred is TRUE else Iverson(pred, body))


# --------------------------------------------------------------------------
# Bindings (the simplifier's let handling; a long block applies the same
# rewrites in one linear pass with a pending substitution, simplify._let_block)


def _uses(e: Expr, v: Var, memo=None) -> int:
    """Number of occurrences of ``v`` in the tree of ``e`` (shared DAG nodes count per use)."""
    if memo is None:
        memo = {}
    if v not in free_vars(e):
        return 0
    got = memo.get(e)
    if got is not None:
        return got
    if e is v:
        r = 1
    else:
        r = 0
        for c in children(e):
            if isinstance(c, Expr):
                r += _uses(c, v, memo)
            elif isinstance(c, tuple):
                r += sum(_uses(x, v, memo) for x in c if isinstance(x, Expr))
    memo[e] = r
    return r


@rule("simplify.propagate_copy", figure=SECTION)
def propagate_copy(e: Expr, ctx: Ctx | None = None):
    """let v = u in e ==> e[v := u]        (u a variable, a constant or a zero)"""
    if isinstance(e, Let):
        u = e.value
        if isinstance(u, (Var, Const)) or is_zero(u):
            return subst(e.body, vals={e.var: u})
    return None


@rule("simplify.inline_single_use", figure=SECTION)
def inline_single_use(e: Expr, ctx: Ctx | None = None):
    """let v = g in e ==> e[v := g]        (g does no arithmetic and v occurs
    once in e: a gather, so inlining never changes the cost)"""
    if isinstance(e, Let) and not has_work(e.value) and _uses(e.body, e.var) == 1:
        return subst(e.body, vals={e.var: e.value})
    return None


@rule("simplify.dead_let", figure=SECTION)
def dead_let(e: Expr, ctx: Ctx | None = None):
    """let v = e0 in e1 ==> e1        (v not free in e1)"""
    if isinstance(e, Let) and e.var not in free_vars(e.body):
        return e.body
    return None


@rule("simplify.let_result", figure=SECTION)
def let_result(e: Expr, ctx: Ctx | None = None):
    """let v = e0 in v ==> e0"""
    if isinstance(e, Let) and e.body is e.var:
        return e.value
    return None


# --------------------------------------------------------------------------
# The table (children simplified first; the simplifier handles sums, lets
# and the bracket's own predicate, which decide what the children see)

TABLE = RuleTable("simplify", {SECTION: (
    Entry(Add, add_zero),
    Entry(Mul, mul_zero),
    Entry(Mul, mul_one),
    Entry(Mul, bracket_out_of_product, again=True),
    Entry(Proj, project_pair),
    Entry(Gen, gen_zero),
    Entry(Gen, gen_eta),
    Entry(Access, access_zero),
    Entry(Access, inline_gather, again=True),
    Entry(Access, access_bracket, again=True),
    Entry(Iverson, bracket_zero),
    Entry(Iverson, merge_brackets, again=True),
    Entry(Iverson, bracket_true),
)})
