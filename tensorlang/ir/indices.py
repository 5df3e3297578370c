"""Affine indices and predicates (paper Section 4, Figure 3 ``a`` and ``p``;
Fig. 5, rules 4.13-4.21).

* ``Aff``: index variables, size variables, integer constants, ``+`` and
  integer scaling, kept as a canonical linear combination; comparing two
  builds a predicate;
* ``Pred``: comparisons, relations, ``and``, ``or``, ``exists``, and the
  literals the paper uses implicitly (see the Note on Fig. 3).
"""

from __future__ import annotations

import numpy as _np

from ..errors import IndexError_, TensorLangError, describe
from .nodes import _TABLE, Node, node
from .types_base import Type

# --------------------------------------------------------------------------
# Affine indices (Fig. 3 ``a``) and size variables


class Sym(Node):
    """Symbols that may occur in affine expressions."""

    __slots__ = ()


@node
class SizeVar(Sym):
    """A size variable ``n``: global by name."""

    name: str

    def __repr__(self):
        return self.name


@node
class IndexVar(Sym):
    """An index variable bound by gen, sum or exists.  ``uid`` makes it unique;
    canonical variables (de Bruijn levels, see :func:`canonicalize`) have
    negative uids."""

    name: str
    uid: int

    def __repr__(self):
        return self.name if self.uid < 0 else f"{self.name}_{self.uid}"


def _sym_key(s: Sym):
    if isinstance(s, SizeVar):
        return (0, s.name, 0)
    return (1, s.name, s.uid)


