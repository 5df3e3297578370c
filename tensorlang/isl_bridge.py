"""Affine indices and predicates as isl sets; counting with barvinok.

The edge between the IR and isl (paper Section 4.3: affine predicates become
narrowed loop bounds, and the cost model counts the points where they hold).
Used by the symbolic cost model, by the simplifier (deciding predicates) and
by the backend (iteration domains).  Nothing else imports islpy: the modules
that build isl sets and ASTs themselves (``bounds``, ``cost_symbolic``, the
backend's domains, AST generation, separation and fusion) take the module
as ``isl`` from here (tests/system/test_layering.py checks this).

A *domain* is a list of binders ``[(IndexVar, extent), ...]`` (outermost
first) and a predicate over them; size variables become isl parameters.
Relations are data, not affine: callers choose how to treat them
(``rel="error"`` raises, ``rel="true"`` over-approximates them by true).
"""

from __future__ import annotations

import contextvars
import re
from contextlib import contextmanager
from functools import lru_cache

import islpy as isl

from .errors import UnsupportedError, describe
from .ir import Aff, And, BoolLit, Cmp, Exists, IndexVar, Or, Pred, Rel, SizeVar, free_indices, size_vars, walk



def param_name(s: SizeVar) -> str:
    """The isl parameter for size ``s``: isl reads only ASCII identifiers, so
    a non-ASCII name (``ñ``, a valid Python identifier) is spelled by its
    UTF-8 bytes in hex, under a prefix no ASCII name gets (``param_size``
    inverts it)."""
    if s.name.isascii():
        return f"p_{s.name}"
    return "pu_" + s.name.encode("utf-8").hex()


def param_size(pname: str) -> str:
    """The size name whose ``param_name`` is ``pname``."""
    if pname.startswith("pu_"):
        return bytes.fromhex(pname[3:]).decode("utf-8")
    return pname[2:]


class Names:
    """isl names for the symbols of one domain (dims by position, sizes as params)."""

    def __init__(self, dims, params):
        self.dims = list(dims)
        self.params = sorted(params, key=lambda s: s.name)
        self.map = {d: f"d{k}" for k, d in enumerate(self.dims)}
        self.map.update({p: param_name(p) for p in self.params})
        self._ex = 0

    def fresh_ex(self) -> str:
        self._ex += 1
        return f"e{self._ex}"

    def aff(self, a: Aff, local=None) -> str:
        parts = [str(a.const)]
        for s, c in a.terms:
            name = (local or {}).get(s) or self.map.get(s)
            if name is None:
                raise UnsupportedError(f"index {a} mentions {s!r}, which is not bound in this domain")
            parts.append(f"{c}*{name}")
        return "(" + " + ".join(parts) + ")"

    def pred(self, p: Pred, rel: str = "error", local=None) -> str:
        """Signature: pred : Pred -> isl constraint text."""
        match p:
            case BoolLit(value=v):
                return "(0 = 0)" if v else "(1 = 0)"
            case Cmp(op=op, lhs=a, rhs=b):
                o = {"<": "<", "<=": "<=", "==": "="}[op]
                return f"({self.aff(a, local)} {o} {self.aff(b, local)})"
            case And(lhs=a, rhs=b):
                return f"({self.pred(a, rel, local)} and {self.pred(b, rel, local)})"
            case Or(lhs=a, rhs=b):
                return f"({self.pred(a, rel, local)} or {self.pred(b, rel, local)})"
            case Exists(var=i, extent=n, body=b):
                e = self.fresh_ex()
                inner = {**(local or {}), i: e}
                return f"(exists ({e} : 0 <= {e} < {self.aff(n, local)} and {self.pred(b, rel, inner)}))"
            case Rel():
                if rel == "true":
                    return "(0 = 0)"
                raise UnsupportedError(f"the relation {describe(p)} is data, not an affine predicate")
            case _:
                raise UnsupportedError(f"not a predicate: {p!r}")

    def header(self) -> str:
        return "[" + ", ".join(param_name(p) for p in self.params) + "]"

    def tuple_(self) -> str:
        return "[" + ", ".join(self.map[d] for d in self.dims) + "]"


def domain_names(binders, pred: Pred, extra=()) -> Names:
    params = set(size_vars(pred))
    for _, n in binders:
        params |= n.size_vars()
    for x in extra:
        params |= size_vars(x)
    return Names([i for i, _ in binders], params)


# Decisions for derived programs assume every size >= 1 (a sum over an empty
# range has no terms to simplify).  A call with a size of 0 runs a program
# derived again inside ``sizes_may_be_zero()``, where every question is asked
# for sizes >= 0 (derived_program._Program; found by review: value_and_grad of
# ``Σ_i [n >= 1]·x_i`` at n = 0 returned Σ x).
_SIZES_MAY_BE_ZERO = contextvars.ContextVar("tensorlang_sizes_may_be_zero", default=False)


