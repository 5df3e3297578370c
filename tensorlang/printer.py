"""Printer in the paper's notation (RULES.md Section 0).

``gen[i:n] e``, ``sum[i:n] e``, ``[p]·e``, ``let x = e0 in e1``,
``exists[i:n] p``, ``π0 e``.  ``pretty_program`` shows sharing: a sub-term
used more than once in the DAG is printed once as a ``let``.
"""

from __future__ import annotations

from .ir import (
    Access,
    Add,
    Aff,
    And,
    BoolLit,
    Call,
    Cmp,
    Const,
    Exists,
    Gen,
    IndexVar,
    Iverson,
    Let,
    Mul,
    Or,
    Pair,
    PairT,
    Proj,
    RealT,
    Rel,
    SizeVar,
    Sum,
    TensorT,
    Var,
)


def pretty_sym(s) -> str:
    match s:
        case SizeVar(name=n):
            return n
        case IndexVar(name=n, uid=u):
            return n if u < 0 else f"{n}{_sub(u)}"
        case _:
            raise TypeError(f"not a symbol: {s!r}")


_SUBS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _sub(u: int) -> str:
    return str(u).translate(_SUBS)


def pretty_aff(a: Aff) -> str:
    parts: list[str] = []
    for s, c in a.terms:
        name = pretty_sym(s)
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


def _paff(a: Aff) -> str:
    s = pretty_aff(a)
    return f"({s})" if (" " in s) else s


def pretty_pred(p, prec: int = 0) -> str:
    match p:
        case BoolLit(value=v):
            return "true" if v else "false"
        case Cmp(op=op, lhs=a, rhs=b):
            sym = {"<": "<", "<=": "≤", "==": "="}[op]
            return f"{pretty_aff(a)} {sym} {pretty_aff(b)}"
        case Rel(rel=r, args=args):
            return f"{r.name}({', '.join(pretty_aff(a) for a in args)})"
        case And(lhs=a, rhs=b):
            s = f"{pretty_pred(a, 2)} ∧ {pretty_pred(b, 2)}"
            return f"({s})" if prec > 2 else s
        case Or(lhs=a, rhs=b):
            s = f"{pretty_pred(a, 1)} ∨ {pretty_pred(b, 1)}"
            return f"({s})" if prec > 1 else s
        case Exists(var=i, extent=n, body=b):
            s = f"exists[{pretty_sym(i)}:{pretty_aff(n)}] {pretty_pred(b, 3)}"
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


def _var(v: Var) -> str:
    return v.name if v.uid <= 0 else f"{v.name}{_sub(v.uid)}"


# precedence: 0 let/gen/sum/bracket bodies, 1 '+', 2 '·', 3 postfix
def pretty(e, prec: int = 0, names: dict | None = None) -> str:
    """Signature: pretty : Expr -> str (the paper's notation)."""
    names = names or {}
    if e in names:
        return names[e]
    match e:
        case Var():
            return _var(e)
        case Const(value=v):
            s = repr(v) if isinstance(v, float) else str(v)
            return f"({s})" if (prec >= 2 and s.startswith("-")) else s
        case Add(lhs=a, rhs=b):
            s = f"{pretty(a, 1, names)} + {pretty(b, 1, names)}"
            return f"({s})" if prec > 1 else s
        case Mul(lhs=a, rhs=b):
            s = f"{pretty(a, 2, names)}·{pretty(b, 2, names)}"
            return f"({s})" if prec > 2 else s
        case Call(fn=f, args=args):
            return f"{f}({', '.join(pretty(a, 0, names) for a in args)})"
        case Pair(fst=a, snd=b):
            return f"({pretty(a, 0, names)}, {pretty(b, 0, names)})"
        case Proj(index=k, arg=a):
            return f"π{k} {pretty(a, 3, names)}"
        case Gen(var=i, extent=n, body=b):
            s = f"gen[{pretty_sym(i)}:{pretty_aff(n)}] {pretty(b, 0, names)}"
            return f"({s})" if prec > 0 else s
        case Sum(var=i, extent=n, body=b):
            s = f"sum[{pretty_sym(i)}:{pretty_aff(n)}] {pretty(b, 0, names)}"
            return f"({s})" if prec > 0 else s
        case Access():
            base, idxs = e, []
            while isinstance(base, Access):
                idxs.append(base.index)
                base = base.arr
            return f"{pretty(base, 3, names)}[{', '.join(pretty_aff(a) for a in reversed(idxs))}]"
        case Iverson(pred=p, body=b):
            s = f"[{pretty_pred(p)}]·{pretty(b, 2, names)}"
            return f"({s})" if prec > 2 else s
        case Let(var=v, value=e0, body=e1):
            s = f"let {_var(v)} = {pretty(e0, 0, names)} in\n{pretty(e1, 0, names)}"
            return f"({s})" if prec > 0 else s
        case _:
            raise TypeError(f"not an expression: {e!r}")


def pretty_type_of(e) -> str:
    from .typecheck import type_of

    return pretty_type(type_of(e))
