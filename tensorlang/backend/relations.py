"""Lowering over relations and sparse tensors (paper Section 4.3: "with a
data-driven p, use CSR-like representations"; issues 13 and 16).

A mixin of :class:`~tensorlang.backend.lower.Lowerer`:

* a relation conjunct ``R(a.., j..)`` whose trailing arguments are block
  indices *drives* the block: its sorted coordinates (CSR-like, in the column
  order the access needs; CSC for ``R(j, i)``) are iterated at positions ``p``;
* a sparse tensor read at the coordinates of an enclosing driving loop is
  ``vals[p]`` (``vals[perm[p]]`` in a loop of another column order);
* a top-level gen guarded by ``R`` over exactly its indices is stored packed,
  one slot per non-zero, when every read of it is at such a position (else
  :class:`Unpack` makes ``lower_program`` lower again with it dense);
* ``exists[i] R(.., i) ∧ q`` searches the relation's row instead of ``0..n``;
* :func:`tidy` cleans predicates exactly, so relation conjuncts hidden in
  the adjoint's disjunctions can drive loops.
"""

from __future__ import annotations

from ..ir import TRUE, Aff, Add, And, Cmp, Exists, Or, Pred, Rel, SparseVar, Var, conj, free_indices
from . import kir as K
from .astgen import to_loops
from .domains import Scope, aff_expr, ast_for, in_range
from ..ir import conjuncts
from .loopir import Assign, Break, If, Loop


