"""Pair elimination: paper Section 5.2, Figure 8 (RULES.md Section 4.2), rules 5.11-5.20.

Uses the type isomorphism ``[n](T0 × T1) ≅ [n]T0 × [n]T1`` (array of structs
vs struct of arrays) to push projections down to the inputs and pair
constructions up to the output, and splits every pair-typed ``let``
(5.18-5.20, one rule on three lines).  Afterwards::

    Le ::= let x = e in Le  |  Oe        Oe ::= (Oe, Oe)  |  e
    Ie ::= π0 Ie  |  π1 Ie  |  x          (x a free input)

where ``e`` has no let, no pair construction and projections only inside
``Ie``.  5.12 is used in its corrected form ``π0 (gen[i:n] e) ==> gen[i:n] π0 e``
and every rule has its ``π1`` twin.

Precondition: let-lifted, with inputs and output in struct-of-arrays form.
An array-of-structs input is refused with a TensorLangError that says how to
pass it.  Intermediate terms are typed only up to the isomorphism (e.g.
``π0`` of an array of pairs), as the paper says; the pass's output is
well-typed again.  Beyond the printed rules, an output leaf that still has a
pair type (a pair input returned as is, ``[p]·x``) is eta-expanded into its
components, so every output leaf is pair-free.
"""

from __future__ import annotations

from tensorlang.errors import InputError, UnsupportedError, describe
from tensorlang.ir import (
    Access,
    Expr,
    Gen,
    Iverson,
    Let,
    Pair,
    PairT,
    Proj,
    RealT,
    TensorT,
    Type,
    fresh_var,
    input_vars,
    make_lets,
    scalar_elem,
    shape_of,
    subst,
    tensor_type,
)
from tensorlang.typecheck import type_of

from .rewrite import Entry, ResultCache, RuleTable, bottom_up, fixpoint
from .rules import rule

# --------------------------------------------------------------------------
# Types


def is_soa(t: Type) -> bool:
    """Struct-of-arrays form: no pair type below a tensor type."""
    match t:
        case RealT():
            return True
        case PairT(fst=a, snd=b):
            return is_soa(a) and is_soa(b)
        case TensorT(elem=el):
            return not _has_pair(el)
        case _:
            raise TypeError(f"not a type: {t!r}")


def _has_pair(t: Type) -> bool:
    match t:
        case RealT():
            return False
        case PairT():
            return True
        case TensorT(elem=el):
            return _has_pair(el)
        case _:
            raise TypeError(f"not a type: {t!r}")


def split_type(t: Type) -> tuple:
    """``[n0]…[nk](T0 × T1) -> ([n0]…[nk]T0, [n0]…[nk]T1)`` (the isomorphism)."""
    shape = shape_of(t)
    el = scalar_elem(t)
    if not isinstance(el, PairT):
        raise TypeError(f"not a pair type up to the isomorphism: {t}")
    return tensor_type(shape, el.fst), tensor_type(shape, el.snd)


def check_soa_io(e: Expr) -> None:
    """The precondition on inputs and output (RULES.md Section 4.2)."""
    for v in input_vars(e):
        if not is_soa(v.type):
            raise InputError(
                f"input {v.name} has the array-of-structs type {v.type}; declare it as a struct of arrays "
                f"instead (a pair of tensors, e.g. tl.var({v.name!r}, tl.pair_type(tl.tensor_of([n]), "
                "tl.tensor_of([n])))) and pass a tuple of arrays"
            )
    t = type_of(e)
    if not is_soa(t):
        raise UnsupportedError(
            f"the program's result has the array-of-structs type {t}; return a pair of tensors instead "
            f"(tl.pair(tl.gen(n, ...), tl.gen(n, ...))): {describe(e)}"
        )


# --------------------------------------------------------------------------
# The rules of Figure 8


@rule("5.11", figure=8)
def proj_pair(e: Expr):
    """π0 (e0, e1) ==> e0        (π1 (e0, e1) ==> e1)"""
    match e:
        case Proj(index=k, arg=Pair(fst=a, snd=b)):
            return a if k == 0 else b
    return None


@rule("5.12", figure=8)
def proj_gen(e: Expr):
    """π0 (gen[i:n] e) ==> gen[i:n] π0 e      (corrected; likewise π1)"""
    match e:
        case Proj(index=k, arg=Gen(var=i, extent=n, body=b)):
            return Gen(i, n, Proj(k, b))
    return None


@rule("5.13", figure=8)
def gen_pair(e: Expr):
    """gen[i:n] (e0, e1) ==> (gen[i:n] e0, gen[i:n] e1)"""
    match e:
        case Gen(var=i, extent=n, body=Pair(fst=a, snd=b)):
            return Pair(Gen(i, n, a), Gen(i, n, b))
    return None


