"""Finiteness witnesses from a kernel's results (paper Section 4.3:
every call refuses NaN and infinity in its inputs, since the rewrites that
made the kernel are exact over the reals only; issue #13: that scan is a
whole extra pass over each input, 40% of the 5-point Laplacian loss's call).

A scalar result that is *strict* in every element of an input witnesses
it: when the result is finite, the input is.  IEEE arithmetic makes a sum
or product with a non-finite operand non-finite (``inf·0 = NaN``,
``inf + -inf = NaN``, ``NaN + x = NaN``), so the loss

    sum[i:n] sum[j:n] [interior]·(...)² + (u[i, j] - f[i, j])·(u[i, j] - f[i, j])

is non-finite whenever some ``u[i, j]`` or ``f[i, j]`` is: every element of
each is read, at every point of the box, in a term the kernel computes
there.  The caller (api.Kernel) then skips those inputs' scans and checks
the result after the call; a non-finite result scans the inputs it stands
for (an InputError when one is to blame; a finite input whose loss
overflowed keeps the computed answer, as before).  blas.py's witness of a
matrix-vector product's matrix is the same idea for one statement.

A dense array result witnesses the same way at each of its elements (session
18): ``gen[i] e`` finite everywhere makes every strict read of ``e`` finite,
the gen's indices counting as enclosing sums.  A gradient is such a result:
the deconvolution's ``dc[j] = Σ_i x[i - j + m - 1]·2(y[i] - z[i])`` (m values)
stands for all of x, c and z, so ``tl.grad`` scans m values after the kernel
instead of 2n + m before it.  A plan takes an array witness only when it is
no larger than the input (api.Kernel._plan, ``plan_witnesses``); the plan's
first call tests it with NumPy, as that call validated its inputs.

What counts as strict is decided on the prepared program (the lowering's
input), conservatively:

* along ``+`` both sides, and into a ``sum`` (its index ranges over its
  whole extent at every point of the enclosing sums);
* along ``·`` only when every factor is a *polynomial*: constants other than
  0, reads, ``+``, ``·`` and sums of those over extents of the sizes alone.
  A bracket, a function or a loop in a factor may make the backend skip the
  product where that factor is 0 (a bracket's points are skipped), so such a
  product witnesses nothing; a factor's sum may take the product into its
  loop (fusion), so the product witnesses only where that sum is not empty;
* a read of an input ``X[a1, ..., ak]`` whose every index ``a`` is a sum of
  distinct enclosing sum indices with coefficients ±1 (none shared between
  dimensions) plus sizes and a constant, whose least and greatest values over
  the sums are ``0`` and the dimension's extent - 1 at every size: every
  element is read (``X[i, j]`` over X's own extents; the deconvolution's
  ``x[i - j + m - 1]`` over i < n, j < m, x of extent n + m - 1);
* a read of a top-level let-bound ``gen`` (a temporary the kernel computes
  in full, or inlines at each read) is strict in what its element is
  strict in, its index substituted; a top-level scalar let, in its value.

Brackets, functions (``exp(-inf) = 0``, ``tanh(inf) = 1``), projections,
inner lets and loops witness nothing.  A read also witnesses only where
the sums around it are not empty, which depends on the call's sizes: each
witness carries the extents of all its enclosing sums, and a call plan
takes it only when every one is at least 1 there (api.Kernel._plan).  A
kernel with a BLAS call witnesses nothing this way (a BLAS product may skip
zero multipliers, blas.py).  tests/backend/test_strict_witness.py injects
NaN and infinity into random programs' inputs and checks every planned
call refuses them.
"""

from __future__ import annotations

import numpy as np

from ..ir import Access, Add, Const, Gen, IndexVar, Mul, RealT, Sum, TensorT, Var
from ..ir.types import shape_of
from .cache_spec import dim_at
from .results import array_leaves, scalar_leaves

BUDGET = 20_000  # nodes visited per kernel; past it the rest witnesses nothing (never wrong, only slower)