@contextmanager
def sizes_may_be_zero():
    """Within it, ``sizes_positive`` questions hold for every size >= 0."""
    token = _SIZES_MAY_BE_ZERO.set(True)
    try:
        yield
    finally:
        _SIZES_MAY_BE_ZERO.reset(token)


def positive_sizes(asked: bool = True) -> bool:
    """Are sizes >= 1 assumed for a question asked with ``sizes_positive=asked``?"""
    return asked and not _SIZES_MAY_BE_ZERO.get()


def domain_text(binders, pred: Pred, *, rel: str = "error", sizes_positive: bool = True, extra=()) -> tuple[str, Names]:
    """isl text of ``{ [i0..ik] : 0 <= i_j < n_j and p }`` with sizes as parameters."""
    names = domain_names(binders, pred, extra)
    cons = []
    for i, n in binders:
        cons.append(f"0 <= {names.map[i]} < {names.aff(n)}")
    cons.append(names.pred(pred, rel))
    if positive_sizes(sizes_positive):
        cons.extend(f"{param_name(p)} >= 1" for p in names.params)
    text = f"{names.header()} -> {{ {names.tuple_()} : {' and '.join(cons)} }}"
    return text, names


@lru_cache(maxsize=4096)
def _parse_set(text: str) -> isl.Set:
    return isl.Set(text)


def domain_set(binders, pred: Pred, *, rel: str = "error", sizes_positive: bool = True, extra=()) -> tuple[isl.Set, Names]:
    text, names = domain_text(binders, pred, rel=rel, sizes_positive=sizes_positive, extra=extra)
    return _parse_set(text), names


def count(binders, pred: Pred, *, rel: str = "error", outer: int = 0, sizes_positive: bool = True):
    """Symbolic number of points of the domain, as a sympy expression in the sizes.

    With ``outer = k`` the first ``k`` binders are kept as free symbols
    named like the index variables (a count per outer point).
    """
    s, names = domain_set(binders, pred, rel=rel, sizes_positive=sizes_positive)
    if outer:
        s = s.move_dims(isl.dim_type.param, len(names.params), isl.dim_type.set, 0, outer)
    return pwqp_to_sympy(s.card(), names)


def count_at(binders, pred: Pred, sizes: dict, *, rel: str = "error") -> int:
    """Number of points at concrete sizes (``sizes``: name -> int, any size >= 0).

    The sizes are fixed in the isl set before counting, so barvinok returns
    a constant (no symbolic count, no sympy)."""
    text, names = domain_text(binders, pred, rel=rel, sizes_positive=False)
    missing = [p.name for p in names.params if p.name not in sizes]
    if missing:
        raise UnsupportedError(f"size(s) {missing} have no value")
    return count_text_at(text, tuple(int(sizes[p.name]) for p in names.params))


@lru_cache(maxsize=65536)
def count_text_at(text: str, values: tuple) -> int:
    """Points of the isl set ``text`` with its parameters (in order) fixed to ``values``."""
    s = _parse_set(text)
    for k, v in enumerate(values):
        # through a string: isl's integers are unbounded, a C long is not
        s = s.fix_val(isl.dim_type.param, k, isl.Val(str(int(v))))
    total = 0
    for _, qp in s.card().get_pieces():
        total += int(qp.get_constant_val().to_python())
    return total


# Answers by the question's interned nodes: the simplifier asks one question
# several times per term (a third of the texts it built were repeats).  Keys
# hold their nodes; the table is emptied when it grows past MEMO_LIMIT.
MEMO_LIMIT = 1 << 16
_ANSWERS: dict = {}


def _lookup(key):
    try:
        return _ANSWERS.get(key)
    except TypeError:  # unhashable binders (lists): not remembered
        return None


def _remember(key, value):
    try:
        hash(key)
    except TypeError:
        return value
    if len(_ANSWERS) >= MEMO_LIMIT:
        _ANSWERS.clear()
    _ANSWERS[key] = value
    return value


def is_empty(binders, pred: Pred, *, rel: str = "true", sizes_positive: bool = True) -> bool:
    """Is ``pred`` false at every point for every size >= 1 (relations read as true)?"""
    key = ("empty", tuple(binders), pred, rel, positive_sizes(sizes_positive))
    got = _lookup(key)
    if got is not None:
        return got
    text, _ = domain_text(binders, pred, rel=rel, sizes_positive=sizes_positive)
    return _remember(key, _is_empty_text(text))


