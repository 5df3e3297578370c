"""The adjoint (reverse-mode) derivative ``DT⟦e⟧σ``: paper Section 6.3, Figures 14-16.

The program (tensor SSA, Fig. 10) is transposed by rewriting the inner
product ``<dY | D⟦e⟧σ>`` into ``<DT⟦e⟧σ(dY) | dx>``, applying the rules of
``adjoint_rules`` in the order of RULES.md Section 5.5:

1. 6.20 until every ``let`` is extracted, each followed by its ``dlet``;
2. 6.25 so that the ordinary bindings precede all ``dlet`` bindings;
3. 6.26 to split a tuple output, then 6.33 on the output variables;
4. the reverse pass, innermost ``dlet`` first: 6.32 if its differential is
   unused; else 6.39 until one product has it on the right, 6.31 (the
   reversing rule), the rule of its right-hand side's SSA form (6.27 for an
   input line, 6.35 for a constant, 6.44, 6.47, 6.48, 6.49), then 6.33/6.34
   on the new products and 6.36 to drop ``ZERO``; every ordinary ``let`` a
   rule produces is lifted out of the ⊕-sum and hoisted past the remaining
   ``dlet``s (6.25);
5. per input: 6.39 / 6.28 to one product ``<E | dx>_[p]``; the filter is
   dropped by masking ``E`` (RULES.md Note on dropping predicates), and the
   left sides form the result (a nested pair for several inputs).

The state keeps the term ``let … in dlet … in let … in e^S`` as lists; each
rule is applied to the sub-term it rewrites (with ``HOLE`` standing for the
parts it does not inspect), so ``rules.trace()`` records every step.
"""

from __future__ import annotations

from tensorlang.errors import TensorLangError, UnsupportedError, describe
from tensorlang.ir import (
    Expr,
    Pair,
    Var,
    make_lets,
    shape_of,
)
from tensorlang.typecheck import type_of, zero_of

from .adjoint_rules import (
    HOLE,
    BLet,
    Deriv,
    DLet,
    Inner,
    OPlus,
    Zero,
    constant_tensor,
    constant_variable,
    differential_of_variable,
    drop_unused_dlet,
    drop_zero_term,
    extract_let,
    join_pair_contributions,
    masked,
    merge_contributions,
    push_projection,
    reverse_binding,
    split_pair_output,
    swap_dlet_let,
    transpose_addition,
    transpose_binary_contraction,
    transpose_map,
    transpose_unary_contraction,
)
from .profile import stage as _timed
from .simplify_preds import compact
from .rewrite import Entry, RuleTable
from .ssa_form import STATEMENT_KINDS, AddRHS, ConstRHS, ContractRHS, InputRHS, MapRHS, classify, is_tensor_ssa


class _State:
    """``let primal… in let adjoint… in dlet dlets… in ⊕ terms`` as lists."""

    def __init__(self):
        self.primal: list = []  # ordinary bindings of the program
        self.adjoint: list = []  # ordinary bindings produced by the reverse pass
        self.dlets: list = []  # (dX, Deriv), outermost first
        # the ⊕-sum, its products grouped by their right side (a differential
        # variable): the reverse pass takes the products of one dlet at a
        # time, and scanning the whole sum per dlet was quadratic (issue #14)
        self.by_right: dict = {}

    @property
    def terms(self) -> list:
        """The ⊕-sum as one list (for messages and rule left sides)."""
        return [t for ts in self.by_right.values() for t in ts]

    def take(self, right) -> list:
        """Remove and return the products whose right side is ``right``."""
        return self.by_right.pop(right, [])

    # -- lifting lets out of the ⊕-sum (Note on 6.39) and past the dlets (6.25)
    def absorb(self, t) -> None:
        """Add a rule's result (``BLet``s around an ⊕-sum / product / ZERO) to the state."""
        while isinstance(t, BLet):
            self._hoist(t.var, t.value)
            t = t.body
        match t:
            case OPlus(terms=ts):
                for x in ts:
                    self.add_term(x)
            case Inner() | Zero():
                self.add_term(t)
            case _:
                raise TypeError(f"unexpected adjoint term {t!r}")

    def _hoist(self, var, value) -> None:
        _past_dlets(self.dlets, var, value)
        self.adjoint.append((var, value))

    def add_term(self, t) -> None:
        """Simplify a new product with 6.33 / 6.34 / 6.35 / 6.36 and keep it."""
        if isinstance(t, Inner) and isinstance(t.right, Deriv):
            r = differential_of_variable(t) or constant_variable(t) or (
                constant_tensor(t) if not isinstance(t.right.expr, Var) else None)
            if r is not None:
                t = r
        if isinstance(t, Zero):
            drop_zero_term(OPlus((HOLE, t)))
            return
        if t.pred is not None:
            # the filter is read only at in-range indices: its gist there when
            # smaller (composed supports of shifted reads, issues #14/#17)
            p = compact(tuple(zip(t.ivars, shape_of(type_of(t.left)))), t.pred)
            if p is not t.pred:
                t = Inner(t.left, t.right, p, t.ivars)
        self.by_right.setdefault(t.right, []).append(t)


def _past_dlets(dlets: list, var, value) -> None:
    """6.25: the binding moves past every remaining dlet (its value mentions
    only program and adjoint variables, never a differential).  Each swap is
    the same rewrite, so it is applied (and traced) once, at the innermost
    dlet: once per dlet made building a derivative quadratic in its length."""
    if dlets:
        dx, d = dlets[-1]
        swap_dlet_let(DLet(dx, d, BLet(var, value, HOLE)))