class RelationLowering:
    """Relation-driven loops, sparse values and packed arrays (see the module doc)."""

    def _packed_on(self, gb, p):
        """The conjunct ``R(i0, .., ik)`` of a top-level output gen's bracket
        over exactly its indices in order, when it is the block's driver (the
        first drivable relation conjunct): the output is then stored packed,
        one value per non-zero of R."""
        if self.mode != "sparse":
            return None
        idx = [i for i, _ in gb]
        for c in conjuncts(p):
            if isinstance(c, Rel) and self._drivable(c, [str(k) for k in range(len(idx))], {i: str(k) for k, i in enumerate(idx)}) is not None:
                ok = len(c.args) == len(idx) and all(
                    len(a.terms) == 1 and a.const == 0 and a.terms[0] == (i, 1) for a, i in zip(c.args, idx)
                ) and all(e is n for e, (_, n) in zip(c.rel.extents, gb))
                return c if ok else None
        return None

    # -- blocks ---------------------------------------------------------------------------
    def _drivable(self, rel: Rel, names, syms):
        """``(perm, L)`` when the relation can drive the block: every argument is
        either a distinct plain block index or mentions no block index.  ``perm``
        lists the outer arguments' positions, then the block indices'; the
        relation's coordinates are iterated sorted in that column order (the
        transposed, CSC-like order for ``R(j, i)`` with ``j`` in the block)."""
        block_vars = set(syms)
        outer, inner, seen = [], [], set()
        for k, a in enumerate(rel.args):
            if len(a.terms) == 1 and a.const == 0 and a.terms[0][1] == 1 and a.terms[0][0] in block_vars:
                if a.terms[0][0] in seen:
                    return None
                seen.add(a.terms[0][0])
                inner.append(k)
            elif a.index_vars() & block_vars:
                return None
            else:
                outer.append(k)
        if not inner:
            return None
        return tuple(outer + inner), len(outer)

    def _use_rel(self, r, perm, ptr=None, col=None) -> str:
        use = self.rel_use.setdefault((r, perm), {"ptrs": set(), "cols": set()})
        if ptr is not None:
            use["ptrs"].add(ptr)
        if col is not None:
            use["cols"].add(col)
        return self.rel_name(r, perm)

    def _driven(self, rel: Rel, names, syms, scope: Scope, cons, body, kind, pvar):
        perm, L = self._drivable(rel, names, syms)
        r = rel.rel
        args = [rel.args[k] for k in perm]
        exts = [r.extents[k] for k in perm]
        nm = self._use_rel(r, perm, ptr=L)
        driven = [syms[a.terms[0][0]] for a in args[L:]]
        rest = [d for d in names if d not in driven]
        rows = self._rows(args[:L], exts[:L], scope)
        assigns = []
        for k, d in enumerate(driven):
            self._use_rel(r, perm, col=L + k)
            assigns.append(Assign(d, K.Load(f"{nm}_c{L + k}", (K.Name(pvar),), unsigned=False)))
        dscope = scope.child(
            {i: syms[i] for i in syms if syms[i] in driven},
            params=driven,
            cons=[f"0 <= {d} < {scope.aff(n)}" for d, n in zip(driven, exts[L:])],
        )
        inner = to_loops(ast_for(dscope, rest, cons), rest, body, kind)
        ptr = f"{nm}_p{L}"
        lo = K.Load(ptr, (rows,), unsigned=False)
        hi = K.Load(ptr, (K.IBin("+", rows, K.Int(1)),), unsigned=False)
        loop = Loop(pvar, lo, hi, 1, tuple(assigns + inner), "rel")
        need = [
            in_range(aff_expr(a, scope), aff_expr(n, scope))
            for a, n in zip(args[:L], exts[:L])
            if not scope.holds(f"0 <= {scope.aff(a)} < {scope.aff(n)}")
        ]
        if need:
            return [If(K.and_of(need), (loop,))]
        return [loop]

    def _rows(self, args, exts, scope: Scope) -> K.KExpr:
        code = None
        for a, n in zip(args, exts):
            a_code = aff_expr(a, scope)
            code = a_code if code is None else K.IBin("+", K.IBin("*", code, aff_expr(n, scope)), a_code)
        return code if code is not None else K.Int(0)

    # -- scalars ---------------------------------------------------------------------------
    def packed_load(self, v: Var, idx):
        """A read of a packed let array: at the position of an enclosing loop
        over its relation at the same coordinates, ``t[p]`` (through the
        relation's permutation for a transposed loop); anywhere else the array
        cannot stay packed (:class:`Unpack`: lowered again with it dense)."""
        rel, name = self.packed[v]
        for d, perm, pvar, _ in reversed(self.drivers):
            if d.rel is rel and len(d.args) == len(idx) and all(a is b for a, b in zip(d.args, idx)):
                if perm == tuple(range(len(perm))):
                    return K.Load(name, (K.Name(pvar),))
                key = (rel, perm)
                if key not in self.orders:
                    self.orders[key] = self.names.new("relation")
                return K.Load(name, (K.Load(self.orders[key], (K.Name(pvar),), unsigned=False),))
        raise Unpack(v)

    def sparse_load(self, v: SparseVar, idx):
        """``A[a0, ...]`` read at the position ``p`` of an enclosing loop over
        the relation at the same coordinates: ``vals[p]`` (no search), or
        ``vals[perm[p]]`` in a loop of another column order (CSC for ``(1, 0)``)."""
        for rel, perm, pvar, _ in reversed(self.drivers):
            if rel.rel is v.rel and len(rel.args) == len(idx) and all(a is b for a, b in zip(rel.args, idx)):
                key = (v, tuple(range(len(perm))))
                if key not in self.sparse_vals:
                    self.sparse_vals[key] = self.names.new("input")
                if perm == key[1]:
                    return K.Load(self.sparse_vals[key], (K.Name(pvar),))
                # a transposed loop: through the relation's CSC permutation,
                # prepared once per relation data (no per-call gather)
                okey = (v.rel, perm)
                if okey not in self.orders:
                    self.orders[okey] = self.names.new("relation")
                return K.Load(self.sparse_vals[key], (K.Load(self.orders[okey], (K.Name(pvar),), unsigned=False),))
        return None

    def _exists_driver(self, i, b):
        """A conjunct ``R(.., i, ..)`` of ``b`` that can enumerate ``i`` (``i`` a
        plain argument, the others free of ``i``)."""
        for c in conjuncts(b):
            if isinstance(c, Rel):
                d = self._drivable(c, ["_"], {i: "_"})
                if d is not None:
                    return c, d[0], d[1]
        return None

    def _exists_driven(self, i, n, b, sc: Scope):
        """``exists[i:n] R(a.., i) ∧ q``: a search over the relation's row at
        ``a..`` (positions ``ptr[row]..ptr[row+1]`` of the order putting ``i``
        last), not over ``0..n`` through the dense table (issue 16); with
        ``q`` implied, just ``ptr[row+1] > ptr[row]``."""
        c, perm, L = self._exists_driver(i, b)
        r = c.rel
        args = [c.args[k] for k in perm]
        exts = [r.extents[k] for k in perm]
        nm = self._use_rel(r, perm, ptr=L)
        rows = self._rows(args[:L], exts[:L], sc)
        lo = K.Load(f"{nm}_p{L}", (rows,), unsigned=False)
        hi = K.Load(f"{nm}_p{L}", (K.IBin("+", rows, K.Int(1)),), unsigned=False)
        need = [
            in_range(aff_expr(a, sc), aff_expr(m, sc))
            for a, m in zip(args[:L], exts[:L])
            if not sc.holds(f"0 <= {sc.aff(a)} < {sc.aff(m)}")
        ]
        v = self.names.new("index")
        inner = sc.child({i: v}, params=[v], cons=[f"0 <= {v} < {sc.aff(exts[L])}", sc.child({i: v}).pred(c)])
        rest = conj(*[x for x in conjuncts(b) if x is not c], Cmp("<", Aff(((i, 1),), 0), n), Cmp("<=", Aff((), 0), Aff(((i, 1),), 0)))
        bs, bc = self.pred_code(rest, inner)
        ex = self.local()
        if not bs and bc == K.Bool(True):
            test = K.Cmp(">", hi, lo)
            if need:
                return [Assign(ex, K.Bool(False)), If(K.and_of(need), (Assign(ex, test),))], K.Name(ex)
            return [], test
        pv = self.names.new("index")
        self._use_rel(r, perm, col=L)
        found = If(bc, (Assign(ex, K.Bool(True)), Break()))
        loop = Loop(pv, lo, hi, 1, tuple([Assign(v, K.Load(f"{nm}_c{L}", (K.Name(pv),), unsigned=False))] + bs + [found]), "exists")
        body = [loop] if not need else [If(K.and_of(need), (loop,))]
        return [Assign(ex, K.Bool(False))] + body, K.Name(ex)