class _Walk:
    def __init__(self, lets: dict):
        self.lets = lets  # top-level let variable -> value (closed: no free index)
        self.steps = 0
        self.found: dict = {}  # input name -> the first covering read's enclosing extents

    def strict(self, e, env: dict, ctx: tuple) -> None:
        """Record the inputs fully read by ``e`` in a strict position.  ``env``:
        gen index -> Aff (a let-bound gen's index, bound by its read); ``ctx``:
        the enclosing sums as (index, extent), and the extents a product's sums
        need non-empty (keyed by a placeholder)."""
        self.steps += 1
        if self.steps > BUDGET:
            return
        t = type(e)
        if t is Add:
            self.strict(e.lhs, env, ctx)
            self.strict(e.rhs, env, ctx)
        elif t is Sum:
            inner = env if e.var not in env else {k: a for k, a in env.items() if k is not e.var}
            self.strict(e.body, inner, ctx + ((e.var, e.extent.subst(env)),))
        elif t is Mul:
            factors = _factors(e)
            extra = []
            for f in factors:
                got = self.polynomial(f, env, 0)
                if got is None:
                    return
                extra += got
            ctx = ctx + tuple((object(), n) for n in extra)
            for f in factors:
                self.strict(f, env, ctx)
        elif t is Access:
            self.read(e, env, ctx)
        elif t is Var and e in self.lets and isinstance(e.type, RealT):
            self.strict(self.lets[e], {}, ctx)
        # Const, Iverson, Call, Gen, Pair, Proj, Let, Loop: nothing

    def _element(self, e):
        """``(value, bound, indices)`` of a read (``indices`` innermost first):
        an input's ``(Var, None, ...)``; a top-level let-bound gen's ``(its
        element, {gen index: Aff}, ...)``; anything else ``(None, None, ...)``."""
        base, idx = e, []
        while type(base) is Access:
            idx.append(base.index)
            base = base.arr
        if type(base) is not Var:  # SparseVar (a relation's values), a gen in place, a projection
            return None, None, idx
        if base.uid == 0:
            return base, None, idx
        value, bound = self.lets.get(base), {}
        for a in reversed(idx):
            if type(value) is not Gen:
                return None, None, idx
            bound[value.var] = a
            value = value.body
        return value, bound, idx

    def read(self, e, env: dict, ctx: tuple) -> None:
        value, bound, idx = self._element(e)
        if value is None:
            return
        idx = [a.subst(env) for a in reversed(idx)]
        if bound is None:  # an input
            dims = shape_of(value.type)
            if len(dims) == len(idx) and value.name not in self.found and _covers(idx, dims, ctx):
                self.found[value.name] = tuple(n for _, n in ctx)
            return
        self.strict(value, {v: a.subst(env) for v, a in bound.items()}, ctx)

    def polynomial(self, e, env: dict, depth: int):
        """The extents that must be non-empty when ``e`` is built of constants
        other than 0, reads, ``+``, ``·`` and sums without brackets over
        extents of sizes alone (a read of a let-bound gen or scalar: its value,
        recursively); None for anything else."""
        self.steps += 1
        if self.steps > BUDGET or depth > 64:
            return None
        t = type(e)
        if t is Const:
            return [] if e.value != 0 else None
        if t is Add or t is Mul:
            a = self.polynomial(e.lhs, env, depth + 1)
            b = None if a is None else self.polynomial(e.rhs, env, depth + 1)
            return None if b is None else a + b
        if t is Sum:
            n = e.extent.subst(env)
            if n.index_vars():
                return None
            got = self.polynomial(e.body, {k: a for k, a in env.items() if k is not e.var}, depth + 1)
            return None if got is None else [n] + got
        if t is Var:
            if e.uid == 0:
                return [] if isinstance(e.type, RealT) else None
            if e in self.lets and isinstance(e.type, RealT):
                return self.polynomial(self.lets[e], {}, depth + 1)
            return None
        if t is Access:
            value, bound, _ = self._element(e)
            if value is None:
                return None
            if bound is None:
                return []
            return self.polynomial(value, bound, depth + 1)  # the element's own sums: sizes alone
        return None


def _factors(e) -> list:
    out, todo = [], [e]
    while todo:
        x = todo.pop()
        if type(x) is Mul:
            todo += [x.rhs, x.lhs]
        else:
            out.append(x)
    return out