def _check_ssa(e: Expr) -> None:
    if not is_tensor_ssa(e, canonical=False):
        raise UnsupportedError(
            f"the adjoint rules apply to tensor SSA (Fig. 10); normalize first (tl.normalize): {describe(e)}"
        )


def _merge_all(state: _State, target) -> Inner | None:
    """6.39 (or 6.28 at pair type) until one product has ``target`` on its right."""
    mine = state.take(target)
    if not mine:
        return None
    acc = mine[0]
    for nxt in mine[1:]:
        pair = OPlus((acc, nxt))
        r = merge_contributions(pair)
        if r is None:
            r = join_pair_contributions(pair)
        if r is None:  # pair type with filters: mask both, then join (Note on 6.27/6.28)
            r = join_pair_contributions(OPlus((
                Inner(masked(acc.left, acc.pred, acc.ivars), target),
                Inner(masked(nxt.left, nxt.pred, nxt.ivars), target),
            )))
        if r is None:  # pragma: no cover - every case is covered above
            raise UnsupportedError(f"cannot merge contributions to {describe(target)}")
        while isinstance(r, BLet):
            state._hoist(r.var, r.value)
            r = r.body
        acc = r
    return acc


# The transpose keyed by the tensor-SSA statement kind of the dlet's
# right-hand side (Fig. 10), exhaustive over STATEMENT_KINDS: an input line
# walks its projection chain (6.27, then 6.33 / 6.34 in add_term), a
# constant is 6.35, and each arithmetic form has its rule of Figs. 15-16.
TRANSPOSE = RuleTable("adjoint (transpose)", {
    15: (
        Entry(InputRHS, push_projection, repeat=True),
        Entry(ConstRHS, constant_tensor),
        Entry(AddRHS, transpose_addition),
        Entry(MapRHS, transpose_map),
    ),
    16: (
        Entry(ContractRHS, transpose_binary_contraction, where=lambda v: len(v.factors) == 2),
        Entry(ContractRHS, transpose_unary_contraction, where=lambda v: len(v.factors) == 1),
    ),
})
_MISSING = TRANSPOSE.missing(STATEMENT_KINDS)
if _MISSING:  # pragma: no cover - a table edit that drops a kind fails at import
    raise TensorLangError(f"the transpose table has no rule for {[k.__name__ for k in _MISSING]}")


def _transpose_rhs(state: _State, t: Inner) -> None:
    """Apply the rule of the SSA form of ``t.right`` (a Deriv of a right-hand side)."""
    view = classify(t.right.expr)
    if view is None:
        raise UnsupportedError(f"not a tensor-SSA right-hand side: {describe(t.right.expr)}")
    entry = TRANSPOSE.entry(view)
    if entry.repeat:
        while (r := entry.fn(t)) is not None:
            t = r
        state.absorb(t)
        return
    r = entry.fn(t)
    if r is None:  # pragma: no cover - each rule matches every statement of its kind
        raise UnsupportedError(f"rule {entry.number} did not apply to {describe(t.right.expr)}")
    state.absorb(r)


def transpose(e: Expr, wrt, seed: Var) -> Expr:
    """Signature: transpose : SSA Expr × [input Var] × Var -> Expr  (DT⟦e⟧σ).

    ``seed`` is the output cotangent ``dY`` (a new input of the output's
    type); the result computes the cotangents of ``wrt`` (a nested pair
    ``(E0, (E1, …))`` for several).  The result is not simplified.
    """
    with _timed("adjoint"):
        return _transpose(e, wrt, seed)


def _transpose(e: Expr, wrt, seed: Var) -> Expr:
    _check_ssa(e)
    if seed.type is not type_of(e):
        raise TensorLangError(f"the cotangent {seed.name} has type {seed.type}, the output has type {type_of(e)}")
    sigma = {x: Var("d" + x.name, -10**9 - k, x.type) for k, x in enumerate(wrt)}
    state = _State()

    # 1-2: extract every let (6.20); order ordinary bindings first (6.25).
    t = Inner(seed, Deriv(e, sigma))
    while True:
        r = extract_let(t)
        if r is None:
            break
        x, value, d = r.var, r.value, r.body
        _past_dlets(state.dlets, x, value)
        state.primal.append((x, value))
        state.dlets.append((d.dvar, d.value))
        t = d.body

    # 3: split a tuple output (6.26), then 6.33 on the output variables.
    pending = [t]
    while pending:
        u = pending.pop()
        r = split_pair_output(u)
        if r is None:
            state.add_term(u)
        else:
            pending.extend(reversed(r.terms))

    # 4: the reverse pass, innermost dlet first.
    while state.dlets:
        dx, d = state.dlets.pop()
        one = _merge_all(state, dx)
        if one is None:
            # 6.32: no product mentions dX (the index says so); the rest of
            # the sum is not inspected, so it is passed as a hole
            drop_unused_dlet(DLet(dx, d, OPlus((HOLE,))))
            continue
        r = reverse_binding(DLet(dx, d, OPlus((one,))))
        state._hoist(r.var, r.value)
        (new,) = r.body.terms
        _transpose_rhs(state, new)

    # 5: one product per input; drop the filters by masking; read off the result.
    outs = []
    for x in wrt:
        one = _merge_all(state, sigma[x])
        if one is None:
            outs.append(zero_of(x.type))
        else:
            outs.append(masked(one.left, one.pred, one.ivars))
    leftover = state.terms
    if leftover:  # pragma: no cover - every differential is consumed above
        raise UnsupportedError(f"adjoint left {len(leftover)} unprocessed inner product(s)")
    result = outs[-1]
    for o in reversed(outs[:-1]):
        result = Pair(o, result)
    out = make_lets(state.primal + state.adjoint, result)
    type_of(out)
    return out

