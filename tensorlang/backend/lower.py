"""Lowering: prepared let-block -> loop IR (paper Section 4.3).

Every gen block and every chain of sums is one *block*: an isl set built
from its ranges and its affine predicate (sizes and enclosing indices are
parameters), whose loops isl generates (``mode="sparse"``), so loops visit
only points where the bracket holds.  Sums become scalar accumulators; gens
store their own element (gather only: no location is written by two
iterations).  A relation conjunct ``R(a.., j..)`` whose trailing arguments
are block indices is iterated over the relation's sorted coordinates
(CSR-like); other relational conjuncts are tested in the loop body.  With
``mode="naive"`` every block runs over its full box and tests its predicate
inside (the naive baseline).  A tensor ``let`` under a loop is a local array
computed per iteration of the loops around it.

Brackets are first hoisted through products and merged (``[p]·a · [q]·b =
[p ∧ q]·(a·b)``, the bracket's value being zero where ``p`` fails, Fig. 4
rule 4.12), so a bracket deep in a product still narrows its loops.

Scalar expressions (a gen's element, a sum's term) become kernel-IR code in
the ``ExprLowering`` mixin (exprs.py); relations and predicates in theirs
(relations.py, predicates.py); this module builds the blocks' loops and
the kernel.  Every array access is proven in bounds with isl before any
code exists.
Every name in the kernel comes from one :class:`~.kir.NameAllocator`, in the
order the canonical program is traversed: no user name reaches the source,
which is therefore a function of the cache key alone.
"""

from __future__ import annotations

from dataclasses import replace

from ..isl_bridge import isl

from ..errors import TensorLangError, UnsupportedError, describe
from ..ir import (
    Add,
    Call,
    Expr,
    Iverson,
    Mul,
    Pair,
    PairT,
    RealT,
    Rel,
    SparseVar,
    TensorT,
    Var,
    TRUE,
    conj,
    disj,
    gens,
    input_vars,
    make_gens,
    make_lets,
    relations_of,
    shape_of,
    size_vars,
)
from . import kir as K
from .astgen import to_loops
from .fusion import out_vars, resolve_aliases, split_program
from .domains import MAX_SIZE, Scope, aff_expr, ast_for, block_set, box_cons, covers, has_rel
from ..ir import conjuncts
from .hoist import hoist, occurrences, split_bracket
from .loopir import Alloc, Assign, If, KernelIR, Loop, Store, walk_stmts
from .temps import bound_depth
from .separate import Rows, separation
from .interchange import block_order
from .masks import select, selectable, unguarded
from .contract import fuse_and_contract
from .scatter import fuse_with_scatters, scatter_binding
from .relations import RelationLowering, Unpack, _add_terms, tidy
from .predicates import PredicateLowering
from .exprs import ExprLowering, const_value
from .elements import canonical, extents_key, reuse
from .blas import Gemm, dense_shape, extract_products, lower_gemm
from .strict import strict_witnesses

# A partly covered gen's rest is zeroed by loops (``Lowerer._rest_zeros``)
# only when its domain holds at every point this far inside the box's faces
RIM = 4


