"""Explicit sharing: a sub-term used more than once becomes a ``let``.

Hash-consing makes ``y = tl.gen(...); ... y[i] ... y[i+1]`` one node used
twice.  The paper's cost model (Fig. 6) charges a term at each occurrence, so
before costing or normalizing, every repeated sub-term that does arithmetic is
bound once by a ``let`` placed at its *home*: just inside the innermost binder
(gen, sum or let) of its free variables, or at the top when it is closed.
The user computed it once; the IR now says so.
"""

from __future__ import annotations

from .ir import (
    Add,
    Call,
    Expr,
    Gen,
    Let,
    Mul,
    Node,
    Sum,
    children,
    free_indices,
    free_vars,
    fresh_var,
    meta,
    rebuild,
)
from .typecheck import type_of


def has_work(e: Expr) -> bool:
    """Does the term contain arithmetic the cost model counts?"""
    m = meta(e)
    w = m.get("work")
    if w is None:
        if isinstance(e, (Add, Mul, Call, Sum)):
            w = True
        else:
            w = any(has_work(c) for c in _expr_children(e))
        m["work"] = w
    return w


def _expr_children(e):
    for c in children(e):
        if isinstance(c, Expr):
            yield c
        elif isinstance(c, tuple):
            yield from (x for x in c if isinstance(x, Expr))


def _size(e: Expr) -> int:
    m = meta(e)
    s = m.get("size")
    if s is None:
        s = 1 + sum(_size(c) for c in _expr_children(e))
        m["size"] = s
    return s


def shared_terms(e: Expr) -> list:
    """Sub-terms with more than one parent edge in the DAG that do work."""
    uses: dict = {}
    seen = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        for c in _expr_children(x):
            uses[c] = uses.get(c, 0) + 1
            stack.append(c)
    return [x for x, k in uses.items() if k > 1 and has_work(x)]


def explicit_sharing(e: Expr) -> Expr:
    """Signature: explicit_sharing : Expr -> Expr, denotation unchanged;
    afterwards no sub-term that does work has two parents."""
    m = meta(e)
    got = m.get("shared")
    if got is not None:
        return got
    out = e
    for _ in range(100):  # binding a term can expose sharing inside let values
        shared = shared_terms(out)
        if not shared:
            break
        out = _bind(out, set(shared))
    meta(out)["shared"] = out
    m["shared"] = out
    return out


def _bind(e: Expr, shared: set) -> Expr:
    inputs = free_vars(e)
    outer_fi = free_indices(e)

    def homed(candidates, bound_v, bound_i, var):
        out = []
        for s in candidates:
            fv = free_vars(s) - inputs
            fi = free_indices(s) - outer_fi
            if var is None:
                if not fv and not fi:
                    out.append(s)
            elif (var in fv or var in fi) and fv <= bound_v | {var} and fi <= bound_i | {var}:
                out.append(s)
        return out

    def occurs(body: Expr) -> list:
        found, seen, stack = [], set(), [body]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if x in shared:
                found.append(x)
            stack.extend(_expr_children(x))
        return found

    memo: dict = {}

    def wrap(body: Expr, bound_v, bound_i, var) -> Expr:
        here = sorted(homed(occurs(body), bound_v, bound_i, var), key=_size)
        if not here:
            return go(body, bound_v, bound_i)
        repl: dict = {}
        binds = []
        for s in here:
            v = fresh_var("t", type_of(s))
            binds.append((v, _replace(s, repl)))
            repl[s] = v
        new_body = go(_replace(body, repl), bound_v, bound_i)
        for v, val in reversed(binds):
            new_body = Let(v, go(val, bound_v, bound_i), new_body)
        return new_body

    def go(x: Expr, bound_v, bound_i) -> Expr:
        key = (x, bound_v, bound_i)
        if key in memo:
            return memo[key]
        match x:
            case Gen(var=i, extent=n, body=b) | Sum(var=i, extent=n, body=b):
                out = type(x)(i, n, wrap(b, bound_v, bound_i | {i}, i))
            case Let(var=v, value=e0, body=e1):
                out = Let(v, go(e0, bound_v, bound_i), wrap(e1, bound_v | {v}, bound_i, v))
            case _:
                out = rebuild(x, tuple(_go_child(c, bound_v, bound_i) for c in children(x)))
        memo[key] = out
        return out

    def _go_child(c, bound_v, bound_i):
        if isinstance(c, Expr):
            return go(c, bound_v, bound_i)
        if isinstance(c, tuple):
            return tuple(go(y, bound_v, bound_i) if isinstance(y, Expr) else y for y in c)
        return c

    return wrap(e, frozenset(), frozenset(), None)


def _replace(e: Node, repl: dict) -> Node:
    """Replace sub-terms by identity (a DAG rewrite; no binder is crossed
    that could capture, because replaced terms are replaced by fresh vars)."""
    if not repl:
        return e
    memo: dict = {}

    def go(x):
        if x in repl:
            return repl[x]
        if not isinstance(x, Expr):
            return x
        got = memo.get(x)
        if got is None:
            got = rebuild(x, tuple(go(c) if isinstance(c, Expr) else (tuple(go(y) for y in c) if isinstance(c, tuple) else c) for c in children(x)))
            memo[x] = got
        return got

    return go(e)
