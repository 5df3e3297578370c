"""Scalar expressions -> kernel-IR code (paper Section 4.3).

A mixin of :class:`~tensorlang.backend.lower.Lowerer` (split out of
lower.py, which builds the loops): the element of a gen, the term of a sum
or a scalar binding becomes statements and one kernel-IR float expression.
Array reads are proven in bounds here (``domains.prove_access``) before any
code exists; a compound sub-term shared in the DAG is computed once per
scope; a bracket around a sum narrows the sum's own loops (``sum_block``,
through the Lowerer's ``block``).
"""

from __future__ import annotations

from ..errors import TensorLangError, UnsupportedError, describe
from ..functions import expand_derivative, lookup
from ..ir import (
    Access,
    Add,
    Call,
    Const,
    Expr,
    Iverson,
    Let,
    Mul,
    Proj,
    SparseVar,
    Sum,
    TensorT,
    Var,
    accesses,
    conj,
    gens,
    shape_of,
    sums,
)
from . import kir as K
from .domains import Scope, aff_expr, has_rel, prove_access
from .hoist import occurrences, split_bracket
from .loopir import AccAdd, Assign, If
from .masks import unguarded
from .scalars import builtin, check_compiles, power_exponent


def const_value(v, node) -> float:
    """A constant's exact float (ints beyond float range are refused)."""
    try:
        return float(v)
    except OverflowError:
        raise TensorLangError(f"the constant {describe(node)} does not fit a float64") from None



