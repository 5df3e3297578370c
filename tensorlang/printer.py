"""Printer in the paper's notation (RULES.md Section 0 and Figure 3).

``gen[i:n] e``, ``sum[i:n] e``, ``[p]·e``, ``let x = e0 in e1``,
``exists[i:n] p``, ``π0 e``; ``a - b`` for ``a + (-1)·b``, ``a / b`` for
``div(a, b)`` and ``x^k`` for ``pow[k](x)``.

Bound variables print with their plain names (``i``, ``j``, ``t``); a name
is decorated (``i'``, ``i''``, ``i3``, ...) only on a real clash: when the
plain name is already taken by a variable free in the binder's body (an
outer binder that the body refers to), by an input, or by a size.

The printer only prints: ``pretty(e)`` (and ``str(e)``, ``repr(e)``) show
the term as it is, running no pass.  ``tl.pretty(e)`` (``sharing.pretty``)
first makes sharing explicit: a sub-term that does work and is used more than
once in the DAG is printed once, as a ``let``.
"""

from __future__ import annotations

from .deep import deep

from .ir.expressions import Access, Add, Call, Const, Expr, Gen, Iverson, Let, Loop, Mul, Pair, Proj, Sum, Var
from .ir.indices import Aff, And, BoolLit, Cmp, Exists, IndexVar, Or, Pred, Rel, SizeVar
from .ir.nodes import Node
from .ir.scope import free_indices, free_vars, size_vars
from .ir.types import PairT, RealT, TensorT
from .ir.types_base import Type

# --------------------------------------------------------------------------
# Naming


class _Names:
    """Display names: a map from bound symbols to strings, plus the names
    that can never be reused (inputs, sizes)."""

    def __init__(self, names: dict, reserved: frozenset, limit: int | None = None, memo: dict | None = None):
        self.names = names
        self.reserved = reserved
        # one print's memo, shared by the scopes it opens: a sub-term shared in
        # the DAG is printed once per scope (the key holds the scope object);
        # ``limit``: texts are kept to their first limit + 1 characters (a
        # bounded print of a term whose tree is exponentially large)
        self.limit = limit
        self.memo = {} if memo is None else memo

    def of(self, s) -> str:
        got = self.names.get(s)
        if got is not None:
            return got
        match s:
            case SizeVar(name=n) | Var(name=n):
                return n
            case IndexVar(name=n):
                return n
        raise TypeError(f"not a symbol: {s!r}")

    def bind(self, s, body, *also) -> tuple["_Names", str]:
        """Name the binder ``s`` whose scope is ``body``: its plain name unless
        a variable free in ``body`` (other than ``s``) already prints so.
        ``also``: terms next to the scope whose free names would read as
        captured (a let's value: ``let t = t[i] in ...`` looks recursive)."""
        taken = set(self.reserved)
        for part in (body, *also):
            for x in _free_syms(part):
                if x is not s:
                    taken.add(self.of(x))
        name = _variant(s.name, taken)
        return _Names({**self.names, s: name}, self.reserved, self.limit, self.memo), name


def _free_syms(n) -> frozenset:
    if isinstance(n, (Expr, Pred)):
        return free_indices(n) | frozenset(v for v in free_vars(n) if v.uid != 0)
    if isinstance(n, Aff):
        return n.index_vars()
    return frozenset()


def _variant(base: str, taken: set) -> str:
    for cand in (base, base + "'", base + "''"):
        if cand not in taken:
            return cand
    k = 3
    while f"{base}{k}" in taken:
        k += 1
    return f"{base}{k}"


def _top_names(n) -> _Names:
    """Names for a node printed on its own: free symbols get their plain
    names, decorated only where two distinct free symbols share one."""
    reserved = set()
    if isinstance(n, (Expr, Pred, Aff, Type)):
        reserved |= {s.name for s in size_vars(n)}
    if isinstance(n, (Expr, Pred)):
        reserved |= {v.name for v in free_vars(n) if v.uid == 0}
    names: dict = {}
    taken = set(reserved)
    free = sorted(_free_syms(n), key=lambda s: (s.name, s.uid))
    for s in free:
        nm = _variant(s.name, taken)
        names[s] = nm
        taken.add(nm)
    return _Names(names, frozenset(reserved))


def free_symbol_names(n) -> dict:
    """The names the printer gives the free symbols of ``n`` (for messages
    that name them next to a printed term)."""
    return dict(_top_names(n).names)