def implies(binders, p: Pred, q: Pred, *, sizes_positive: bool = True) -> bool:
    """Does ``p`` imply ``q`` on the domain for every size >= 1?  (Affine only.)"""
    key = ("implies", tuple(binders), p, q, positive_sizes(sizes_positive))
    got = _lookup(key)
    if got is not None:
        return got
    s, _ = domain_text(binders, p, sizes_positive=sizes_positive, extra=(q,))
    t, _ = domain_text(binders, q, sizes_positive=sizes_positive, extra=(p,))
    return _remember(key, _is_subset_text(s, t))


# The texts name dimensions by position and sizes by name, so one question
# asked about fresh copies of the same loops (a derivative asks it once per
# term of a long sum) is answered once.
@lru_cache(maxsize=65536)
def _is_empty_text(text: str) -> bool:
    return _parse_set(text).is_empty()


@lru_cache(maxsize=65536)
def _is_subset_text(s: str, t: str) -> bool:
    return _parse_set(s).is_subset(_parse_set(t))


# -- gist: a predicate relative to its context, back as a predicate -------------


def gist_forms(binders, context: Pred, p: Pred) -> tuple:
    """Affine predicates equivalent to ``p`` wherever the binders are in range,
    ``context`` holds and every size is >= 1, smallest first: isl's gist of
    ``p``'s points by that domain, coalesced before or after, read back as
    disjunctions of conjunctions of comparisons.  A form that needs integer
    divisions (a stride), which comparisons of affine indices cannot say,
    is left out; so is a repeated one.  The caller chooses (a smaller form
    may relate indices that ``p`` kept apart).

    Why (issues #14/#17): the supports of shifted reads compose in an adjoint,
    one disjunct per read and level, ``[i ≤ n-1 ∧ 0 ≤ i-1 ∧ i-1 < n ∨ 1 ≤ i+1 ∧
    0 ≤ i+1 ∧ i+1 < n]`` at the first level of a 3-point stencil; inside
    ``0 ≤ i < n`` that is ``[2 ≤ n]``."""
    s_text, names = domain_text(binders, p if _is_true(context) else And(context, p))
    c_text, _ = domain_text(binders, context, extra=(p,))
    back = {v: k for k, v in names.map.items()}
    own = {}
    dims = set(names.map)
    for c in _cmp_nodes(p):
        # only a comparison over the domain's own symbols: one under an exists may
        # mention its bound index even where it cancels (j = i + j - m + 1 says
        # i = m - 1), and out of its binder that index would be free
        if free_indices(c) <= dims:
            for key in _cmp_keys(c):
                own.setdefault(key, c)
    return tuple(_disj_all([_conj_all([_cmp(con, back, own) for con in piece]) for piece in form])
                 for form in _gist_rows(s_text, c_text))


def _cmp_nodes(p: Pred):
    return (x for x in walk(p) if isinstance(x, Cmp))  # each distinct comparison once


def _cmp_keys(c: Cmp) -> list:
    """``c`` as ``e >= 0`` / ``e = 0`` (both signs for an equality): the key a
    constraint read back from isl is matched with."""
    d = c.rhs - c.lhs
    if c.op == "<":
        d = d - 1
    keys = [(c.op == "==", d.terms, d.const)]
    if c.op == "==":
        keys.append((True, (-d).terms, -d.const))
    return keys


def _cmp(con, back: dict, own: dict) -> Cmp:
    """``pos - neg + const (>= 0 | = 0)`` with non-negative coefficients on each
    side; the predicate's own comparison when it says the same (the backend
    tells a bracket's atoms apart by node: ``1 ≤ i`` next to ``0 ≤ i - 1``
    would be one more boundary to separate)."""
    eq, terms, const = con
    d = Aff(tuple((back[nm], c) for nm, c in terms), const)
    got = own.get((eq, d.terms, d.const))
    if got is not None:
        return got
    pos = Aff(tuple((back[nm], c) for nm, c in terms if c > 0), 0)
    neg = Aff(tuple((back[nm], -c) for nm, c in terms if c < 0), 0)
    if eq:
        return Cmp("==", pos, neg - const) if const < 0 else Cmp("==", pos + const, neg)
    if const < 0 and neg.terms:
        return Cmp("<", neg + (-const - 1), pos)  # i < n, i + 1 < n
    if const < 0:
        return Cmp("<=", neg - const, pos)  # 2 ≤ n, 1 ≤ i
    return Cmp("<=", neg, pos + const)


def _is_true(p: Pred) -> bool:
    return isinstance(p, BoolLit) and p.value


def _conj_all(cs) -> Pred:
    out = None
    for c in cs:
        out = c if out is None else And(out, c)
    return BoolLit(True) if out is None else out


def _disj_all(ds) -> Pred:
    out = None
    for d in ds:
        if _is_true(d):
            return d
        out = d if out is None else Or(out, d)
    return BoolLit(False) if out is None else out