class Lowerer(ExprLowering, RelationLowering, PredicateLowering):
    def __init__(self, program: Expr, mode: str):
        if mode not in ("sparse", "naive"):
            raise TensorLangError(f"unknown compile mode {mode!r}; use 'sparse' or 'naive'")
        self.mode = mode
        self.names = K.NameAllocator()
        # (Relation, column order) -> {"ptrs": prefix lengths, "cols": columns}
        self.rel_use: dict = {}
        self.rel_names: dict = {}  # Relation -> allocator name
        self.dense_rels: list = []  # relations tested through their dense table
        self.functions: dict = {}  # registered name -> allocator name
        self.allocs: list = []
        # array name -> the loops storing 0.0 on the box minus the gen's domain
        # (``_rest_zeros``), used in place of zeroing the whole array
        self.rest_zeros: dict = {}
        svs = set(size_vars(program))
        for r in relations_of(program):
            for a in r.extents:
                svs |= a.size_vars()
            self._rel(r)
        self.sizes = sorted(svs, key=lambda s: s.name)
        symmap = {s: self.names.new("size") for s in self.sizes}
        params = [symmap[s] for s in self.sizes]
        # sizes are bounded at call time (MAX_SIZE), so isl decides guards
        # with huge offsets and no literal beyond int64 reaches a kernel
        cons = [f"0 <= {p} <= {MAX_SIZE}" for p in params]
        self.scope0 = Scope(symmap, params, cons, {"positive": list(params), "needs_positive": False, "checks": []})
        self.leaves: dict = {}  # (Var, path) -> (kernel name, extents)
        # sparse tensors (issue 16): (SparseVar, perm) -> kernel name of its values
        # in the relation's order ``perm``; a dense copy only if some read is not
        # at a position a relation loop is already at (registered on demand)
        self.sparse_vals: dict = {}
        self.drivers: list = []  # relation loops around the code being emitted: (Rel, perm, position var)
        self.sparse_outs: dict = {}  # output array name -> Relation it is packed on
        self.packed: dict = {}  # let Var -> (Relation, kernel name): arrays stored one slot per non-zero
        self.no_pack: set = set()  # let Vars read somewhere off their relation's loops (stored dense)
        self.orders: dict = {}  # (Relation, perm) -> kernel name of the permutation into perm order
        for v in input_vars(program):
            if isinstance(v, SparseVar):
                continue
            for path, t in _leaves(v.type):
                ext = shape_of(t)
                if not isinstance(_elem(t), RealT):
                    raise UnsupportedError(f"input {v.name} has an array-of-structs type {v.type}")
                self.leaves[(v, path)] = (self.names.new("input"), ext)
                cons += [f"{self.scope0.aff(n)} >= 0" for n in ext]
        for r in relations_of(program):
            cons += [f"{self.scope0.aff(n)} >= 0" for n in r.extents]
        self.stored: dict = {}  # (extents, canonical element) -> let Var of a stored gen binding (elements.py)
        self.arrays: dict = {}  # let Var -> (kernel name, extents)
        self.scalars: dict = {}  # let Var -> kernel name
        # scalar lets bound to a constant -> the constant (K.Float): read as the literal, so a
        # float32 kernel's comparison sees it (scalars.compared_constants)
        self.constants: dict = {}
        self.witnesses: list = []  # (input leaf, scalar): its finiteness witness (blas.finite_witness)

    def dense_shape(self, base):
        return dense_shape(self, base)

    def local(self) -> str:
        return self.names.new("local")

    def _rel(self, r) -> str:
        if r not in self.rel_names:
            self.rel_names[r] = self.names.new("relation")
        return self.rel_names[r]

    def rel_name(self, r, perm) -> str:
        base = self._rel(r)
        if not perm or perm == tuple(range(len(perm))):
            return base
        return base + "_t" + "_".join(map(str, perm))

    # -- bindings ----------------------------------------------------------------------
    def binding(self, x: Var, rhs: Expr, role: str) -> list:
        gb, body = gens(rhs)
        if self.mode == "sparse":  # matrix products inside the body computed apart, by BLAS (blas.py)
            pre, body2 = extract_products(gb, body, self.dense_shape)
            if pre:
                return [s for c, e in pre for s in self.binding(c, e, "temporary")] + self.binding(
                    x, make_gens(gb, body2), role)
        if gb and self.mode == "sparse":  # an element an earlier binding stored is read back (elements.py)
            body = reuse(gb, body, self.stored)
        canon = canonical(gb, body) if gb and self.mode == "sparse" else None
        body = hoist(body)
        self.shared = occurrences(body)
        self.cse, self._keep = {}, []
        if not gb:
            st, code = self.scalar(body, self.scope0)
            name = self.local()
            self.scalars[x] = name
            if isinstance(code, K.Float) and not st:
                self.constants[x] = code
            else:
                self.constants.pop(x, None)
            return st + [Assign(name, code)]
        stmts = self.array_binding(x, gb, body, self.scope0, role)
        if canon is not None and x not in self.packed and isinstance(canon, (Call, Add, Mul)):
            self.stored.setdefault((extents_key(gb), canon), x)
        # a dense matrix product: a BLAS call, the loops kept for small sizes (blas.py)
        return lower_gemm(self, x, gb, rhs, stmts) if self.mode == "sparse" else stmts

    def array_binding(self, x: Var, gb, body, scope: Scope, role: str) -> list:
        """``x = gen[gb] body`` into a kernel array (top level, or per iteration
        of the loops around a tensor let)."""
        name = self.names.new("array")
        ext = [n for _, n in gb]
        p, s = split_bracket(body)
        if p is TRUE and self.mode == "sparse" and isinstance(s, Add):
            # [p1]·a + [p2]·b is zero off p1 ∨ p2: that union bounds the loops
            terms = _add_terms(s)
            if all(isinstance(t, Iverson) for t in terms):
                p = disj(*[t.pred for t in terms])
        if self.mode == "sparse":
            p = tidy(p)
        packed = self._packed_on(gb, p) if scope is self.scope0 and x not in self.no_pack else None

        def emit(sc, dims):
            st, code = self.scalar(s, sc)
            if packed is not None:
                top = self.drivers[-1] if self.drivers else None
                if top is None or top[0] is not packed:
                    raise UnsupportedError(f"internal: the compressed output {x.name} is not written in its relation's loop")
                return st + [Store(name, (K.Name(top[2]),), code)]
            return st + [Store(name, tuple(K.Name(d) for d in dims), code)]

        stmts, full = self.block(gb, p, scope, emit, "gen", s)
        pooled = role == "temporary" and scope is self.scope0
        if packed is not None:
            # the output is the relation's values in its row-major (CSR) order,
            # one slot per non-zero: O(nnz) memory (issue 16, item 4)
            nnz = K.Load(f"{self.rel_name(packed.rel, ())}_p0", (K.Int(1),), unsigned=False)
            alloc = Alloc(name, (nnz,), True, role, x.name, False)
            if role == "output":
                self.sparse_outs[name] = packed.rel
            self.packed[x] = (packed.rel, name)
            self.allocs.append(alloc)
            self.arrays[x] = (name, (None,))
            return [alloc] + stmts
        else:
            alloc = Alloc(name, tuple(aff_expr(n, self.scope0) for n in ext), not full, role, x.name, pooled)
            if not full and scope is self.scope0 and self.mode == "sparse" and not has_rel(p):
                got = self._rest_zeros(name, gb, p, scope)
                if got is not None:
                    self.rest_zeros[name] = got
        self.allocs.append(alloc)
        self.arrays[x] = (name, tuple(ext))
        return [alloc] + stmts

    def _rest_zeros(self, name: str, binds, p, scope: Scope) -> list:
        """Loops storing 0.0 at the points of the box ``binds`` where the
        affine predicate ``p`` fails: the only elements of a partly covered
        gen the domain's loops do not write (the Iverson bracket's zeros,
        Fig. 4), so the array need not be zeroed whole first (a step of the
        Burgers adjoint zeroed two n-arrays for their two boundary elements)."""
        names = [self.names.new("index") for _ in binds]
        sc = scope.child({i: nm for (i, _), nm in zip(binds, names)})
        box = box_cons(names, [n for _, n in binds], sc)
        dom = [sc.pred(c) for c in conjuncts(p)]
        rest = box + ([f"not ({' and '.join(dom)})"] if dom else ["1 = 0"])
        # only a border: the domain holds on the box's points at least RIM from
        # each face, so the rest is O(the box's surface), not of its volume
        # (trace's adjoint [i = j] leaves n² - n zeros: a calloc'd array is cheaper)
        inner = [f"{RIM} <= {v} < {sc.aff(n)} - {RIM}" for v, (_, n) in zip(names, binds)]
        if not isl.Set(block_set(scope, names, scope.cons + rest + inner)).is_empty():
            return None
        zero = [Store(name, tuple(K.Name(d) for d in names), K.Float(0.0))]
        return to_loops(ast_for(scope, names, rest), names, zero, "gen", names)

    def block(self, binds, p, scope: Scope, emit, kind: str, expr=None, order=None):
        """Loops over ``binds`` where ``p`` holds; returns (stmts, covers_box).
        ``expr``: the scalar expression ``emit`` lowers (its brackets' atoms
        may separate an interior); ``order``: None (``binds``' order) or
        ``(perm, tile)`` (interchange.py, domains.schedule_dims)."""
        names = [self.names.new("index") for _ in binds]
        if order is None and self.mode == "sparse" and kind in ("gen", "sum"):
            order = block_order(binds, expr, kind == "gen")  # stride-1 loop innermost (interchange.py)
        sched = [names[k] for k in order[0]] if order is not None else list(names)
        if order is not None and order[1]:
            sched.insert(0, self.names.new("index"))  # the tile's loop
        syms = {i: nm for (i, _), nm in zip(binds, names)}
        sc = scope.child(syms)
        box = box_cons(names, [n for _, n in binds], sc)
        if self.mode == "sparse":
            p = tidy(p)  # so that a relation conjunct hidden in S ∨ (S ∧ q) can drive the loops
        cs = conjuncts(p)
        driver = pvar = None
        if self.mode == "naive":
            tests, dom = cs, []
        else:
            for c in cs:
                if isinstance(c, Rel) and self._drivable(c, names, syms) is not None:
                    driver = c
                    break
            tests = [c for c in cs if c is not driver and has_rel(c)]
            dom = [sc.pred(c) for c in cs if not has_rel(c)]
            if driver is not None:
                dom.append(sc.pred(driver))
                pvar = self.names.new("index")
                self.drivers.append((driver, self._drivable(driver, names, syms)[0], pvar, names))
        inner = sc.child(params=names, cons=box + dom)
        test_preds = [inner.pred(t) for t in tests]

        skips = []  # a piece whose relation test skips points (a branch, or no code)

        def guarded(sc_test):
            # the body under a relation test (read from its dense table); the
            # test is simplified against what ``sc_test`` knows (an interior
            # piece often decides its affine part)
            if not tests:
                return emit(sc_test, names)
            tst, tcode = self.pred_code(conj(*tests), sc_test)
            if tcode == K.Bool(False):
                skips.append(True)
                return []
            if tcode != K.Bool(True) and kind in ("gen", "sum") and expr is not None:
                # a gen's element or a sum's term selected, no branch (unguarded):
                # a gen then stores every point (0 where the test fails)
                got = unguarded(self, lambda: (emit(sc_test, names), None), expr)
                if got is not None and selectable(got[0], kind):
                    return tst + select(got[0], tcode)
            b = emit(sc_test.child(cons=test_preds), names)
            if tcode != K.Bool(True):
                skips.append(True)
            return b if tcode == K.Bool(True) else tst + [If(tcode, tuple(b))]

        # boundary pieces apart from the interior, whose copy is branch-free
        # but for relation tests, which hold on data (separate.py)
        plain = self.mode == "sparse" and driver is None
        node, inside = separation(scope, inner, names, box + dom, expr, order) if plain else (None, None)
        try:
            if node is not None:
                body = {"S0": guarded(inner.child(cons=inside)), "S1": guarded(inner)}
            else:
                body = guarded(inner)
        finally:
            if pvar is not None:
                self.drivers.pop()
        if isinstance(node, Rows):
            stmts = node.loops(names, body, kind)
            full = not skips and (not dom or covers(scope, names, box, dom))
        elif node is not None:
            stmts = to_loops(node, names, body, kind, sched)
            full = not skips and (not dom or covers(scope, names, box, dom))
        elif driver is None:
            stmts = to_loops(ast_for(scope, names, box + dom, order), names, body, kind, sched)
            full = not skips and (not dom or covers(scope, names, box, dom))
        else:
            stmts = self._driven(driver, names, syms, scope, box + dom, body, kind, pvar)
            full = False
        if kind == "gen" and scope is self.scope0:
            stmts = _mark_parallel(stmts)
        return stmts, full