@rule("5.14", figure=8)
def proj_access(e: Expr):
    """π0 (e[a]) ==> (π0 e)[a]        (likewise π1)"""
    match e:
        case Proj(index=k, arg=Access(arr=x, index=a)):
            return Access(Proj(k, x), a)
    return None


@rule("5.15", figure=8)
def access_pair(e: Expr):
    """(e0, e1)[a] ==> (e0[a], e1[a])"""
    match e:
        case Access(arr=Pair(fst=x, snd=y), index=a):
            return Pair(Access(x, a), Access(y, a))
    return None


@rule("5.16", figure=8)
def proj_iverson(e: Expr):
    """π0 [p]·e ==> [p]·(π0 e)        (likewise π1)"""
    match e:
        case Proj(index=k, arg=Iverson(pred=p, body=b)):
            return Iverson(p, Proj(k, b))
    return None


@rule("5.17", figure=8)
def iverson_pair(e: Expr):
    """[p]·(e0, e1) ==> ([p]·e0, [p]·e1)"""
    match e:
        case Iverson(pred=p, body=Pair(fst=a, snd=b)):
            return Pair(Iverson(p, a), Iverson(p, b))
    return None


@rule("5.18", figure=8)
def split_let(e: Expr):
    """let x : [n0]…[nk](T0 × T1) = e0 in e1
         ==> let x0 : [n0]…[nk]T0 = π0 e0 in          (5.18)
             let x1 : [n0]…[nk]T1 = π1 e0 in          (5.19)
             [x ↦ (x0, x1)] e1                         (5.20)
    (one rule on three numbered lines; the prefix [n0]…[nk] may be empty)"""
    match e:
        case Let(var=x, value=e0, body=e1) if isinstance(scalar_elem(x.type), PairT):
            t0, t1 = split_type(x.type)
            x0, x1 = fresh_var(x.name + "0", t0), fresh_var(x.name + "1", t1)
            return Let(x0, Proj(0, e0), Let(x1, Proj(1, e0), subst(e1, {x: Pair(x0, x1)})))
    return None


# The rules of Figure 8 by the kind of node they rewrite (5.18-5.20 split a
# statement of the let-block and are applied by the pass itself).
TABLE = RuleTable("pair elimination", {8: (
    Entry(Proj, proj_pair),
    Entry(Proj, proj_gen),
    Entry(Proj, proj_access),
    Entry(Proj, proj_iverson),
    Entry(Gen, gen_pair),
    Entry(Access, access_pair),
    Entry(Iverson, iverson_pair),
)})


# --------------------------------------------------------------------------
# The pass

_RESULTS = ResultCache()


def pair_elim(e: Expr) -> Expr:
    """Signature: pair_elim : Le -> Le (pair-free), with ⟦pair_elim(e)⟧σ = ⟦e⟧σ
    and $⟦pair_elim(e)⟧σ ≤ $⟦e⟧σ, for let-lifted e with struct-of-arrays
    inputs and output.

    The let-block is processed statement by statement (5.18-5.20 may split a
    statement in two and substitute into the rest); each right-hand side and
    the result are normalized by one run of :func:`_normalizer`.  The result
    is kept per input program.
    """
    got = _RESULTS.get(e)
    if got is not None:
        return got
    check_soa_io(e)
    norm = _normalizer()
    binds = []
    node = e
    while isinstance(node, Let):
        split = split_let(node)
        if split is not None:
            node = split
            continue
        binds.append((node.var, norm(node.value)))
        node = node.body
    out = make_lets(binds, _output(norm(node), norm))
    _RESULTS.put(e, out)
    return out


def _output(e: Expr, norm) -> Expr:
    """Oe: pairs of pair-free leaves; a leaf of pair type is eta-expanded
    into its projections (an instance of the isomorphism at the output)."""
    if isinstance(e, Pair):
        return Pair(_output(e.fst, norm), _output(e.snd, norm))
    if isinstance(scalar_elem(type_of(e)), PairT):
        return Pair(_output(norm(Proj(0, e)), norm), _output(norm(Proj(1, e)), norm))
    return e


def _refuse_let(go, e: Expr):
    raise UnsupportedError(f"pair elimination needs let-lifted input (run let_lift first): {describe(e)}")


def _normalizer():
    """Signature: norm : e -> e, a let-free term with the rules of Figure 8
    applied until none matches (children first, then the root; a rule's
    result is normalized again, its untouched children are memo hits)."""
    go = bottom_up(lambda node: post(node), what="pair elimination", special={Let: _refuse_let})
    post = fixpoint(TABLE, go)
    return go