def _covers(idx: list, dims: tuple, ctx: tuple) -> bool:
    """Every element of an array of extents ``dims`` read as ``X[idx]`` at every point
    of the enclosing sums ``ctx``: each index an affine form whose index symbols are
    enclosing sum indices (no two dimensions sharing one) with coefficients +1 or -1,
    and whose least and greatest values over the sums are ``0`` and ``dim - 1`` at
    every size (a unit step over each sum: the values between are all taken, as for
    the deconvolution's ``x[i - j + m - 1]``, i < n, j < m, x of extent n + m - 1);
    every enclosing extent a function of the sizes alone."""
    extents = dict(ctx)
    if len(extents) != len(ctx) or any(n.index_vars() for n in extents.values()):
        return False  # an index bound twice (shadowing), or a triangular extent
    seen = set()
    for a, n in zip(idx, dims):
        units = [(s, c) for s, c in a.terms if isinstance(s, IndexVar)]
        if not units or any(c not in (1, -1) or s in seen or s not in extents for s, c in units):
            return False
        seen.update(s for s, _ in units)
        lo = a.subst({s: 0 if c == 1 else extents[s] - 1 for s, c in units})
        hi = a.subst({s: extents[s] - 1 if c == 1 else 0 for s, c in units})
        if not (lo.is_const and lo.const == 0):
            return False
        top = hi - n
        if not (top.is_const and top.const == -1):
            return False
    return True


def _elements(o, value):
    """``(element, ((index, extent), ...))`` of ``o = gen[i] gen[j] … e``, a dense
    real array (its type ``[n][m]…R``, one gen per dimension); None otherwise."""
    t, ctx = o.type, []
    while type(t) is TensorT:
        if type(value) is not Gen:
            return None
        ctx.append((value.var, value.extent))
        t, value = t.elem, value.body
    return (value, tuple(ctx)) if ctx and isinstance(t, RealT) else None


def strict_witnesses(binds, outs: list) -> list:
    """``[(input name, result leaf, enclosing extents, leaf extents)]``: each input
    whose every element the result leaf is strict in (module doc), with the extents
    that must be at least 1 at a call's sizes and the leaf's own (none for a
    scalar).  A dense array result witnesses as the scalar does, at each of its
    elements: ``gen[i] e`` finite everywhere makes every strict read of ``e``, at
    every ``i``, finite (the gradient of the deconvolution: ``dc[j] = Σ_i x[i - j +
    m - 1]·2(y[i] - z[i])``, m elements, stands for x, c and z).  ``binds``, ``outs``:
    the lowering's top-level bindings and output leaves (fusion.split_program)."""
    lets = {v: rhs for v, rhs in binds}
    got = []
    for k, o in enumerate(outs):
        if type(o) is not Var or o not in lets:
            continue
        if isinstance(o.type, RealT):
            body, ctx = lets[o], ()
        else:
            elems = _elements(o, lets[o])
            if elems is None:
                continue
            body, ctx = elems
        w = _Walk(lets)
        w.strict(body, {}, ctx)
        got += [(name, k, ext, tuple(n for _, n in ctx)) for name, ext in sorted(w.found.items())]
    return got


def plan_witnesses(spec, type_, sizes: dict, checks, inputs: dict) -> tuple:
    """The ``(input, (), leaf)`` witnesses of ``spec["strict_witnesses"]`` a call
    plan at ``sizes`` (name -> int) takes: inputs it would still scan
    (``checks``), a result leaf of the program's type ``type_`` that is a scalar
    or a dense array no larger than the input (the leaf is scanned after the call
    instead: the smallest such leaf), every enclosing extent at least 1 at these
    sizes; one per input."""
    items = spec.get("strict_witnesses")
    if not items:
        return ()
    todo = {name for name, path in checks if not path}
    scalars = scalar_leaves(spec["outputs"], type_)
    arrays = array_leaves(spec["outputs"], type_) - {k for k, _ in spec.get("sparse_outputs", ())}
    best: dict = {}  # input -> (elements of the leaf, leaf)
    for item in items:
        name, k, dims, leaf = item
        if name not in todo or not all(dim_at(d, sizes) >= 1 for d in dims):
            continue
        if k in scalars and not leaf:
            size = 1
        elif k in arrays and leaf:
            size = 1
            for d in leaf:
                size *= dim_at(d, sizes)
            if size > np.size(inputs[name]):
                continue
        else:
            continue
        if name not in best or size < best[name][0]:
            best[name] = (size, k)
    return tuple((name, (), k) for name, (_, k) in sorted(best.items()))


__all__ = ["BUDGET", "plan_witnesses", "strict_witnesses"]