class ExprLowering:
    def scalar(self, e: Expr, sc: Scope):
        """Signature: scalar : Expr -> ([stmt], kernel-IR float expression).

        A compound sub-term shared in the DAG (``d·d`` for ``d ** 2``) is
        computed once per scope into a local and reused."""
        if isinstance(e, (Add, Mul, Call, Sum, Iverson, Let)) and self.shared.get(e, 0) > 1:
            key = (id(sc), e)
            got = self.cse.get(key)
            if got is not None:
                return [], got
            st, code = self._scalar(e, sc)
            t = self.local()
            self.cse[key] = K.Name(t)
            self._keep.append(sc)  # keep id(sc) unique while memoised
            return st + [Assign(t, code)], K.Name(t)
        return self._scalar(e, sc)

    def _scalar(self, e: Expr, sc: Scope):
        match e:
            case Const(value=v):
                return [], K.Float(const_value(v, e))
            case Var() | Proj():
                got = self.constants.get(e)
                return [], got if got is not None else K.Name(self.scalar_var(e))
            case Access():
                base, idx = accesses(e)
                if isinstance(base, SparseVar):
                    got = self.sparse_load(base, idx)
                    if got is not None:
                        return [], got
                if isinstance(base, Var) and base in self.packed:
                    return [], self.packed_load(base, idx)
                name, ext = self.array_of(base)
                if len(idx) != len(ext):
                    raise UnsupportedError(f"partial access {describe(e)}")
                prove_access(sc, idx, ext, e)
                # proven in bounds, hence >= 0: an unsigned index spares Numba's
                # negative-index wraparound test, which blocks vectorisation
                return [], K.Load(name, tuple(aff_expr(a, sc) for a in idx))
            case Add(lhs=a, rhs=b):
                s1, c1 = self.scalar(a, sc)
                s2, c2 = self.scalar(b, sc)
                return s1 + s2, K.sum_of([c1, c2])  # exact: 0 + x = x; n-ary
            case Mul(lhs=a, rhs=b):
                s1, c1 = self.scalar(a, sc)
                s2, c2 = self.scalar(b, sc)
                return s1 + s2, K.mul_of(c1, c2)  # exact: 1·x = x, -1·x = -x
            case Call(fn=f, args=args) if f.startswith("D[") and f.endswith("]"):
                # the black-box derivative D[f] of rule 6.6: emit its expansion
                # sum_k (d_k f)(x)·t_k from f's registered partials
                k = len(args) // 2
                ex = expand_derivative(f[2:-1], args[:k], args[k:])
                for t, c in occurrences(ex).items():  # tanh' = 1 - tanh(x)·tanh(x): tanh once
                    self.shared[t] = self.shared.get(t, 0) + c
                return self.scalar(ex, sc)
            case Call(fn=f, args=args):
                return self.call(f, args, sc)
            case Iverson(pred=p, body=b):
                binds, inner = sums(b)
                if binds:  # a bracket around a sum narrows the sum's own loops
                    q, body = split_bracket(inner)
                    return self.sum_block(binds, conj(p, q), body, sc)
                ps, pc = self.pred_code(p, sc)
                if pc == K.Bool(False):
                    return ps, K.Float(0.0)
                if has_rel(p) and self.mode == "sparse":
                    got = unguarded(self, lambda: self.scalar(b, sc), b)
                    if got is not None:  # a data mask: a select, no branch (see unguarded)
                        return ps + got[0], K.Select(pc, got[1], K.Float(0.0))
                bs, bc = self.scalar(b, sc.child(cons=[sc.pred(p)]))
                if pc == K.Bool(True):
                    return ps + bs, bc
                t = self.local()
                return ps + [Assign(t, K.Float(0.0)), If(pc, tuple(bs + [Assign(t, bc)]))], K.Name(t)
            case Sum():
                binds, inner = sums(e)
                q, body = split_bracket(inner)
                return self.sum_block(binds, q, body, sc)
            case Let(var=v, value=e0, body=e1) if isinstance(v.type, TensorT):
                # a tensor let under a loop: a local array per iteration
                gb, gbody = gens(e0)
                st = self.array_binding(v, gb, gbody, sc, "temporary")
                s1, c1 = self.scalar(e1, sc)
                return st + s1, c1
            case Let(var=v, value=e0, body=e1):  # a scalar let: a local
                s0, c0 = self.scalar(e0, sc)
                name = self.local()
                self.scalars[v] = name
                if isinstance(c0, K.Float) and not s0:
                    self.constants[v] = c0
                else:  # (a var bound again: never the earlier constant)
                    self.constants.pop(v, None)
                s1, c1 = self.scalar(e1, sc)
                return s0 + [Assign(name, c0)] + s1, c1
            case _:
                raise UnsupportedError(f"the backend cannot lower {describe(e)}")

    def call(self, f: str, args, sc: Scope):
        st, codes = [], []
        for a in args:
            s1, c1 = self.scalar(a, sc)
            st += s1
            codes.append(c1)
        codes = tuple(codes)
        node = builtin(f, codes)
        if node is not None:
            return st, node
        k = power_exponent(f)
        if k is not None:  # NumPy's x ** k for every real k (as the evaluator)
            if k == 0:
                return st, K.Float(1.0)
            if k == 1:
                return st, codes[0]
            t = self.local()
            st.append(Assign(t, codes[0]))
            if k == 2:
                return st, K.FMul(K.Name(t), K.Name(t))
            return st, K.FPow(K.Name(t), k)
        lookup(f)  # an unknown function is the registry's error
        check_compiles(f)
        if f not in self.functions:
            self.functions[f] = self.names.new("function")
        return st, K.FCall(self.functions[f], codes, numpy=False)

    def sum_block(self, binds, p, body, sc: Scope):
        acc = self.local()

        def emit(inner, dims):
            st, code = self.scalar(body, inner)
            return st + [AccAdd(acc, code)]

        stmts, _ = self.block(binds, p, sc, emit, "sum", body)
        return [Assign(acc, K.Float(0.0))] + stmts, K.Name(acc)

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
        if leaf is not None and isinstance(leaf[0], SparseVar) and leaf not in self.leaves:
            # a read not at a relation loop's position: the kernel takes the
            # tensor densified (correct, O(n·m) memory; see sparse_load)
            self.leaves[leaf] = (self.names.new("input"), shape_of(leaf[0].type))
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
