"""Simplification of derivative code: what makes the predicates pay off (paper §2.1, §2.2, §6).

The adjoint rules (Figs. 15-16) leave single-point sums such as
``sum[i:n] [k = i - j]·e`` and existential filters.  This pass

* eliminates a summed (or existentially quantified) index fixed by an
  equality ``a = b`` in which it has coefficient ±1, keeping its range:
  ``sum[i:n] [k = i - j ∧ q]·e  ==>  [0 <= k + j < n ∧ q']·e[i := k + j]``
  (RULES.md Note in §2.1: the range predicate must stay); among several
  candidates the outermost binder goes first (the generator side of a
  transposed access, which yields the gather form of §2.1);
* decides predicates with isl (``tensorlang.isl_bridge``): an empty one
  makes its term zero, a conjunct implied by the enclosing ranges and
  brackets is dropped, an always-true bracket disappears; relations are data
  and are left alone;
* propagates zeros (``0 + e``, ``0·e``, ``[p]·0``, sums and gens of zero,
  accesses into zero) and lifts brackets out of products
  (``([p]·a)·b ==> [p]·(a·b)``, never more costly, rule 4.25 vs 4.33);
* removes dead bindings, propagates copies and zero bindings, and inlines a
  single-use *gather* (a right-hand side without arithmetic, so inlining
  never changes the cost), followed by ``(gen[i:n] e)[a] ==> e[i := a]``
  (5.21) and ``([p]·e)[a] ==> [p]·e[a]`` (5.22).

Each round works on the program's explicit sharing (``explicit_sharing``,
what the cost model charges, rule 4.32): a shared term is simplified once at
its let, a rewrite never inlines a tensor into a loop that would pay it more
often (5.21), and dropping a dead binding or a pair component keeps what it
shared with the rest bound.

Every rewrite preserves the value (Fig. 4) and never raises the cost (Fig. 6).
Predicates are decided in passes/simplify_preds.py.  The local rewrites are
named rules in passes/simplify_rules.py (registered like the paper's numbered
rules, each with its obligation in proofs/simplify.py), applied through its
table keyed by node kind.
"""

from __future__ import annotations

from tensorlang.errors import TensorLangError, UnsupportedError
from tensorlang.ir import (
    FALSE,
    TRUE,
    Const,
    Expr,
    Gen,
    Iverson,
    Let,
    Pred,
    Sum,
    Var,
    children,
    free_indices,
    free_vars,
    fresh_var,
    lets,
    make_lets,
    make_sums,
    rebuild,
    subst,
    walk,
    sym_aff,
)
from tensorlang.sharing import explicit_sharing, has_work, shared_terms

from .profile import stage as _timed
from .rewrite import VALUE_KINDS, map_operands
from .simplify_preds import Ctx as _Ctx, decide, simplify_pred  # noqa: F401  (simplify_pred: API)
from .simplify_rules import (
    TABLE as RULE_TABLE,
    _uses,
    dead_let,
    decide_bracket,
    inline_single_use,
    let_result,
    propagate_copy,
    sum_block,
)
from tensorlang.ir import is_zero
from tensorlang.typecheck import type_of

# --------------------------------------------------------------------------
# Expressions


def _replace(e: Expr, old: Expr, new: Var) -> Expr:
    """``e`` with the sub-term ``old`` replaced by ``new``, except under a binder
    of one of ``old``'s free index or value variables (conservative)."""
    fi, fv = free_indices(old), free_vars(old)
    memo: dict = {}

    def go(x):
        if x is old:
            return new
        if not isinstance(x, Expr) or not has_work(x):
            return x
        got = memo.get(x)
        if got is not None:
            return got
        if isinstance(x, (Gen, Sum)) and x.var in fi:
            out = x
        elif isinstance(x, Let) and x.var in fv:
            out = Let(x.var, go(x.value), x.body)
        else:
            cs = []
            for c in children(x):
                if isinstance(c, Expr):
                    cs.append(go(c))
                elif isinstance(c, tuple):
                    cs.append(tuple(go(y) if isinstance(y, Expr) else y for y in c))
                else:
                    cs.append(c)
            out = rebuild(x, cs)
        memo[x] = out
        return out

    return go(e)


def _subst_free(e: Expr, sub: dict) -> Expr:
    """``subst`` restricted to the variables free in ``e`` (a block's pending
    substitution is long; ``subst`` looks at every value it is given)."""
    if not sub:
        return e
    mine = {v: sub[v] for v in free_vars(e) if v in sub}
    return subst(e, vals=mine) if mine else e


