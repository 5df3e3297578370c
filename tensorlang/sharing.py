"""Explicit sharing: what the user computed once becomes a ``let``.

Hash-consing makes ``y = tl.gen(...); ... y[i] ... y[i+1]`` one node used
twice, and ``y = tl.gen(...); tl.sum(n, lambda i: y[i] ...)`` one tensor
indexed inside a loop.  The paper's cost model (Fig. 6, rules 4.22-4.34)
charges a term at each occurrence and each loop iteration, so before costing
or normalizing two kinds of sub-terms are bound once by a ``let``:

* a sub-term that does arithmetic and has more than one parent in the DAG;
* a tensor-valued sub-term that does arithmetic and sits inside a ``gen`` or
  ``sum`` whose index it does not depend on (an intermediate tensor indexed
  in a loop: the evaluator builds it once, so the cost model must too).

The ``let`` goes at the term's *home*: just inside the innermost binder (gen,
sum or let) of its free variables, or at the top when it is closed.  Moving a
term out of Iverson brackets could evaluate an access the bracket guarded
(``[0 ≤ i - 1]·x[i - 1]``), so the bound value keeps the brackets it was
under: ``let t = [g]·s``, where ``g`` says "some occurrence of ``s`` is
evaluated" (the guards on the paths to it, with the loop indices between the
home and the occurrence existentially quantified).  Only where some
occurrence is unguarded (``g`` is ``true``) is no bracket added.  The guard
stays even when ``s`` could be evaluated anywhere without an out-of-range
access: rule 4.32 charges a let's value in full, so an unguarded value under
a false bracket would be charged work the evaluator skips (4.33), and the
pass would not be cost-neutral (Section 5, ``c·$⟦e⟧ ≥ $⟦γ(e)⟧`` with c = 1).
"""

from __future__ import annotations

import weakref

from .deep import deep
from .ir import (
    FALSE,
    TRUE,
    Access,
    Add,
    Call,
    Const,
    Exists,
    Expr,
    Gen,
    Iverson,
    Let,
    Mul,
    Node,
    Sum,
    TensorT,
    Var,
    children,
    conj,
    disj,
    free_indices,
    free_vars,
    fresh_index,
    fresh_var,
    rebuild,
    subst,
    sym_aff,
)
from .typecheck import iverson
from .printer import pretty as _print
from .typecheck import type_of


# This module's memos, keyed by the interned node (issue #14 item 4: each
# pass owns its memo; an entry goes with its node).  A fact here is a
# function of the node alone, so an identical node built elsewhere shares it.
_WORK: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SIZE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # e -> explicit_sharing(e), or _SAME
_SAME = object()  # explicit_sharing(e) is e (a strong self-reference would keep e alive)


def has_work(e: Expr) -> bool:
    """Does the term contain arithmetic the cost model counts?"""
    w = _WORK.get(e)
    if w is None:
        if isinstance(e, (Add, Mul, Call, Sum)):
            w = True
        else:
            w = any(has_work(c) for c in _expr_children(e))
        _WORK[e] = w
    return w


def _expr_children(e):
    for c in children(e):
        if isinstance(c, Expr):
            yield c
        elif isinstance(c, tuple):
            yield from (x for x in c if isinstance(x, Expr))


def _size(e: Expr) -> int:
    s = _SIZE.get(e)
    if s is None:
        s = _SIZE[e] = 1 + sum(_size(c) for c in _expr_children(e))
    return s


