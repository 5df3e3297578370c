"""Gen pushout: paper Section 5.3, Figure 9 (RULES.md Section 4.3), rules 5.21-5.24.

Moves every ``gen`` to the outermost position of a right-hand side (or an
output component) and indexing down to the variables::

    Le  ::= let x = Ge in Le  |  Oe        Ge ::= gen[i:n] Ge  |  e
    Oe  ::= (Oe, Oe)  |  Ge

where ``e`` is built from constants, ``+``, ``·``, ``f(…)``, ``sum``, ``[p]·``
and accesses of variables only (``Ae``: a let-bound variable, ``Ie``: a
possibly projected input), following the reading of the Note on the
gen-pushout grammar.  A term ``[p]·x`` with ``x`` a tensor variable has no
rule and stays (the tensor-SSA pass eta-expands it).

Precondition: pair-free (the output of pair elimination).
"""

from __future__ import annotations

from tensorlang.errors import UnsupportedError, describe
from tensorlang.ir import (
    Access,
    Expr,
    Gen,
    Iverson,
    Let,
    Pair,
    conj,
    free_indices,
    fresh_index,
    lets,
    make_lets,
    subst,
    sym_aff,
)

from .rewrite import Entry, ResultCache, RuleTable, bottom_up, fixpoint
from .rules import rule


@rule("5.21", figure=9)
def access_gen(e: Expr):
    """(gen[i:n] e)[a] ==> [i ↦ a] e"""
    match e:
        case Access(arr=Gen(var=i, body=b), index=a):
            return subst(b, idx={i: a})
    return None


@rule("5.22", figure=9)
def access_iverson(e: Expr):
    """([p]·e)[a] ==> [p]·e[a]"""
    match e:
        case Access(arr=Iverson(pred=p, body=b), index=a):
            return Iverson(p, Access(b, a))
    return None


@rule("5.23", figure=9)
def iverson_gen(e: Expr):
    """[p]·(gen[i:n] e) ==> gen[i:n] [p]·e        (i not free in p)"""
    match e:
        case Iverson(pred=p, body=Gen(var=i, extent=n, body=b)):
            if i in free_indices(p):  # the paper assumes distinct names; rename
                j = fresh_index(i.name)
                i, b = j, subst(b, idx={i: sym_aff(j)})
            return Gen(i, n, Iverson(p, b))
    return None


@rule("5.24", figure=9)
def iverson_iverson(e: Expr):
    """[p0]·[p1]·e ==> [p0 ∧ p1]·e"""
    match e:
        case Iverson(pred=p0, body=Iverson(pred=p1, body=b)):
            return Iverson(conj(p0, p1), b)
    return None


# The rules of Figure 9 by the kind of node they rewrite.
TABLE = RuleTable("gen pushout", {9: (
    Entry(Access, access_gen),
    Entry(Access, access_iverson),
    Entry(Iverson, iverson_gen),
    Entry(Iverson, iverson_iverson),
)})

_RESULTS = ResultCache()


def gen_pushout(e: Expr) -> Expr:
    """Signature: gen_pushout : Le -> Le (gens outermost), with
    ⟦gen_pushout(e)⟧σ = ⟦e⟧σ and $⟦gen_pushout(e)⟧σ ≤ $⟦e⟧σ (5.21 may lower
    the cost: only one element is computed), for pair-free e.

    Each right-hand side and output component is normalized by one run of
    :func:`_normalizer`; the statement structure is unchanged.  The result
    is kept per input program.
    """
    got = _RESULTS.get(e)
    if got is not None:
        return got
    norm = _normalizer()
    binds, res = lets(e)
    out = make_lets([(x, norm(v)) for x, v in binds], _output(res, norm))
    _RESULTS.put(e, out)
    return out


def _output(e: Expr, norm) -> Expr:
    if isinstance(e, Pair):
        return Pair(_output(e.fst, norm), _output(e.snd, norm))
    return norm(e)


def _refuse(go, e: Expr):
    raise UnsupportedError(
        f"gen pushout needs let-lifted, pair-free input (run let_lift and pair_elim first): {describe(e)}"
    )


def _normalizer():
    """Signature: norm : e -> Ge, the rules of Figure 9 applied until none
    matches (children first, then the root; a result is normalized again)."""
    go = bottom_up(lambda node: post(node), what="gen pushout", special={Let: _refuse, Pair: _refuse})
    post = fixpoint(TABLE, go)
    return go