# --------------------------------------------------------------------------
# Indices, predicates, types


def pretty_sym(s, env: _Names | None = None) -> str:
    """A size or index variable's printed name."""
    if env is None:
        env = _top_names(s) if isinstance(s, Node) and not isinstance(s, (SizeVar, IndexVar)) else _Names({}, frozenset())
    return env.of(s)


def pretty_aff(a: Aff, env: _Names | None = None) -> str:
    env = env or _top_names(a)
    parts: list[str] = []
    # index variables first, then sizes, then the constant: x[i - j + m - 1] as in the paper
    ordered = [t for t in a.terms if isinstance(t[0], IndexVar)] + [t for t in a.terms if not isinstance(t[0], IndexVar)]
    for s, c in ordered:
        name = env.of(s)
        if c == 1:
            t = name
        elif c == -1:
            t = "-" + name
        else:
            t = f"{c}·{name}"
        parts.append(t)
    if a.const or not parts:
        parts.append(str(a.const))
    out = parts[0]
    for t in parts[1:]:
        out += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
    return out


def pretty_pred(p, prec: int = 0, env: _Names | None = None) -> str:
    """Signature: pretty_pred : Pred -> str.  Precedence: 0 top, 1 ∨, 2 ∧, 3 atom."""
    env = env or _top_names(p)
    match p:
        case BoolLit(value=v):
            return "true" if v else "false"
        case Cmp(op=op, lhs=a, rhs=b):
            sym = {"<": "<", "<=": "≤", "==": "="}[op]
            return f"{pretty_aff(a, env)} {sym} {pretty_aff(b, env)}"
        case Rel(rel=r, args=args):
            return f"{r.name}({', '.join(pretty_aff(a, env) for a in args)})"
        case And(lhs=a, rhs=b):
            s = f"{pretty_pred(a, 2, env)} ∧ {pretty_pred(b, 2, env)}"
            return f"({s})" if prec > 2 else s
        case Or(lhs=a, rhs=b):
            s = f"{pretty_pred(a, 1, env)} ∨ {pretty_pred(b, 1, env)}"
            return f"({s})" if prec > 1 else s
        case Exists(var=i, extent=n, body=b):
            inner, name = env.bind(i, b)
            s = f"exists[{name}:{pretty_aff(n, env)}] {pretty_pred(b, 0, inner)}"
            return f"({s})" if prec > 0 else s
        case _:
            raise TypeError(f"not a predicate: {p!r}")


def pretty_type(t) -> str:
    match t:
        case RealT():
            return "ℝ"
        case PairT(fst=a, snd=b):
            return f"({pretty_type(a)} × {pretty_type(b)})"
        case TensorT(extent=n, elem=el):
            return f"[{pretty_aff(n)}]{pretty_type(el)}"
        case _:
            raise TypeError(f"not a type: {t!r}")


# --------------------------------------------------------------------------
# Expressions


@deep
def pretty(e, limit: int | None = None) -> str:
    """Signature: pretty : Node -> str (the paper's notation), the term as it is.

    ``limit``: only the text's first ``limit`` characters are needed (its
    first ``limit + 1`` are returned, so a caller sees that it goes on); the
    work is then linear in the distinct sub-terms however often they are
    shared (``describe`` in error messages, ``f"{e:.200}"``)."""
    if isinstance(e, Pred):
        return pretty_pred(e)
    if isinstance(e, Aff):
        return pretty_aff(e)
    if isinstance(e, Type):
        return pretty_type(e)
    if isinstance(e, (SizeVar, IndexVar)):
        return pretty_sym(e)
    if not isinstance(e, Expr):
        raise TypeError(f"not a tensorlang node: {e!r}")
    env = _top_names(e)
    env.limit = limit
    return _pretty(e, 0, env)


def formatted(e, spec: str) -> str:
    """``format(node, spec)``: ``".N"`` prints at most N characters (the
    last three "..." where the term goes on); any other spec formats the
    whole text as a string."""
    if spec.startswith(".") and spec[1:].isdigit() and int(spec[1:]) > 3:
        n = int(spec[1:])
        text = pretty(e, n) if isinstance(e, Expr) else pretty(e)
        return text if len(text) <= n else text[: n - 3] + "..."
    return format(pretty(e), spec)


def _is_neg(e) -> bool:
    return isinstance(e, Mul) and isinstance(e.lhs, Const) and e.lhs.value == -1