def shared_terms(e: Expr) -> list:
    """Sub-terms with more than one parent edge in the DAG that do work."""
    # (the loop of _binder_free_children inlined: a generator per node was
    # most of this scan, which simplify runs on every round of a long
    # derivative, issue #14 item 6.)  A node is expanded when first counted,
    # so no set of visited nodes is kept (the DAG is acyclic: the root is
    # nobody's child); variables and constants are neither counted nor
    # visited: they do no work and have no children (a let's bound variable
    # is one, never a use).  The list is in no particular order (its callers
    # read it as a set).
    uses: dict = {}
    stack = [e]
    pop, push, get = stack.pop, stack.append, uses.get
    leaf = _LEAVES
    while stack:
        x = pop()
        for c in x._children(x):
            for y in (c if isinstance(c, tuple) else (c,)):
                if not isinstance(y, Expr) or isinstance(y, leaf) or (type(y) is Access and isinstance(y.arr, leaf)):
                    continue  # (a read of a variable: no work, nothing below but the variable)
                k = get(y)
                if k is None:
                    uses[y] = 1
                    push(y)
                else:
                    uses[y] = k + 1
    return [x for x, k in uses.items() if k > 1 and has_work(x)]


_LEAVES = (Var, Const)  # no work, no children (a let's bound variable is one: never a use)


def _binder_free_children(x):
    """Expression children, except the variable a ``let`` binds (not a use)."""
    for c in _expr_children(x):
        if isinstance(x, Let) and c is x.var:
            continue
        yield c


def invariant_tensors(e: Expr) -> list:
    """Tensor-valued sub-terms that do work and occur inside a gen or sum
    whose index they do not depend on (loop-invariant intermediate tensors).

    A term is invariant where its innermost enclosing gen/sum does not bind
    one of its indices and no let between that loop and the term binds one of
    its variables.  So the context of a visit is just (innermost loop, lets
    since it), interned as one small object: a long let chain costs one step
    per let, not a copy of the binder path per let (which made this
    quadratic in the adjoint's let blocks)."""
    found: dict = {}
    seen: set = set()
    interned: dict = {}
    since_loop: dict = {}  # let variables bound since the innermost loop -> how often

    def intern(key):
        c = interned.get(key)
        if c is None:
            c = interned[key] = object()
        return c

    def invariant(x, loop) -> bool:
        if loop.var in free_indices(x):
            return False
        fv = free_vars(x)
        small, big = (since_loop, fv) if len(since_loop) < len(fv) else (fv, since_loop)
        return not any(v in big for v in small)

    def go(x, loop, ctx):
        key = (x, ctx)
        if key in seen:
            return
        seen.add(key)
        if loop is not None and has_work(x) and isinstance(type_of(x), TensorT) and invariant(x, loop):
            found[x] = None
        match x:
            case Gen(body=b) | Sum(body=b):
                nonlocal since_loop
                saved, since_loop = since_loop, {}
                go(b, x, intern((x,)))
                since_loop = saved
            case Let(var=v, value=e0, body=e1):
                go(e0, loop, ctx)
                if loop is None:  # no loop yet: nothing is invariant, lets do not matter
                    go(e1, None, None)
                else:
                    since_loop[v] = since_loop.get(v, 0) + 1
                    go(e1, loop, intern((ctx, x)))
                    if since_loop[v] == 1:
                        del since_loop[v]
                    else:
                        since_loop[v] -= 1
            case _:
                for c in _expr_children(x):
                    go(c, loop, ctx)

    go(e, None, None)
    return list(found)


@deep  # its walks recurse once per nesting level (a 10,000-term chain)
def explicit_sharing(e: Expr) -> Expr:
    """Signature: explicit_sharing : Expr -> Expr, denotation unchanged;
    afterwards no sub-term that does work has two parents and no
    tensor that does work is rebuilt by a loop that does not need to."""
    got = _SHARED.get(e)
    if got is not None:
        return e if got is _SAME else got
    out = e
    # Binding a term can expose sharing inside let values, hence the loop.  A
    # term is bound at most once: a binder symbol reused by two binders (the
    # derivative passes copy gen[i] into the differential) gives the term two
    # homes, and it stays "shared" after both are bound.
    attempted: set = set()
    for _ in range(100):
        todo = (set(shared_terms(out)) | set(invariant_tensors(out))) - attempted
        if not todo:
            break
        attempted |= todo
        out = _bind(out, todo)
    _SHARED[out] = _SAME
    if out is not e:
        _SHARED[e] = out
    return out