def _leaves(t, path=()):
    if isinstance(t, PairT):
        return _leaves(t.fst, path + (0,)) + _leaves(t.snd, path + (1,))
    return [(path, t)]


def _elem(t):
    while isinstance(t, TensorT):
        t = t.elem
    return t


def _mark_parallel(stmts) -> list:
    """Outermost loops of a top-level gen block write disjoint elements."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = replace(s, parallel=True)
        elif isinstance(s, If):
            s = replace(s, then=tuple(_mark_parallel(s.then)), orelse=tuple(_mark_parallel(s.orelse)))
        out.append(s)
    return out


def _zero_rest(body, allocs, rest: dict):
    """``(body, allocs)`` with each top-level zero-initialised array that has
    loops over the rest of its box (``Lowerer._rest_zeros``; not contracted)
    allocated uninitialised and those loops placed right after its
    allocation: its domain's loops write every other element, so each
    element is written once, not twice (a full zero fill is one more pass
    over the array per call: per step in a loop's step programs)."""
    done = {}
    out = []
    for s in body:
        if isinstance(s, Alloc) and s.zero and s.name in rest:
            s2 = replace(s, zero=False)
            done[s.name] = s2
            out.append(s2)
            out.extend(rest[s.name])
        else:
            out.append(s)
    return out, [done.get(a.name, a) for a in allocs]


def _unique(checks):
    seen, out = set(), []
    for a, n, what in checks:
        if (a, n) not in seen:
            seen.add((a, n))
            out.append((a, n, what))
    return out


def _extents(ext):
    return [[[[s.name, c] for s, c in n.terms], n.const] for n in ext]


def lower_program(program: Expr, mode: str = "sparse"):
    """Signature: lower_program : Expr -> (KernelIR, spec).

    ``program`` is what ``prepare.prepare`` produced (the backend's input
    grammar, see tensorlang.backend.fusion).  ``spec`` maps the kernel's
    positional arguments and results to the program's names for the caller
    (JSON-serialisable).
    """
    binds, out = split_program(program)
    binds, out = resolve_aliases(binds, out)
    outs = out_vars(out)
    program_binds = binds  # before fusion: the program the scalar witnesses are read from (strict.py)
    fused = None
    no_pack: set = set()
    while True:  # at most once more per let array found read off its relation's loops
        lw = Lowerer(program, mode)
        lw.no_pack = set(no_pack)
        if fused is None:
            fused, plans = fuse_with_scatters(binds, outs, lw.scope0)
        body = []
        outset = set(outs)
        try:
            for x, rhs in fused:
                role = "output" if x in outset else "temporary"
                body += scatter_binding(lw, x, plans[x], role) if x in plans else lw.binding(x, rhs, role)
        except Unpack as u:
            no_pack.add(u.var)
            continue
        break
    binds = fused
    results, copies = [], set()
    for o in outs:
        if isinstance(o, Var) and o in lw.arrays:
            results.append(lw.arrays[o][0])
        elif isinstance(o, Var) and o in lw.scalars:
            results.append(lw.scalars[o])
        else:
            leaf = lw._leaf(o)
            if leaf is None or leaf not in lw.leaves:
                raise UnsupportedError(f"the backend cannot return {describe(o)}")
            name, ext = lw.leaves[leaf]
            results.append(name)
            if ext:
                copies.add(name)
    # finiteness witnesses are extra scalar results after the program's leaves
    witnesses = []
    for (v, path), acc in lw.witnesses:
        witnesses.append([v.name, list(path), len(results)])
        results.append(acc)
    # intermediates read only at their own loop's point become locals (contract.py)
    body, gone = fuse_and_contract(body, lw.allocs, set(results), lw.local)
    lw.allocs = [a for a in lw.allocs if a.name not in gone]
    body, lw.allocs = _zero_rest(body, lw.allocs, lw.rest_zeros)
    args = [lw.scope0.symmap[s] for s in lw.sizes]
    inputs = []
    for (v, path), (name, ext) in lw.leaves.items():
        args.append(name)
        inputs.append([v.name, list(path), len(ext)])
    rels = []
    for (r, perm), use in lw.rel_use.items():
        ptrs, cols = sorted(use["ptrs"]), sorted(use["cols"])
        nm = lw.rel_name(r, perm)
        args += [f"{nm}_p{L}" for L in ptrs] + [f"{nm}_c{k}" for k in cols]
        rels.append([r.name, list(perm), ptrs, cols])
    for r in lw.dense_rels:
        args.append(f"{lw.rel_name(r, ())}_d")
    svals = []
    for (v, perm), name in lw.sparse_vals.items():
        args.append(name)
        svals.append([v.name, list(perm)])
    orders = []
    for (r, perm), name in lw.orders.items():
        args.append(name)
        orders.append([r.name, list(perm)])
    work = [_extents([n for _, n in gens(rhs)[0]]) for _, rhs in binds if gens(rhs)[0]]
    # inputs a scalar result is strict in (strict.py), unless a BLAS call may skip zero multipliers
    strict = []
    if not any(isinstance(st, Gemm) for st in walk_stmts(body)):
        whole = {v.name for (v, path), (_, ext) in lw.leaves.items() if not path and ext}
        strict = [[name, k, _extents(ext), _extents(leaf)]
                  for name, k, ext, leaf in strict_witnesses(program_binds, outs) if name in whole]
    # Temporaries come from a per-kernel pool: fresh 8 MB arrays each call
    # cost more in page faults than a gradient's arithmetic.
    temps = []
    for a in lw.allocs:
        if a.pooled:
            args.append(a.name)
            x = next(v for v, (nm, _) in lw.arrays.items() if nm == a.name)
            temps.append([a.name, _extents(lw.arrays[x][1])])
    body = bound_depth(body, lw.local)
    # Top-level dense output arrays, which the caller may give (api.py: large
    # outputs written into a dead buffer of an earlier call, no page faults).
    out_arrays = []
    for s in body:
        if isinstance(s, Alloc) and s.role == "output" and not s.pooled and s.name not in lw.sparse_outs:
            x = next(v for v, (nm, _) in lw.arrays.items() if nm == s.name)
            out_arrays.append([s.name, _extents(lw.arrays[x][1])])
    ir = KernelIR(args, lw.allocs, body, results, {u: f for f, u in lw.functions.items()}, copies)
    spec = {
        "sizes": [s.name for s in lw.sizes],
        "inputs": inputs,
        "relations": rels,
        "dense_relations": [r.name for r in lw.dense_rels],
        "sparse_values": svals,
        "relation_orders": orders,  # [relation, perm]: positions of the perm-sorted coordinates
        # result leaves stored packed on a relation: [leaf index, relation name]
        "sparse_outputs": [[k, lw.sparse_outs[r].name] for k, r in enumerate(results) if r in lw.sparse_outs],
        "outputs": _out_spec(out, outs),
        "work": work,
        "mode": mode,
        "needs_positive_sizes": lw.scope0.facts["needs_positive"],
        # [index, extent, access]: size-only accesses checked before each call
        "checks": [[_extents([a])[0], _extents([n])[0], what] for a, n, what in _unique(lw.scope0.facts["checks"])],
        "temporaries": temps,
        "output_arrays": out_arrays,
        "functions": sorted(lw.functions),
        # [input, path, result index]: the input's NaN/inf scan is the scalar result's (blas.py)
        "witnesses": witnesses,
        # [input, result leaf, extents]: the scalar leaf is strict in every element of the input,
        # where each extent is at least 1 (strict.py)
        "strict_witnesses": strict,
    }
    return ir, spec


def fused_program(expr: Expr) -> Expr:
    """The let-block the lowering compiles (aliases resolved, bindings fused,
    as lower_program does), as an expression: for inspection and for checking
    that fusion keeps the cost model's count.  (Here, not in fusion.py: it
    needs the Lowerer's base scope, and fusion sits below lower.)"""
    binds, out = split_program(expr)
    binds, out = resolve_aliases(binds, out)
    base = Lowerer(expr, "sparse").scope0
    binds, _ = fuse_with_scatters(binds, out_vars(out), base)
    return make_lets(binds, out)



def _out_spec(out, outs):
    # leaves are returned in the order of out_vars (duplicates returned twice)
    counter = iter(range(len(outs)))

    def go(o):
        if isinstance(o, Pair):
            return ["pair", go(o.fst), go(o.snd)]
        return ["leaf", next(counter)]

    return go(out)


__all__ = ["Lowerer", "hoist", "split_bracket", "lower_program", "fused_program", "aff_expr", "const_value"]
