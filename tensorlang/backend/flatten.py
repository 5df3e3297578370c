"""The gen-pushout normal form, written in the backend's grammar (paper Sections 4.3, 5.3).

Input grammar: the output grammar of the last front stage every route runs
before kernel preparation, the gen-pushout normal form of Fig. 9, pair-free
as Fig. 8 leaves it (``passes.normal_forms.why_not_pair_free`` and
``why_not_gen_pushed_out``; tensor SSA, Fig. 10, and the derivative routes'
simplified programs are special cases)::

    Le ::= let x = Ge in Le | Oe        Oe ::= (Oe, Oe) | Ge
    Ge ::= gen[i:n] Ge | e

with ``e`` let-free and pair-free: constants, ``+``, ``·``, ``f(…)``,
``sum``, ``[p]·`` and accesses of variables (or of input projection lines);
at the top of a right-hand side, ``[p]·X`` of a tensor variable.

Output grammar: the backend's let-block (``fusion.split_program``): each
right-hand side and output component is ``gen[i0:n0] … gen[ik:nk] s`` with
``s`` a real-valued scalar expression, or an alias (a variable or a
projection chain of an input).  The only rewrite is eta expansion of a
tensor-valued right-hand side that is not a generator (``X[0]`` ->
``gen[j:n] X[0][j]``, ``[p]·X`` -> ``gen[j:n] [p]·X[j]``, rule 4.11 with
``j`` fresh): it adds no work.

Nothing here normalizes: let-lifting, pair elimination, rule 5.21 and the
beta-reduction of generator accesses are the front stages' (the routes of
``tensorlang.driver``).  A program outside the input grammar is refused
with an UnsupportedError naming the sub-expression.  Called only by
``prepare.prepare`` (the stage ``prepare``).
"""

from __future__ import annotations

from ..errors import UnsupportedError, describe
from ..ir import Access, Expr, Gen, Iverson, Pair, Proj, RealT, TensorT, Var, fresh_index, lets, make_lets, sym_aff
from ..passes.normal_forms import why_not_gen_pushed_out, why_not_pair_free
from ..typecheck import type_of


def not_normal(expr: Expr) -> str | None:
    """Why ``expr`` is outside this module's input grammar (None: inside):
    pair-free (Fig. 8, which gen pushout keeps) and gens pushed out (Fig. 9)."""
    msg = why_not_pair_free(expr) or why_not_gen_pushed_out(expr)
    return f"not in the gen-pushout normal form (Figs. 8-9): {msg}" if msg else None


def flatten(expr: Expr) -> Expr:
    """Signature: flatten : Expr (gen-pushout form) -> Expr (a let-block; see module doc)."""
    msg = not_normal(expr)
    if msg:
        raise UnsupportedError(f"the backend lowers normalized programs (tl.compile's route normalizes); {msg}")
    binds, out = lets(expr)
    return make_lets([(v, _rhs(e)) for v, e in binds], _out(out))


def _out(e: Expr) -> Expr:
    if isinstance(e, Pair):
        return Pair(_out(e.fst), _out(e.snd))
    return _rhs(e)


def _alias(e: Expr) -> bool:
    while isinstance(e, Proj):
        e = e.arg
    return isinstance(e, Var)


def _rhs(e: Expr) -> Expr:
    """``gen[...] s`` with ``s`` real-valued, or an alias."""
    return e if _alias(e) else _eta(e)


def _eta(e: Expr) -> Expr:
    """A real-valued body below the gens: tensor-valued ones are indexed by fresh gens."""
    if isinstance(e, Gen):
        return Gen(e.var, e.extent, _eta(e.body))
    t = type_of(e)
    if isinstance(t, RealT):
        return e
    if not isinstance(t, TensorT):
        raise UnsupportedError(f"the backend cannot lower a value of type {t} below the gens: {describe(e)}")
    j = fresh_index("j")
    return Gen(j, t.extent, _eta(_index(e, sym_aff(j))))


def _index(e: Expr, a) -> Expr:
    """``e[a]`` with brackets kept outside the access (``([p]·X)[a] = [p]·X[a]``, rule 4.11)."""
    if isinstance(e, Iverson):
        return Iverson(e.pred, _index(e.body, a))
    return Access(e, a)