def needed(body: Expr, s: Expr):
    """Signature: needed : Expr x Expr -> Pred.  Where, in the scope of
    ``body``, some occurrence of ``s`` inside ``body`` is evaluated: the
    Iverson guards on the path, with gen/sum indices between existentially
    quantified (renamed apart), ``true`` if an occurrence is unguarded."""
    memo: dict = {}
    contains_memo: dict = {}

    def contains(x) -> bool:
        if x is s:
            return True
        got = contains_memo.get(x)
        if got is None:
            got = any(contains(c) for c in _binder_free_children(x))
            contains_memo[x] = got
        return got

    def go(x):
        if x is s:
            return TRUE
        if not contains(x):
            return FALSE
        got = memo.get(x)
        if got is not None:
            return got
        match x:
            case Iverson(pred=p, body=b):
                out = conj(p, go(b))
            case Gen(var=i, extent=n, body=b) | Sum(var=i, extent=n, body=b):
                q = go(b)
                if i in free_indices(q):
                    k = fresh_index(i.name)
                    q = Exists(k, n, subst(q, idx={i: sym_aff(k)}))
                out = q
            case _:
                out = disj(*(go(c) for c in _binder_free_children(x)))
        memo[x] = out
        return out

    return go(body)


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

    # the shared terms that mention each binder: a binder none of them
    # mentions homes no term, so its body is not searched (a chain of N lets
    # searched every body: O(N²))
    mentioning: dict = {}
    for s in shared:
        for b in (free_vars(s) - inputs) | (free_indices(s) - outer_fi):
            mentioning.setdefault(b, []).append(s)

    def occurs(body: Expr) -> list:
        found, seen, stack = [], set(), [body]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if x in shared:
                found.append(x)
            stack.extend(_binder_free_children(x))
        return found

    memo: dict = {}

    def wrap(body: Expr, bound_v, bound_i, var) -> Expr:
        if isinstance(body, Iverson):
            # every occurrence is under the bracket: bind inside it, so the
            # term is computed (and costed, Fig. 6 4.33) only where the
            # bracket holds, and a sum keeps its bracket (4.30 (**))
            return Iverson(body.pred, wrap(body.body, bound_v, bound_i, var))
        if var is not None and var not in mentioning:
            here = []  # what homed(occurs(body), …) gives when no shared term mentions var
        else:
            here = sorted(homed(occurs(body), bound_v, bound_i, var), key=_size)
        if not here:
            return go(body, bound_v, bound_i)
        repl: dict = {}
        binds = []
        for s in here:
            v = fresh_var("t", type_of(s))
            # the guard on every occurrence, even where s reads in range
            # anywhere: evaluating s where the program skips it would charge
            # work the evaluator never does (4.33; cost-neutrality, Sec. 5).
            # iverson() drops a guard that is literally true.
            guard = needed(body, s)
            binds.append((v, iverson(guard, _replace(s, repl))))
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
            if isinstance(x, Let):  # the bound variable is a binder, not a use
                got = rebuild(x, (x.var, go(x.value), go(x.body)))
            else:
                got = rebuild(x, tuple(go(c) if isinstance(c, Expr) else (tuple(go(y) for y in c) if isinstance(c, tuple) else c) for c in children(x)))
            memo[x] = got
        return got

    return go(e)


def pretty(e, *, sharing: bool = True) -> str:
    """``tl.pretty``: the paper's notation (``printer.pretty``), an
    expression's sharing first made explicit as lets (``explicit_sharing``),
    unless ``sharing=False``; predicates, indices and types print as they are.
    An ill-typed expression is refused by explicit_sharing with its error."""
    if sharing and isinstance(e, Expr):
        e = explicit_sharing(e)
    return _print(e)