@node
class Aff(Node):
    """A canonical affine combination ``sum(c * s) + const`` (rules 4.13-4.17).

    ``terms`` is sorted by symbol and has no zero coefficients.  Python
    operators build affine expressions; comparisons build predicates.
    """

    terms: tuple  # tuple[tuple[Sym, int], ...]
    const: int

    @classmethod
    def _normalize(cls, terms, const):
        # fast paths (most affine indices are a constant or one symbol):
        # exact ints, in range, checked inline; anything else takes the
        # general path below, which also reports what is wrong
        if type(const) is int and -INDEX_LIMIT <= const <= INDEX_LIMIT:
            if not terms:
                return ((), const)
            if len(terms) == 1:
                ((s, c),) = terms
                if type(c) is int and -INDEX_LIMIT <= c <= INDEX_LIMIT and isinstance(s, Sym):
                    return (((s, c),) if c else (), const)
            elif len(terms) == 2:  # two distinct symbols, non-zero: only the order to fix
                (s, c), (t, d) = terms
                if (s is not t and type(c) is int and type(d) is int and c and d
                        and -INDEX_LIMIT <= c <= INDEX_LIMIT and -INDEX_LIMIT <= d <= INDEX_LIMIT
                        and isinstance(s, Sym) and isinstance(t, Sym)):
                    return (((s, c), (t, d)) if _sym_key(s) <= _sym_key(t) else ((t, d), (s, c)), const)
        acc: dict = {}
        order = []
        for s, c in terms:
            if not isinstance(c, int) or isinstance(c, bool):
                raise IndexError_(f"affine coefficient must be an integer, got {c!r}")
            _check_index_int(c, "coefficient")
            if s not in acc:
                acc[s] = 0
                order.append(s)
            acc[s] += c
        items = tuple(sorted(((s, acc[s]) for s in order if acc[s] != 0), key=lambda t: _sym_key(t[0])))
        if not isinstance(const, int) or isinstance(const, bool):
            raise IndexError_(f"affine constant must be an integer, got {const!r}")
        _check_index_int(const, "constant")
        for _, c in items:
            _check_index_int(c, "coefficient")
        return (items, const)

    # -- construction ------------------------------------------------------
    def __add__(self, other):
        o = as_aff(other)
        return Aff(self.terms + o.terms, self.const + o.const)

    __radd__ = __add__

    def __neg__(self):
        return Aff(tuple((s, -c) for s, c in self.terms), -self.const)

    def __sub__(self, other):
        # one construction, not two (``self + (-other)``): the same canonical
        # terms, and the negated coefficients have the magnitudes ``other``
        # was already checked for
        o = as_aff(other)
        return Aff(self.terms + tuple((s, -c) for s, c in o.terms), self.const - o.const)

    def __rsub__(self, other):
        return as_aff(other) + (-self)

    def __mul__(self, other):
        if isinstance(other, Aff):
            if other.is_const:
                other = other.const
            elif self.is_const:
                return other * self.const
            else:
                raise IndexError_(
                    f"non-affine index: ({self}) * ({other}); an index may only be scaled by an integer"
                )
        if not isinstance(other, int) or isinstance(other, bool):
            raise IndexError_(f"non-affine index: ({self}) * {other!r}; an index may only be scaled by an integer")
        return Aff(tuple((s, c * other) for s, c in self.terms), self.const * other)

    __rmul__ = __mul__

    # Division, remainder and powers are not affine (rules 4.13-4.17 allow only
    # + and integer scaling): refuse them here with the reason, rather than let
    # Python report a missing operator.
    def _not_affine(self, other, op, reflected=False):
        lhs, rhs = (other, self) if reflected else (self, other)
        raise IndexError_(
            f"non-affine index: ({lhs}) {op} ({rhs}); indices are affine (+, -, and scaling by an integer), "
            f"so {op} is not allowed in an index. For a strided read write the stride into the "
            "extent instead, e.g. tl.gen(n, lambda i: x[2 * i]) over x of extent 2 * n"
        )

    def __floordiv__(self, other):
        self._not_affine(other, "//")

    def __rfloordiv__(self, other):
        self._not_affine(other, "//", True)

    def __truediv__(self, other):
        self._not_affine(other, "/")

    def __rtruediv__(self, other):
        self._not_affine(other, "/", True)

    def __mod__(self, other):
        self._not_affine(other, "%")

    def __rmod__(self, other):
        self._not_affine(other, "%", True)

    def __pow__(self, other):
        self._not_affine(other, "**")

    def __rpow__(self, other):
        self._not_affine(other, "**", True)

    def __divmod__(self, other):
        self._not_affine(other, "divmod")

    # -- predicates (rule 4.18); sugar > >= != --------------------------------
    def __lt__(self, other):
        return Cmp("<", self, as_aff(other))

    def __le__(self, other):
        return Cmp("<=", self, as_aff(other))

    def __gt__(self, other):
        return Cmp("<", as_aff(other), self)

    def __ge__(self, other):
        return Cmp("<=", as_aff(other), self)

    def __eq__(self, other):  # type: ignore[override]
        try:
            o = as_aff(other)
        except TensorLangError:
            return NotImplemented
        return Cmp("==", self, o)

    def __ne__(self, other):  # type: ignore[override]
        o = as_aff(other)
        return Or(Cmp("<", self, o), Cmp("<", o, self))

    __hash__ = Node.__hash__

    # -- queries -----------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def coeff(self, s: Sym) -> int:
        for t, c in self.terms:
            if t is s:
                return c
        return 0

    def syms(self) -> frozenset:
        return frozenset(s for s, _ in self.terms)

    def index_vars(self) -> frozenset:
        return frozenset(s for s, _ in self.terms if isinstance(s, IndexVar))

    def size_vars(self) -> frozenset:
        return frozenset(s for s, _ in self.terms if isinstance(s, SizeVar))

    def evaluate(self, env) -> int:
        """Rules 4.13-4.17: ``env`` maps IndexVar and SizeVar (or size names) to ints."""
        v = self.const
        for s, c in self.terms:
            if s in env:
                x = env[s]
            elif isinstance(s, SizeVar) and s.name in env:
                x = env[s.name]
            else:
                raise TensorLangError(f"unbound symbol {s!r} in index {self}")
            v += c * x
        return v

    def subst(self, mapping) -> "Aff":
        """Replace symbols by affine expressions (``mapping``: Sym -> Aff|int)."""
        if not any(s in mapping for s, _ in self.terms):
            return self
        # one construction: the terms gathered, merged and checked by _normalize
        terms, const = [], self.const
        for s, c in self.terms:
            if s in mapping:
                a = as_aff(mapping[s])
                terms.extend((t, k * c) for t, k in a.terms)
                const += a.const * c
            else:
                terms.append((s, c))
        return Aff(tuple(terms), const)



INDEX_LIMIT = 2**62  # kernels index in int64: larger coefficients could overflow


def _check_index_int(c: int, what: str) -> None:
    if abs(c) > INDEX_LIMIT:
        raise IndexError_(f"affine {what} {c} is too large: indices are 64-bit integers (|c| <= 2**62)")