def _shared_work(dead: Expr, rest: set) -> list:
    """The largest closed sub-terms of ``dead`` that do work and also occur in
    ``rest`` (a set of nodes).  The cost model charges such a term once for
    both (DAG sharing, ``explicit_sharing``); dropping ``dead`` leaves it
    once in ``rest``, where a loop it does not use would pay it per
    iteration (``let t = gen[i:n] s in gen[i:m] s``: ``s`` once, then ``m``
    times).  Binding it keeps it shared (rule 4.32)."""
    out, stack, seen = [], [dead], set()
    scope = free_vars(dead)
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x is not dead and x in rest and has_work(x) and not free_indices(x) and free_vars(x) <= scope:
            out.append(x)
            continue
        for c in children(x):
            if isinstance(c, Expr):
                stack.append(c)
            elif isinstance(c, tuple):
                stack.extend(z for z in c if isinstance(z, Expr))
    return out


class _Simplifier:
    def __init__(self):
        self.memo: dict = {}

    def expr(self, e: Expr, ctx: _Ctx) -> Expr:
        key = (e, ctx.binds, ctx.facts)
        try:
            got = self.memo.get(key)
        except TypeError:  # pragma: no cover
            got = None
        if got is not None:
            return got
        out = self._expr(e, ctx)
        self.memo[key] = out
        return out

    def _expr(self, e: Expr, ctx: _Ctx) -> Expr:
        """Signature: _expr : Expr × ctx -> Expr (bottom-up, exhaustive).

        Sums, lets and brackets decide what their children see (an index
        eliminated, a binding inlined, a predicate assumed) and are handled
        below; every other node has its children simplified first (a gen's
        body under its binder) and then the named rules of
        :data:`.simplify_rules.TABLE` applied at the root."""
        match e:
            case Var() | Const():
                return e
            case Sum():
                return self._sum(e, ctx)
            case Let():
                return self._let(e, ctx)
            case Iverson():
                return self._iverson(e, ctx)
        if not isinstance(e, VALUE_KINDS):
            raise UnsupportedError(f"simplify: not a value expression: {e!r}")
        inner = ctx.bind(e.var, e.extent) if isinstance(e, Gen) else ctx
        expr = self.expr
        return self._post(map_operands(e, lambda c: expr(c, inner)), ctx)

    def _post(self, node: Expr, ctx: _Ctx) -> Expr:
        hit = RULE_TABLE.rewrite_entry(node, ctx)
        if hit is None:
            return node
        entry, out = hit
        return self.expr(out, ctx) if entry.again else out

    def _iverson(self, e: Iverson, ctx: _Ctx) -> Expr:
        """The predicate first (decided under the context: false makes the
        term zero before its body is looked at), then the body under it."""
        d = decide_bracket(e, ctx)
        if d is not None:
            if not isinstance(d, Iverson):
                return d
            e = d
        b = self.expr(e.body, ctx.assume(e.pred))
        return self._post(rebuild(e, (e.pred, b)), ctx)

    def _sum(self, e: Sum, ctx: _Ctx) -> Expr:
        binds, pred, body = sum_block(e)  # simplify.sum_single_point's rewrite
        if pred is FALSE:
            return Const(0)
        inner = ctx
        for i, n in binds:
            inner = inner.bind(i, n)
        pred = decide(inner, pred)
        if pred is FALSE:
            return Const(0)
        body = self.expr(body, inner.assume(pred))
        if is_zero(body):
            return Const(0)
        # a body that exposed more brackets or sums is gathered by the next round
        out_body = body if pred is TRUE else Iverson(pred, body)
        return make_sums(binds, out_body)

    def _let(self, e: Let, ctx: _Ctx) -> Expr:
        binds, _ = lets(e)
        vs = [v for v, _ in binds]
        if len(binds) > 2 and len(set(vs)) == len(vs):
            return self._let_block(binds, e, ctx)
        return self._let1(e, ctx)

    def _let_block(self, binds, e: Let, ctx: _Ctx) -> Expr:
        """A let-block (a derivative's SSA chain) in linear time: the rules of
        :meth:`_let1` applied with one pending substitution per pass instead of
        one substitution of the whole rest per binding (quadratic in the
        block's length, issue #14)."""
        _, body = lets(e)
        block = {v for v, _ in binds}
        # forward: simplify each value; propagate copies, constants and zeros
        sub: dict = {}
        kept = []
        for v, e0 in binds:
            e0 = self.expr(_subst_free(e0, sub), ctx)
            if isinstance(e0, (Var, Const)) or is_zero(e0):
                sub[v] = e0
            else:
                kept.append((v, e0))
        body = self.expr(_subst_free(body, sub), ctx)
        # backward: use counts of the rest decide dead bindings and single uses
        counts: dict = {}
        seen: set = set()

        def note(x):
            for w in free_vars(x) & block:
                counts[w] = counts.get(w, 0) + _uses(x, w)
            stack = [x]
            while stack:
                y = stack.pop()
                if y in seen:
                    continue
                seen.add(y)
                for c in children(y):
                    if isinstance(c, Expr):
                        stack.append(c)
                    elif isinstance(c, tuple):
                        stack.extend(z for z in c if isinstance(z, Expr))

        note(body)
        out, inline, cse = [], set(), {}
        for v, e0 in reversed(kept):
            c = counts.get(v, 0)
            if c == 0:
                if has_work(e0) and e0 in seen:
                    # dead, but its value is computed again later: share it (CSE)
                    cse[v] = e0
                    out.append((v, e0))
                    note(e0)
                else:  # dead, but a part of it is computed again later: share that part
                    for part in _shared_work(e0, seen):
                        w = fresh_var("t", type_of(part))
                        cse[w] = part
                        out.append((w, part))
                        note(part)
                continue
            if c == 1 and not has_work(e0):
                inline.add(v)  # a single-use gather: inlining never changes the cost
            out.append((v, e0))
            note(e0)
        out.reverse()
        # forward: inline the single uses, share the recomputed values
        sub2: dict = {}
        active: list = []
        res = []

        def rewrite(x):
            y = _subst_free(x, sub2)
            for cv, ce in active:
                y = _replace(y, ce, cv)
            return y if y is x else self.expr(y, ctx)

        for v, e0 in out:
            e0 = rewrite(e0)
            if v in inline or isinstance(e0, (Var, Const)) or is_zero(e0):
                sub2[v] = e0
                continue
            res.append((v, e0))
            if v in cse:
                active.append((v, e0))
        body = rewrite(body)
        while res and body is res[-1][0]:  # let v = e0 in v  ==>  e0
            body = res.pop()[1]
        return make_lets(res, body)

    def _let1(self, e: Let, ctx: _Ctx) -> Expr:
        v, e0, e1 = e.var, e.value, e.body
        if v not in free_vars(e1):
            if has_work(e0) and any(x is e0 for x in walk(e1)):
                # the "dead" binding's value is computed again in the body: the
                # cost model shares it (DAG), so keep it and use it (CSE)
                e1b = _replace(e1, e0, v)
                if e1b is not e1:
                    return self.expr(Let(v, e0, e1b), ctx)
            parts = _shared_work(e0, set(walk(e1))) if has_work(e0) else []
            for part in reversed(parts):  # a part of it is: share that part
                w = fresh_var("t", type_of(part))
                e1 = Let(w, part, _replace(e1, part, w))
            return self.expr(e1, ctx)
        e0 = self.expr(e0, ctx)
        node = Let(v, e0, e1)
        for r in (propagate_copy, inline_single_use):
            out = r(node)
            if out is not None:
                return self.expr(out, ctx)
        node = Let(v, e0, self.expr(e1, ctx))
        for r in (dead_let, let_result):
            out = r(node)
            if out is not None:
                return out
        return node


def simplify(e: Expr, *, max_rounds: int = 8) -> Expr:
    """Signature: simplify : Expr -> Expr (value-preserving, never more costly)."""
    with _timed("simplify"):
        return _simplify(e, max_rounds)


def _simplify(e: Expr, max_rounds: int) -> Expr:
    t = type_of(e)
    for _ in range(max_rounds):
        # The rewrites below are context-dependent (a bracket's facts decide
        # predicates under it), so a DAG-shared term reached from two contexts
        # could become two different terms, each paid (6 -> 11 on
        # S + [2 < n]·S).  Working on the sharing the cost model charges
        # (rule 4.32, explicit_sharing) simplifies a shared term once, at its let.
        # (Only when there is such a term: explicit_sharing's invariant-tensor
        # scan is quadratic in a derivative's let-chain, issue #14.)
        if shared_terms(e):
            e = explicit_sharing(e)
        new = _Simplifier().expr(e, _Ctx())
        if new is e:
            break
        e = new
    if type_of(e) is not t:  # pragma: no cover - every rewrite preserves types
        raise TensorLangError("simplify changed the type of the program")
    return e


_ = (Pred, sym_aff)
