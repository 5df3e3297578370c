"""Kernel IR: typed, frozen expression nodes of a kernel (paper Section 4.3).

Everything a kernel computes is one of these nodes; the loop IR
(``loopir.py``) holds them and ``codegen.py`` prints Python only at the very
end.  No decision is ever taken on source text: the lowering tests node
types and values (``is_zero(e)``, not ``code == "0.0"``).

Three sorts, by the value they denote:

* integer (index) expressions: :class:`Int`, :class:`Name`, :class:`IBin`,
  :class:`MinMax`, :class:`Select`, :class:`Load` of an int64 array;
* booleans: :class:`Bool`, :class:`Cmp`, :class:`BoolOp`, :class:`Load` of a
  bool array, a boolean :class:`Name`;
* floats (the kernel's real type, float64 or float32): :class:`Float`,
  :class:`Name`, :class:`Load`, :class:`FSum` (n-ary, so a sum of thousands
  of terms is one flat node), :class:`FMul`, :class:`FDiv`, :class:`FNeg`,
  :class:`FPow`, :class:`FCall`.

Names come only from :class:`NameAllocator`: ``<letter><number>`` with a
letter per role, never user text, so no user name can reach the source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

# Integers a kernel computes with are int64; sizes are bounded at call time
# (``MAX_SIZE``) so every literal isl leaves in a kernel fits.
INT64_MAX = (1 << 63) - 1


class KExpr:
    """Base of kernel-IR expressions (frozen dataclasses below)."""

    __slots__ = ()


@dataclass(frozen=True)
class Int(KExpr):
    value: int


@dataclass(frozen=True)
class Bool(KExpr):
    value: bool


@dataclass(frozen=True)
class Float(KExpr):
    """A real constant, exact: printed as ``F(repr(value))`` (``F`` the kernel's
    float type), ``F(np.inf)``, ``F(np.nan)``."""

    value: float

    def __post_init__(self):
        if not isinstance(self.value, float):
            raise TypeError("Float holds a Python float")


@dataclass(frozen=True)
class Name(KExpr):
    """A kernel argument or local (allocator-made)."""

    name: str


@dataclass(frozen=True)
class IBin(KExpr):
    """Integer ``lhs op rhs``; ``op`` in + - * // %."""

    op: str
    lhs: KExpr
    rhs: KExpr


@dataclass(frozen=True)
class MinMax(KExpr):
    fn: str  # 'min' | 'max'
    args: tuple


@dataclass(frozen=True)
class Select(KExpr):
    """``then if test else orelse`` (isl's conditional expressions)."""

    test: KExpr
    then: KExpr
    orelse: KExpr


@dataclass(frozen=True)
class Cmp(KExpr):
    op: str  # < <= == >= >
    lhs: KExpr
    rhs: KExpr


@dataclass(frozen=True)
class BoolOp(KExpr):
    """Short-circuit ``and``/``or``: later operands may rely on earlier ones
    (a range test guards a table lookup)."""

    op: str  # 'and' | 'or'
    args: tuple


@dataclass(frozen=True)
class Load(KExpr):
    """``array[index...]``; ``unsigned``: indices proven in bounds (printed
    through ``U``, sparing Numba's negative-index test)."""

    array: str
    index: tuple
    unsigned: bool = True


@dataclass(frozen=True)
class FSum(KExpr):
    terms: tuple


@dataclass(frozen=True)
class FMul(KExpr):
    lhs: KExpr
    rhs: KExpr


@dataclass(frozen=True)
class FDiv(KExpr):
    lhs: KExpr
    rhs: KExpr


@dataclass(frozen=True)
class FNeg(KExpr):
    arg: KExpr


@dataclass(frozen=True)
class FPow(KExpr):
    """``base ** exponent`` with NumPy's semantics for every real exponent."""

    base: KExpr
    exponent: float


@dataclass(frozen=True)
class FCall(KExpr):
    """A scalar function: ``fn`` is a NumPy ufunc name (``'exp'``) or an
    allocator name bound to a compiled user function in the module header."""

    fn: str
    args: tuple
    numpy: bool = True


# -- traversal: the one walk over a node's sub-expressions ---------------------------------------

_FIELDS: dict = {}  # node class -> its field names (``dataclasses.fields`` rebuilds them per call)


def field_names(cls) -> tuple:
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return got


def children(e) -> tuple:
    """The direct sub-expressions of ``e``, in field order (a tuple field's in its order)."""
    out = []
    for f in field_names(type(e)):
        x = getattr(e, f)
        if isinstance(x, KExpr):
            out.append(x)
        elif isinstance(x, tuple):
            out.extend(y for y in x if isinstance(y, KExpr))
    return tuple(out)


def map_children(e, fn):
    """``e`` with each direct sub-expression ``c`` replaced by ``fn(c)``; ``e`` itself
    when none changes (nodes are frozen: sharing them is safe)."""
    if isinstance(e, (Int, Bool, Float, Name)):
        return e
    kw = {}
    for f in field_names(type(e)):
        x = getattr(e, f)
        if isinstance(x, KExpr):
            y = fn(x)
            if y is not x:
                kw[f] = y
        elif isinstance(x, tuple) and any(isinstance(v, KExpr) for v in x):
            y = tuple(fn(v) if isinstance(v, KExpr) else v for v in x)
            if any(a is not b for a, b in zip(y, x)):
                kw[f] = y
    return replace(e, **kw) if kw else e


def map_up(e, fn):
    """``e`` (or a tuple of expressions) rebuilt children first: ``fn(node)`` of each
    rebuilt node gives its replacement, or None to keep it."""
    if isinstance(e, tuple):
        return tuple(map_up(x, fn) for x in e)
    if not isinstance(e, KExpr):
        return e
    e = map_children(e, lambda c: map_up(c, fn))
    got = fn(e)
    return e if got is None else got