@lru_cache(maxsize=16384)
def _gist_rows(s_text: str, c_text: str) -> tuple:
    """The gists of set ``s`` in ``c`` (coalesced before, and after), each as
    rows (one per basic set) of constraints ``(is_equality, ((name, coeff),
    ...), const)``, fewest constraints first: names by position, so one
    question about fresh copies of the same loops is answered once."""
    s, c = _parse_set(s_text), _parse_set(c_text)
    forms = []
    for g in (s.coalesce().gist(c).coalesce(), s.gist(c).coalesce()):
        rows = []
        for bs in g.get_basic_sets():
            if bs.dim(isl.dim_type.div):
                rows = None
                break
            row = []
            for con in bs.get_constraints():
                terms, const = [], 0
                for key, val in con.get_coefficients_by_name().items():
                    v = int(val.to_python())
                    if key == 1:
                        const = v
                    elif v:
                        terms.append((key, v))
                if terms:
                    row.append((con.is_equality(), tuple(sorted(terms)), const))
                elif (const != 0) if con.is_equality() else (const < 0):
                    row = None  # an unsatisfiable constant constraint: the piece is empty
                    break
            if row is not None:
                rows.append(tuple(row))
        if rows is not None and tuple(rows) not in forms:
            forms.append(tuple(rows))
    return tuple(sorted(forms, key=lambda f: sum(map(len, f)) + len(f)))


# -- PwQPolynomial -> sympy ----------------------------------------------------


def _sympy():
    """sympy, imported by the first symbolic count: the access-bounds proofs of a
    float program never need it, and it is most of ``import tensorlang``'s time."""
    import sympy

    return sympy


_SYMS: dict = {}


def size_symbol(name: str) -> "sympy.Symbol":
    s = _SYMS.get(name)
    if s is None:
        s = _SYMS[name] = _sympy().Symbol(name, integer=True)
    return s


def _locals(names: Names) -> dict:
    loc = {"floor": _sympy().floor}
    for p in names.params:
        loc[param_name(p)] = size_symbol(p.name)
    for k, d in enumerate(names.dims):
        loc[f"d{k}"] = _sympy().Symbol(repr(d), integer=True)
    return loc


_BODY = re.compile(r"\{\s*(.*?)\s*\}\s*$", re.S)


def _parse_poly(text: str, loc: dict):
    m = _BODY.search(text)
    body = m.group(1) if m else text
    if ":" in body:
        body = body.split(":", 1)[0]
    body = body.replace("^", "**")
    return _sympy().sympify(body, locals=loc) if body.strip() else _sympy().Integer(0)


def _constraint(c, loc: dict):
    """An isl constraint as a sympy relation, integer divisions included
    (``(1 + n) mod 2 = 0`` is ``-1 - n + 2*floor((1 + n)/2) = 0``)."""
    expr = _sympy().Integer(0)
    for key, val in c.get_coefficients_by_name().items():
        v = _sympy().Rational(str(val))
        if key == 1:
            expr += v
        elif isinstance(key, str):
            expr += v * loc[key]
    for k in range(c.get_local_space().dim(isl.dim_type.div)):
        v = _sympy().Rational(str(c.get_coefficient_val(isl.dim_type.div, k)))
        if v:
            expr += v * _sympy().floor(_parse_div(str(c.get_div(k)), loc))
    return _sympy().Eq(expr, 0) if c.is_equality() else (expr >= 0)


def _parse_div(text: str, loc: dict):
    """``[n] -> { [(1 + n)/2] }`` -> ``(1 + n)/2`` (the caller applies the floor)."""
    m = re.search(r"\{\s*\[(.*)\]\s*\}", text, re.S)
    body = m.group(1) if m else text
    return _sympy().sympify(body.replace("^", "**"), locals=loc)


def pwqp_to_sympy(pw: isl.PwQPolynomial, names: Names):
    """A piecewise quasi-polynomial as a sympy expression (Piecewise when needed).
    Outside every piece the count is 0."""
    loc = _locals(names)
    # parameters moved in from set dims keep isl names like d0; map them too
    pieces = []
    for dom, qp in pw.get_pieces():
        val = _parse_poly(str(qp), loc)
        conds = []
        for bs in dom.get_basic_sets():
            conds.append(_sympy().And(*[_constraint(c, loc) for c in bs.get_constraints()]))
        pieces.append((val, _sympy().Or(*conds)))
    if not pieces:
        return _sympy().Integer(0)
    if len(pieces) == 1 and pieces[0][1] is _sympy().true:
        return _sympy().expand(pieces[0][0])
    return _sympy().Piecewise(*[(_sympy().expand(v), c) for v, c in pieces], (0, True))



