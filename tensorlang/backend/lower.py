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
inside (the naive baseline).

Brackets are first hoisted through products and merged (``[p]·a · [q]·b =
[p ∧ q]·(a·b)``, the bracket's value being zero where ``p`` fails, Fig. 4
rule 4.12), so a bracket deep in a product still narrows its loops.

Every array access is proven in bounds with isl before any code exists.
"""

from __future__ import annotations

import math

from ..functions import expand_derivative
from ..errors import TensorLangError, UnsupportedError, describe
from ..ir import (
    Access,
    Add,
    Aff,
    And,
    BoolLit,
    Call,
    Cmp,
    Const,
    Exists,
    Expr,
    Iverson,
    Let,
    Mul,
    Or,
    Pair,
    PairT,
    Proj,
    RealT,
    Rel,
    Sum,
    TensorT,
    Var,
    accesses,
    conj,
    gens,
    input_vars,
    relations_of,
    shape_of,
    size_vars,
    sums,
)
from .astgen import to_loops
from .hoist import hoist, occurrences, split_bracket
from .domains import (
    Scope,
    ast_for,
    box_cons,
    conjuncts,
    covers,
    has_rel,
    prove_access,
    py_ident,
    size_name,
)
from .loopir import AccAdd, Alloc, Assign, Break, If, KernelIR, Loop, Store


# -- scalar functions ---------------------------------------------------------------

_FN = {
    "exp": "np.exp({0})",
    "log": "np.log({0})",
    "sin": "np.sin({0})",
    "cos": "np.cos({0})",
    "tanh": "np.tanh({0})",
    "sqrt": "np.sqrt({0})",
    "div": "({0} / {1})",
    "sigmoid": "(1.0 / (1.0 + np.exp(-({0}))))",
}


def _const_code(v) -> str:
    x = float(v)
    if math.isfinite(x):
        return repr(x)
    return "np.nan" if math.isnan(x) else ("np.inf" if x > 0 else "(-np.inf)")


# -- the lowerer --------------------------------------------------------------------


class Lowerer:
    def __init__(self, program: Expr, mode: str):
        if mode not in ("sparse", "naive"):
            raise TensorLangError(f"unknown compile mode {mode!r}; use 'sparse' or 'naive'")
        self.mode = mode
        self._count = 0
        # (Relation, column order) -> {"ptrs": prefix lengths, "cols": columns}
        self.rel_use: dict = {}
        self.dense_rels: set = set()  # relations tested through their dense table
        self.helpers: set = set()
        self.allocs: list = []
        # sizes and inputs
        svs = set(size_vars(program))
        for r in relations_of(program):
            for a in r.extents:
                svs |= a.size_vars()
        self.sizes = sorted(svs, key=lambda s: s.name)
        symmap = {s: size_name(s) for s in self.sizes}
        params = [size_name(s) for s in self.sizes]
        cons = [f"{p} >= 0" for p in params]
        self.scope0 = Scope(symmap, params, cons, {"positive": list(params), "needs_positive": False})
        self.leaves: dict = {}  # (Var, path) -> (python name, extents)
        used: set = set()
        for v in input_vars(program):
            for path, t in _leaves(v.type):
                ext = shape_of(t)
                if not isinstance(_elem(t), RealT):
                    raise UnsupportedError(f"input {v.name} has an array-of-structs type {v.type}")
                name = "a_" + py_ident(v.name) + "".join(f"_{k}" for k in path)
                while name in used:  # names that differ only in punctuation
                    name += "_"
                used.add(name)
                self.leaves[(v, path)] = (name, ext)
                cons += [f"{self.scope0.aff(n)} >= 0" for n in ext]
        for r in relations_of(program):
            cons += [f"{self.scope0.aff(n)} >= 0" for n in r.extents]
        self.arrays: dict = {}  # let Var -> (python name, extents)
        self.scalars: dict = {}  # let Var -> python name

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{py_ident(base)}_{self._count}"

    # -- bindings ----------------------------------------------------------------------
    def binding(self, x: Var, rhs: Expr, role: str) -> list:
        gb, body = gens(rhs)
        body = hoist(body)
        self.shared = occurrences(body)
        self.cse, self._keep = {}, []
        if not gb:
            st, code = self.scalar(body, self.scope0)
            name = self.fresh("s_" + x.name)
            self.scalars[x] = name
            return st + [Assign(name, code)]
        name = self.fresh("t_" + x.name)
        ext = [n for _, n in gb]
        p, s = split_bracket(body)

        def emit(sc, dims):
            st, code = self.scalar(s, sc)
            return st + [Store(name, tuple(_uindex(d) for d in dims), code)]

        stmts, full = self.block(gb, p, self.scope0, emit, "gen")
        alloc = Alloc(name, tuple(self.py_aff(n, self.scope0) for n in ext), not full, role, x.name)
        self.allocs.append(alloc)
        self.arrays[x] = (name, tuple(ext))
        return [alloc] + stmts

    # -- blocks ---------------------------------------------------------------------------
    def block(self, binds, p, scope: Scope, emit, kind: str):
        """Loops over ``binds`` where ``p`` holds; returns (stmts, covers_box)."""
        names = [self.fresh(i.name) for i, _ in binds]
        syms = {i: nm for (i, _), nm in zip(binds, names)}
        sc = scope.child(syms)
        box = box_cons(names, [n for _, n in binds], sc)
        cs = conjuncts(p)
        driver = None
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
        inner = sc.child(params=names, cons=box + dom)
        body_scope = inner.child(cons=[inner.pred(t) for t in tests])
        body = emit(body_scope, names)
        if tests:
            tst, tcode = self.pred_code(conj(*tests), inner)
            if tcode != "True":
                body = tst + [If(tcode, body)] if tcode != "False" else []
        if driver is None:
            stmts = to_loops(ast_for(scope, names, box + dom), names, body, kind)
            full = not tests and not dom or (not tests and covers(scope, names, box, dom))
        else:
            stmts = self._driven(driver, names, syms, scope, sc, box + dom, body, kind)
            full = False
        if kind == "gen" and scope is self.scope0:
            _mark_parallel(stmts)
        return stmts, full

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
        return _rel_name(r, perm)

    def _driven(self, rel: Rel, names, syms, scope: Scope, sc: Scope, cons, body, kind):
        perm, L = self._drivable(rel, names, syms)
        r = rel.rel
        args = [rel.args[k] for k in perm]
        exts = [r.extents[k] for k in perm]
        nm = self._use_rel(r, perm, ptr=L)
        driven = [syms[a.terms[0][0]] for a in args[L:]]
        rest = [d for d in names if d not in driven]
        rows = self._row_code(args[:L], exts[:L], scope)
        pvar = self.fresh("p")
        assigns = []
        for k, d in enumerate(driven):
            self._use_rel(r, perm, col=L + k)
            assigns.append(Assign(d, f"{nm}_c{L + k}[{pvar}]"))
        dscope = scope.child(
            {i: syms[i] for i in syms if syms[i] in driven},
            params=driven,
            cons=[f"0 <= {d} < {scope.aff(n)}" for d, n in zip(driven, exts[L:])],
        )
        inner = to_loops(ast_for(dscope, rest, cons), rest, body, kind)
        ptr = f"{nm}_ptr{L}"
        loop = Loop(pvar, f"{ptr}[{rows}]", f"{ptr}[({rows}) + 1]", 1, assigns + inner, "rel")
        need = [
            f"(0 <= {self.py_aff(a, scope)} < {self.py_aff(n, scope)})"
            for a, n in zip(args[:L], exts[:L])
            if not scope.holds(f"0 <= {scope.aff(a)} < {scope.aff(n)}")
        ]
        if need:
            return [If(" and ".join(need), [loop])]
        return [loop]

    def _row_code(self, args, exts, scope: Scope) -> str:
        code = None
        for a, n in zip(args, exts):
            a_code = self.py_aff(a, scope)
            code = a_code if code is None else f"({code}) * ({self.py_aff(n, scope)}) + ({a_code})"
        return code or "0"

    # -- scalars ---------------------------------------------------------------------------
    def py_aff(self, a: Aff, scope: Scope) -> str:
        out = ""
        for s, c in a.terms:
            name = scope.symmap.get(s)
            if name is None:
                raise UnsupportedError(f"index {a} mentions {s!r}, which is not bound here")
            term = name if abs(c) == 1 else f"{abs(c)} * {name}"
            out = (f"-{term}" if c < 0 else term) if not out else f"{out} {'-' if c < 0 else '+'} {term}"
        if not out:
            return str(a.const)
        if a.const:
            out = f"{out} {'-' if a.const < 0 else '+'} {abs(a.const)}"
        return out

    def scalar(self, e: Expr, sc: Scope):
        """Signature: scalar : Expr -> ([stmt], Python expression).

        A compound sub-term shared in the DAG (``d·d`` for ``d ** 2``) is
        computed once per scope into a temporary and reused."""
        if isinstance(e, (Add, Mul, Call, Sum, Iverson, Let)) and self.shared.get(e, 0) > 1:
            key = (id(sc), e)
            got = self.cse.get(key)
            if got is not None:
                return [], got
            st, code = self._scalar(e, sc)
            t = self.fresh("c")
            self.cse[key] = t
            self._keep.append(sc)  # keep id(sc) unique while memoised
            return st + [Assign(t, code)], t
        return self._scalar(e, sc)

    def _scalar(self, e: Expr, sc: Scope):
        match e:
            case Const(value=v):
                return [], _const_code(v)
            case Var() | Proj():
                return [], self.scalar_var(e)
            case Access():
                base, idx = accesses(e)
                name, ext = self.array_of(base)
                if len(idx) != len(ext):
                    raise UnsupportedError(f"partial access {describe(e)}")
                prove_access(sc, idx, ext, e)
                # proven in bounds, hence >= 0: an unsigned index spares Numba's
                # negative-index wraparound test, which blocks vectorisation
                return [], f"{name}[{', '.join(_uindex(self.py_aff(a, sc)) for a in idx)}]"
            case Add(lhs=a, rhs=b):
                s1, c1 = self.scalar(a, sc)
                s2, c2 = self.scalar(b, sc)
                if c1 == "0.0" or c2 == "0.0":  # exact: 0 + x = x
                    return s1 + s2, c2 if c1 == "0.0" else c1
                return s1 + s2, f"({c1} + {c2})"
            case Mul(lhs=a, rhs=b):
                s1, c1 = self.scalar(a, sc)
                s2, c2 = self.scalar(b, sc)
                if c1 == "1.0" or c2 == "1.0":  # exact: 1 * x = x
                    return s1 + s2, c2 if c1 == "1.0" else c1
                if c1 == "-1.0":
                    return s1 + s2, f"(-{c2})"
                return s1 + s2, f"({c1} * {c2})"
            case Call(fn=f, args=args) if f.startswith("D[") and f.endswith("]"):
                # the black-box derivative D[f] of rule 6.6: emit its expansion
                # sum_k (d_k f)(x)·t_k from f's registered partials
                k = len(args) // 2
                return self.scalar(expand_derivative(f[2:-1], args[:k], args[k:]), sc)
            case Call(fn=f, args=args):
                st, codes = [], []
                for a in args:
                    s1, c1 = self.scalar(a, sc)
                    st += s1
                    codes.append(c1)
                if f in _FN:
                    return st, _FN[f].format(*codes)
                if f.startswith("pow[") and f.endswith("]"):
                    k = float(f[4:-1])
                    t = self.fresh("t")
                    st.append(Assign(t, codes[0]))
                    if k == 2:
                        return st, f"({t} * {t})"
                    if k.is_integer():
                        return st, f"({t} ** {int(k)})"
                    return st, f"({t} ** {k!r})"
                raise UnsupportedError(f"the backend has no compiled form of the function {f!r} in {describe(e)}")
            case Iverson(pred=p, body=b):
                binds, inner = sums(b)
                if binds:  # a bracket around a sum narrows the sum's own loops
                    q, body = split_bracket(inner)
                    return self.sum_block(binds, conj(p, q), body, sc)
                ps, pc = self.pred_code(p, sc)
                if pc == "False":
                    return ps, "0.0"
                bs, bc = self.scalar(b, sc.child(cons=[sc.pred(p)]))
                if pc == "True":
                    return ps + bs, bc
                t = self.fresh("t")
                return ps + [Assign(t, "0.0"), If(pc, bs + [Assign(t, bc)])], t
            case Sum():
                binds, inner = sums(e)
                q, body = split_bracket(inner)
                return self.sum_block(binds, q, body, sc)
            case Let(var=v, value=e0, body=e1):  # a scalar let: a local
                s0, c0 = self.scalar(e0, sc)
                name = self.fresh("s_" + v.name)
                self.scalars[v] = name
                s1, c1 = self.scalar(e1, sc)
                return s0 + [Assign(name, c0)] + s1, c1
            case _:
                raise UnsupportedError(f"the backend cannot lower {describe(e)}")

    def sum_block(self, binds, p, body, sc: Scope):
        acc = self.fresh("acc")

        def emit(inner, dims):
            st, code = self.scalar(body, inner)
            return st + [AccAdd(acc, code)]

        stmts, _ = self.block(binds, p, sc, emit, "sum")
        return [Assign(acc, "0.0")] + stmts, acc

    def scalar_var(self, e: Expr) -> str:
        if isinstance(e, Var) and e in self.scalars:
            return self.scalars[e]
        leaf = self._leaf(e)
        if leaf is None or leaf not in self.leaves or self.leaves[leaf][1]:
            raise UnsupportedError(f"the backend cannot use {describe(e)} as a scalar")
        return self.leaves[leaf][0]

    def array_of(self, base: Expr):
        if isinstance(base, Var) and base in self.arrays:
            return self.arrays[base]
        leaf = self._leaf(base)
        if leaf is None or leaf not in self.leaves:
            raise UnsupportedError(f"the backend cannot index {describe(base)}")
        return self.leaves[leaf]

    def _leaf(self, e: Expr):
        path = []
        while isinstance(e, Proj):
            path.append(e.index)
            e = e.arg
        if not isinstance(e, Var) or e.uid != 0:
            return None
        return (e, tuple(reversed(path)))

    # -- predicates as code -----------------------------------------------------------------
    def pred_code(self, p, sc: Scope):
        """Signature: pred_code : Pred -> ([stmt], Python boolean expression).

        Affine parts are simplified by isl against what the scope already
        knows (``gist``), so a bracket implied by the loop bounds costs nothing."""
        if not has_rel(p):
            got = affine_test(sc, p)
            if got is not None:
                return [], got
        match p:
            case BoolLit(value=v):
                return [], "True" if v else "False"
            case Cmp(op=op, lhs=a, rhs=b):
                return [], f"(({self.py_aff(a, sc)}) {op} ({self.py_aff(b, sc)}))"
            case And(lhs=a, rhs=b):
                s1, c1 = self.pred_code(a, sc)
                if c1 == "False":
                    return s1, "False"
                s2, c2 = self.pred_code(b, sc.child(cons=[sc.pred(a)]) if not has_rel(a) else sc)
                if c1 == "True" or c2 == "False":
                    return s1 + s2, c2
                return s1 + s2, c1 if c2 == "True" else f"({c1} and {c2})"
            case Or(lhs=a, rhs=b):
                s1, c1 = self.pred_code(a, sc)
                if c1 == "True":
                    return s1, "True"
                s2, c2 = self.pred_code(b, sc)
                if c1 == "False" or c2 == "True":
                    return s1 + s2, c2
                return s1 + s2, c1 if c2 == "False" else f"({c1} or {c2})"
            case Rel(rel=r, args=args):
                # a test reads the relation's dense boolean table (built anyway
                # when the inputs are validated); out of range reads as false
                self.dense_rels.add(r)
                rng = [
                    f"(0 <= {self.py_aff(a, sc)} < {self.py_aff(n, sc)})"
                    for a, n in zip(args, r.extents)
                    if affine_test(sc, conj(Cmp("<=", Aff((), 0), a), Cmp("<", a, n))) != "True"
                ]
                look = f"{_rel_name(r, ())}_dense[{', '.join(_uindex(self.py_aff(a, sc)) for a in args)}]"
                return [], "(" + " and ".join(rng + [look]) + ")"
            case Exists(var=i, extent=n, body=b):
                ex = self.fresh("ex")
                v = self.fresh(i.name)
                inner = sc.child({i: v}, params=[v], cons=[f"0 <= {v} < {sc.aff(n)}"])
                bs, bc = self.pred_code(b, inner)
                loop = Loop(v, "0", self.py_aff(n, sc), 1, bs + [If(bc, [Assign(ex, "True"), Break()])], "exists")
                return [Assign(ex, "False"), loop], ex
            case _:
                raise UnsupportedError(f"not a predicate: {p!r}")


def affine_test(sc: Scope, p) -> str | None:
    """Python code of the affine predicate ``p`` simplified against the
    scope's constraints: "True"/"False" when decided, else isl's own
    expression of the gisted set; None if isl cannot take it."""
    import islpy as isl

    from .astgen import expr_code

    try:
        ctx = isl.Set(sc.context_text())
        test = isl.Set(f"{sc.header()} -> {{ : {sc.pred(p)} }}")
    except (isl.Error, UnsupportedError):
        return None
    if ctx.is_subset(test):
        return "True"
    if (test & ctx).is_empty():
        return "False"
    g = test.coalesce().gist(ctx).coalesce()
    if g.n_basic_set() > 8:  # isl's disjunctive form can grow: test the original then
        return None
    code = expr_code(isl.AstBuild.from_context(ctx).expr_from_set(g), {})
    return f"({code})" if " " in code else code  # an operand of and/or


def _uindex(code: str) -> str:
    return f"U({code})"


def _rel_name(r, perm) -> str:
    base = "rel_" + py_ident(r.name)
    if not perm or perm == tuple(range(len(perm))):
        return base
    return base + "_t" + "".join(map(str, perm))


def _leaves(t, path=()):
    if isinstance(t, PairT):
        return _leaves(t.fst, path + (0,)) + _leaves(t.snd, path + (1,))
    return [(path, t)]


def _elem(t):
    while isinstance(t, TensorT):
        t = t.elem
    return t


def _mark_parallel(stmts) -> None:
    """Outermost loops of a top-level gen block write disjoint elements."""
    for s in stmts:
        if isinstance(s, Loop):
            s.parallel = True
        elif isinstance(s, If):
            _mark_parallel(s.then)
            _mark_parallel(s.orelse)


def lower_program(program: Expr, mode: str = "sparse"):
    """Signature: lower_program : Expr -> (KernelIR, spec).

    ``program`` must already be in the backend's input grammar (see
    tensorlang.backend.fusion).  ``spec`` describes the kernel's arguments
    and results for the caller (JSON-serialisable).
    """
    from .fusion import fuse, out_vars, resolve_aliases, split_program

    binds, out = split_program(program)
    binds, out = resolve_aliases(binds, out)
    lw = Lowerer(program, mode)
    outs = out_vars(out)
    binds = fuse(binds, [o for o in outs if isinstance(o, Var)], lw.scope0)
    body = []
    outset = set(outs)
    for x, rhs in binds:
        body += lw.binding(x, rhs, "output" if x in outset else "temporary")
    results = []
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
            results.append(f"{name}.copy()" if ext else name)
    sizes = [s.name for s in lw.sizes]
    args = [size_name(s) for s in lw.sizes]
    inputs = []
    for (v, path), (name, ext) in sorted(lw.leaves.items(), key=lambda kv: kv[1][0]):
        args.append(name)
        inputs.append([v.name, list(path), len(ext)])
    rels = []
    for (r, perm), use in sorted(lw.rel_use.items(), key=lambda kv: (kv[0][0].name, kv[0][1])):
        ptrs, cols = sorted(use["ptrs"]), sorted(use["cols"])
        nm = _rel_name(r, perm)
        args += [f"{nm}_ptr{L}" for L in ptrs] + [f"{nm}_c{k}" for k in cols]
        rels.append([r.name, list(perm), ptrs, cols])
    dense = []
    for r in sorted(lw.dense_rels, key=lambda r: r.name):
        args.append(f"{_rel_name(r, ())}_dense")
        dense.append(r.name)
    work = []
    for x, rhs in binds:
        g, _ = gens(rhs)
        if g:
            work.append([[[[s.name, c] for s, c in n.terms], n.const] for _, n in g])
    # Temporaries come from a per-kernel pool: fresh 8 MB arrays each call
    # cost more in page faults than a gradient's arithmetic.
    temps = []
    for x, (name, ext) in lw.arrays.items():
        alloc = next(a for a in lw.allocs if a.name == name)
        if alloc.role == "temporary":
            alloc.pooled = True
            args.append(name)
            temps.append([name, [[[[s.name, c] for s, c in n.terms], n.const] for n in ext]])
    ir = KernelIR(args, lw.allocs, body, results, lw.helpers)
    spec = {
        "sizes": sizes,
        "inputs": inputs,
        "relations": rels,
        "outputs": _out_spec(out, outs),
        "work": work,
        "mode": mode,
        "needs_positive_sizes": lw.scope0.facts["needs_positive"],
        "temporaries": temps,
        "dense_relations": dense,
    }
    return ir, spec


def _out_spec(out, outs):
    # leaves are returned in the order of out_vars (duplicates returned twice)
    counter = iter(range(len(outs)))

    def go2(o):
        if isinstance(o, Pair):
            return ["pair", go2(o.fst), go2(o.snd)]
        return ["leaf", next(counter)]

    return go2(out)


__all__ = ["Lowerer", "hoist", "split_bracket", "lower_program"]