def _const(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# precedence: 0 let/gen/sum bodies, 1 '+', 2 '·' and '/', 3 postfix (access, ^)
def _pretty(e, prec: int, env: _Names) -> str:
    """Signature: _pretty : Expr x precedence x names -> str (a bounded print
    memoizes per scope; a whole print does not: its memo would keep every
    sub-term's text, quadratic in a long chain's length)."""
    if env.limit is None:
        return _pretty_node(e, prec, env)
    key = (e, prec, env)
    got = env.memo.get(key)
    if got is None:
        got = _pretty_node(e, prec, env)
        if env.limit is not None and len(got) > env.limit + 1:
            got = got[: env.limit + 1]  # the first characters of a text are those of its parts' first ones
        env.memo[key] = got
    return got


def _pretty_node(e, prec: int, env: _Names) -> str:
    match e:
        case Var():
            return env.of(e)
        case Const(value=v):
            s = _const(v)
            return f"({s})" if (prec >= 2 and s.startswith("-")) else s
        case Add(lhs=a, rhs=b):
            if _is_neg(b):
                s = f"{_pretty(a, 1, env)} - {_pretty(b.rhs, 2, env)}"
            else:
                s = f"{_pretty(a, 1, env)} + {_pretty(b, 1, env)}"
            return f"({s})" if prec > 1 else s
        case Mul(lhs=a, rhs=b):
            if _is_neg(e):
                s = f"-{_pretty(b, 2, env)}"
                return f"({s})" if prec >= 2 else s
            s = f"{_left_factor(a, env)}·{_pretty(b, 2, env)}"
            return f"({s})" if prec > 2 else s
        case Call(fn="div", args=(a, b)):
            s = f"{_left_factor(a, env)} / {_pretty(b, 3, env)}"
            return f"({s})" if prec > 2 else s
        case Call(fn=f, args=(a,)) if f.startswith("pow[") and f.endswith("]"):
            s = f"{_pretty(a, 4, env)}^{f[4:-1]}"
            return f"({s})" if prec > 3 else s
        case Call(fn=f, args=args):
            return f"{f}({', '.join(_pretty(a, 0, env) for a in args)})"
        case Pair(fst=a, snd=b):
            return f"({_pretty(a, 0, env)}, {_pretty(b, 0, env)})"
        case Proj(index=k, arg=a):
            s = f"π{k} {_pretty(a, 4, env)}"
            return f"({s})" if prec > 3 else s
        case Gen(var=i, extent=n, body=b) | Sum(var=i, extent=n, body=b):
            inner, name = env.bind(i, b)
            kw = "gen" if isinstance(e, Gen) else "sum"
            s = f"{kw}[{name}:{pretty_aff(n, env)}] {_pretty(b, 0, inner)}"
            return f"({s})" if prec > 0 else s
        case Access():
            base, idxs = e, []
            while isinstance(base, Access):
                idxs.append(base.index)
                base = base.arr
            return f"{_pretty(base, 4, env)}[{', '.join(pretty_aff(a, env) for a in reversed(idxs))}]"
        case Iverson(pred=p, body=b):
            s = f"[{pretty_pred(p, 0, env)}]·{_pretty(b, 2, env)}"
            return f"({s})" if prec > 2 else s
        case Let(var=v, value=e0, body=e1):
            inner, name = env.bind(v, e1, e0)
            s = f"let {name} = {_pretty(e0, 0, env)} in\n{_pretty(e1, 0, inner)}"
            return f"({s})" if prec > 0 else s
        case Loop(extent=n, init=e0, ivar=i, svar=v, body=b, checkpoint=ck):
            inner, tname = env.bind(i, b)
            inner, sname = inner.bind(v, b, e0)
            ckp = "" if ck == "all" else f", checkpoint={ck!r}"
            s = f"loop[{tname}:{pretty_aff(n, env)}{ckp}] ({sname} = {_pretty(e0, 0, env)}) {_pretty(b, 0, inner)}"
            return f"({s})" if prec > 0 else s
        case _:
            raise TypeError(f"not an expression: {e!r}")


def _left_factor(a, env: _Names) -> str:
    """A bracket on the left of a product is parenthesized: ``([p]·x)·y``
    (the bracket guards x only) reads differently from ``[p]·(x·y)``."""
    s = _pretty(a, 2, env)
    return f"({s})" if isinstance(a, Iverson) else s