def _add_terms(e):
    if isinstance(e, Add):
        return _add_terms(e.lhs) + _add_terms(e.rhs)
    return [e]


def tidy(p: Pred) -> Pred:
    """Exact predicate clean-ups that expose relation conjuncts to the loop
    driver (issue 16): ``exists[i:n] q`` with ``i`` not in ``q`` is
    ``q ∧ 0 < n``; ``a ∨ (a ∧ c)`` and ``(a ∧ c) ∨ a`` are ``a``; ``a ∧ a`` and
    ``a ∨ a`` are ``a``; ``a ∨ b`` with the same relation conjunct in both
    sides is that conjunct ``∧`` the rest's disjunction."""
    match p:
        case Exists(var=i, extent=n, body=b):
            # exists i. (q ∧ r(i)) = q ∧ exists i. r(i)
            cs = conjuncts(tidy(b))
            outside = [c for c in cs if i not in free_indices(c)]
            inside = [c for c in cs if i in free_indices(c)]
            return conj(*outside, Exists(i, n, conj(*inside)) if inside else Cmp("<", Aff((), 0), n))
        case And(lhs=a, rhs=b):
            a, b = tidy(a), tidy(b)
            return a if a is b else conj(a, b)
        case Or(lhs=a, rhs=b):
            a, b = tidy(a), tidy(b)
            if a is b:
                return a
            ca, cb = conjuncts(a), conjuncts(b)
            if all(c in cb for c in ca):  # a ∨ (a ∧ c) = a
                return a
            if all(c in ca for c in cb):
                return b
            common = [c for c in ca if isinstance(c, Rel) and c in cb]
            if common:  # (R ∧ x) ∨ (R ∧ y) = R ∧ (x ∨ y)
                ra = conj(*[c for c in ca if c not in common])
                rb = conj(*[c for c in cb if c not in common])
                return conj(*common, Or(ra, rb) if ra is not TRUE and rb is not TRUE else TRUE)
            return Or(a, b)
        case _:
            return p


class Unpack(Exception):
    """A packed let array is read off its relation's loops (internal: the
    program is lowered again with that array dense)."""

    def __init__(self, var):
        super().__init__(var)
        self.var = var