def map_down(e, fn):
    """``e`` rebuilt from the root: where ``fn(node)`` gives a replacement it is taken
    as it is (its insides not visited), else the node's children are visited."""
    if isinstance(e, tuple):
        return tuple(map_down(x, fn) for x in e)
    if not isinstance(e, KExpr):
        return e
    got = fn(e)
    return map_children(e, lambda c: map_down(c, fn)) if got is None else got


def substitute(e, sub: dict):
    """``e`` with each ``Name(n)``, ``n`` in ``sub``, read as the expression ``sub[n]``."""
    return map_up(e, lambda x: sub.get(x.name) if isinstance(x, Name) else None)


def is_const(e: KExpr, v: float) -> bool:
    return isinstance(e, Float) and e.value == v and not (v == 0 and math.copysign(1, e.value) < 0)


def int_add(a: KExpr, b: KExpr) -> KExpr:
    if isinstance(b, Int) and b.value == 0:
        return a
    if isinstance(a, Int) and a.value == 0:
        return b
    if isinstance(b, Int) and b.value < 0:
        return IBin("-", a, Int(-b.value))
    return IBin("+", a, b)


def sum_of(terms) -> KExpr:
    """Exact simplifications only: ``0 + x = x``; a sum as the *first* term
    flattens (``(a + b) + c`` is Python's ``a + b + c``: the same order of
    additions, so the same rounding); a later one stays a parenthesised term."""
    out = []
    for k, t in enumerate(terms):
        if isinstance(t, FSum) and not out:
            out.extend(t.terms)
        elif not is_const(t, 0.0):
            out.append(t)
    if not out:
        return Float(0.0)
    return out[0] if len(out) == 1 else FSum(tuple(out))


def mul_of(a: KExpr, b: KExpr) -> KExpr:
    """Exact simplifications only: ``1·x = x``, ``-1·x = -x``."""
    if is_const(a, 1.0):
        return b
    if is_const(b, 1.0):
        return a
    if is_const(a, -1.0):
        return FNeg(b)
    if is_const(b, -1.0):
        return FNeg(a)
    return FMul(a, b)


def and_of(parts) -> KExpr:
    out = []
    for p in parts:
        if isinstance(p, Bool):
            if not p.value:
                return Bool(False)
            continue
        out.extend(p.args if isinstance(p, BoolOp) and p.op == "and" else [p])
    if not out:
        return Bool(True)
    return out[0] if len(out) == 1 else BoolOp("and", tuple(out))


def or_of(parts) -> KExpr:
    out = []
    for p in parts:
        if isinstance(p, Bool):
            if p.value:
                return Bool(True)
            continue
        out.extend(p.args if isinstance(p, BoolOp) and p.op == "or" else [p])
    if not out:
        return Bool(False)
    return out[0] if len(out) == 1 else BoolOp("or", tuple(out))


def depth(e: KExpr) -> int:
    """Nesting depth of float arithmetic (what temporaries must bound)."""
    match e:
        case FSum(terms=ts):
            return 1 + max(depth(t) for t in ts)
        case FMul(lhs=a, rhs=b) | FDiv(lhs=a, rhs=b):
            return 1 + max(depth(a), depth(b))
        case FNeg(arg=a) | FPow(base=a):
            return 1 + depth(a)
        case FCall(args=args):
            return 1 + max((depth(a) for a in args), default=0)
        case _:
            return 1


def evaluate_int(e: KExpr, env: dict) -> int:
    """Value of an integer/boolean expression under ``env`` (name -> int):
    for tests that check loop bounds against hand formulas."""
    match e:
        case Int(value=v) | Bool(value=v):
            return v
        case Name(name=n):
            return env[n]
        case IBin(op=op, lhs=a, rhs=b):
            x, y = evaluate_int(a, env), evaluate_int(b, env)
            return {"+": x + y, "-": x - y, "*": x * y, "//": x // y if y else 0, "%": x % y if y else 0}[op]
        case MinMax(fn=f, args=args):
            return (min if f == "min" else max)(evaluate_int(a, env) for a in args)
        case Select(test=t, then=a, orelse=b):
            return evaluate_int(a, env) if evaluate_int(t, env) else evaluate_int(b, env)
        case Cmp(op=op, lhs=a, rhs=b):
            x, y = evaluate_int(a, env), evaluate_int(b, env)
            return {"<": x < y, "<=": x <= y, "==": x == y, ">=": x >= y, ">": x > y}[op]
        case BoolOp(op=op, args=args):
            vals = (evaluate_int(a, env) for a in args)
            return all(vals) if op == "and" else any(vals)
    raise TypeError(f"not an integer kernel expression: {e!r}")


class NameAllocator:
    """The one source of names in a kernel: ``<letter><k>``, one letter per role.

    Roles: ``n`` sizes, ``x`` input arrays and scalars, ``r`` relations (with
    suffixes ``_p<L>``, ``_c<k>``, ``_d``), ``t`` arrays the kernel allocates,
    ``v`` scalar locals, ``i`` loop indices, ``u`` compiled user functions.
    No letter is ``c`` or ``e`` (isl's own iterator and existential names)
    and no name equals a module-level name of the generated source (``np``,
    ``numba``, ``prange``, ``U``, ``F``).
    """

    ROLES = {"size": "n", "input": "x", "relation": "r", "array": "t", "local": "v", "index": "i", "function": "u"}

    def __init__(self):
        self._count: dict = {}

    def new(self, role: str) -> str:
        letter = self.ROLES[role]
        k = self._count.get(letter, 0)
        self._count[letter] = k + 1
        return f"{letter}{k}"