def as_aff(x) -> Aff:
    """Coerce an int, symbol or affine expression to :class:`Aff`."""
    if isinstance(x, Aff):
        return x
    if isinstance(x, bool):
        raise IndexError_(f"a boolean is not an index: {x!r}")
    if isinstance(x, int):
        return Aff((), x)
    if isinstance(x, Sym):
        return Aff(((x, 1),), 0)
    if isinstance(x, _np.integer):
        return Aff((), int(x))
    if isinstance(x, Node) and not isinstance(x, (Pred, Type, Relation, Aff, Sym)):  # a value expression
        raise IndexError_(
            f"non-affine index: {describe(x)} is a value expression; indices must be affine "
            "in index and size variables (no indexing by data)"
        )
    raise IndexError_(f"not an affine index: {x!r} (expected an int, index or size variable)")


def sym_aff(s: Sym) -> Aff:
    # the interning table read directly (the constructor's normalization is
    # the identity on one unit term): passes ask for an index's affine form
    # per binder, per substitution and per renaming (issue #14 item 6)
    ref = _TABLE.get((Aff, ((s, 1),), 0))
    if ref is not None:
        a = ref()
        if a is not None:
            return a
    return Aff(((s, 1),), 0)


# --------------------------------------------------------------------------
# Predicates (Fig. 3 ``p``, Fig. 5)


class Pred(Node):
    __slots__ = ()

    def __and__(self, other):
        return And(self, as_pred(other))

    def __rand__(self, other):
        return And(as_pred(other), self)

    def __or__(self, other):
        return Or(self, as_pred(other))

    def __ror__(self, other):
        return Or(as_pred(other), self)

    def __bool__(self):
        raise TensorLangError(
            f"the predicate {self} has no Python truth value; use it in tl.iverson(pred, e)"
        )



def as_pred(p) -> Pred:
    if isinstance(p, Pred):
        return p
    if isinstance(p, bool):
        return TRUE if p else FALSE
    raise TensorLangError(f"expected a predicate, got {p!r}")


@node
class BoolLit(Pred):
    """``true`` / ``false`` (implicit in the paper, see the Note on Fig. 3)."""

    value: bool


TRUE = BoolLit(True)
FALSE = BoolLit(False)


@node
class Cmp(Pred):
    """``a0 op a1`` with op in ``<``, ``<=``, ``==`` (rule 4.18)."""

    op: str
    lhs: Aff
    rhs: Aff

    @classmethod
    def _normalize(cls, op, lhs, rhs):
        if op not in ("<", "<=", "=="):
            raise TensorLangError(f"unknown comparison {op!r}")
        return (op, as_aff(lhs), as_aff(rhs))


@node
class Relation(Node):
    """A declared relation (data predicate) ``R`` with its extents."""

    name: str
    extents: tuple  # tuple[Aff, ...]

    def __call__(self, *args):
        return Rel(self, tuple(as_aff(a) for a in args))

    def __repr__(self):
        return self.name


@node
class Rel(Pred):
    """``R(a0, ...)`` (rule 4.20)."""

    rel: Relation
    args: tuple  # tuple[Aff, ...]

    @classmethod
    def _normalize(cls, rel, args):
        args = tuple(as_aff(a) for a in args)
        if len(args) != len(rel.extents):
            raise TensorLangError(
                f"relation {rel.name} has arity {len(rel.extents)}, applied to {len(args)} indices"
            )
        return (rel, args)


@node
class And(Pred):
    lhs: Pred
    rhs: Pred


@node
class Or(Pred):
    lhs: Pred
    rhs: Pred


@node
class Exists(Pred):
    """``exists[i:n] p`` (rule 4.21)."""

    var: IndexVar
    extent: Aff
    body: Pred


def conj(*ps: Pred) -> Pred:
    """Conjunction with the literals folded away."""
    out: Pred = TRUE
    for p in ps:
        if p is FALSE or out is FALSE:
            return FALSE
        if p is TRUE:
            continue
        out = p if out is TRUE else And(out, p)
    return out


def conjuncts(p: Pred) -> list:
    """The parts of a conjunction, left to right (``conj`` inverted): ``TRUE`` has none."""
    if isinstance(p, And):
        return conjuncts(p.lhs) + conjuncts(p.rhs)
    return [] if p is TRUE else [p]


def disjuncts(p: Pred) -> list:
    """The parts of a disjunction, left to right; a predicate that is no ``Or`` is its one part."""
    if isinstance(p, Or):
        return disjuncts(p.lhs) + disjuncts(p.rhs)
    return [p]


def disj(*ps: Pred) -> Pred:
    out: Pred = FALSE
    for p in ps:
        if p is TRUE or out is TRUE:
            return TRUE
        if p is FALSE:
            continue
        out = p if out is FALSE else Or(out, p)
    return out


