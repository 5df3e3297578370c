"""Naive reverse mode, for comparison with the sparsity-aware adjoint (paper §1, §2.2).

The textbook transposition of a tensor-SSA program (Fig. 10), binding by
binding in reverse order, *without* the inner-product calculus:

* each access ``X[~v]`` is transposed in isolation to a dense one-hot
  generator over ``X``'s whole shape,
  ``gen[~a] sum[~g ~s] [p ∧ ~a = ~v]·dY[~g]·(other factor)``;
* the contributions to one variable are accumulated densely into a zero
  buffer, ``dX = gen[~a] (0 + C1[~a] + C2[~a] + …)``, an unbracketed
  addition at every element (``grad = zeros(); grad += C`` of imperative
  reverse mode, the "2·dy + 0 + 0 + ⋯" of §2.2);
* the inner-product filters are not propagated (no existential predicates,
  no masks) and nothing is simplified.

It computes the same values as the sparse adjoint; its cost is what the
paper's pathological examples (§1) exhibit: the adjoint of
``let A = diag(x) in trace(A)`` materializes the dense ``N × N`` ``dA``.
"""

from __future__ import annotations

from tensorlang.errors import TensorLangError, UnsupportedError, describe
from tensorlang.functions import lookup
from tensorlang.ir import (
    Add,
    Cmp,
    Const,
    Expr,
    Mul,
    Pair,
    PairT,
    Proj,
    Var,
    access,
    conj,
    fresh_index,
    fresh_var,
    lets,
    make_gens,
    make_lets,
    make_sums,
    shape_of,
    sym_aff,
)
from tensorlang.typecheck import iverson
from tensorlang.typecheck import type_of, zero_of

from .ssa_form import AddRHS, ConstRHS, ContractRHS, InputRHS, MapRHS, classify, is_tensor_ssa


def _affs(ivs):
    return [sym_aff(i) for i in ivs]


def _dense_sum(t, contribs: list) -> Expr:
    """``gen[~a] (0 + C1[~a] + …)``: dense accumulation into a zero buffer."""
    dims = shape_of(t)
    iv = [fresh_index("a") for _ in dims]
    acc: Expr = Const(0)
    for c in contribs:
        acc = Add(acc, access(c, _affs(iv)))
    return make_gens(list(zip(iv, dims)), acc)


def _contract_contribs(view: ContractRHS, dy: Expr) -> list:
    """One dense one-hot transposition per factor access: [(X, C), ...]."""
    g = list(view.gens)
    gi = _affs(i for i, _ in g)
    out = []
    for k, (x, idx) in enumerate(view.factors):
        dims = shape_of(x.type)
        a = [fresh_index("a") for _ in dims]
        onehot = conj(view.p, *[Cmp("==", sym_aff(ai), sym_aff(v)) for ai, v in zip(a, idx)])
        val: Expr = access(dy, gi)
        for j, (y, jdx) in enumerate(view.factors):
            if j != k:
                other = access(y, _affs(jdx))
                val = Mul(val, other) if j > k else Mul(other, val)
        c = make_gens(list(zip(a, dims)), make_sums(g + list(view.sums), iverson(onehot, val)))
        out.append((x, c))
    return out


def naive_transpose(e: Expr, wrt, seed: Var) -> Expr:
    """Signature: naive_transpose : SSA Expr × [input Var] × Var -> Expr.

    Same interface and result as ``adjoint.transpose``; dense accumulation.
    """
    if not is_tensor_ssa(e, canonical=False):
        raise UnsupportedError(f"naive adjoint needs tensor SSA (Fig. 10); normalize first: {describe(e)}")
    if seed.type is not type_of(e):
        raise TensorLangError(f"the cotangent {seed.name} has type {seed.type}, the output has type {type_of(e)}")
    binds, out = lets(e)
    contribs: dict = {}
    input_contribs: dict = {x: [] for x in wrt}

    def seed_out(o: Expr, dy: Expr):
        if isinstance(o, Pair):
            seed_out(o.fst, Proj(0, dy))
            seed_out(o.snd, Proj(1, dy))
        else:
            contribs.setdefault(o, []).append(dy)

    seed_out(out, seed)
    adjoint_lets = []
    for x, rhs in reversed(binds):
        cs = contribs.get(x)
        if not cs:
            continue  # unreachable from the output: no adjoint
        dx = fresh_var("d" + x.name, x.type)
        adjoint_lets.append((dx, _dense_sum(x.type, cs)))
        view = classify(rhs)
        iv = None
        match view:
            case InputRHS(var=v, path=path):
                if v in input_contribs:
                    input_contribs[v].append((tuple(reversed(path)), dx))
            case ConstRHS():
                pass
            case AddRHS(gens=g, p0=p0, x0=x0, p1=p1, x1=x1):
                iv = _affs(i for i, _ in g)
                for p, y in ((p0, x0), (p1, x1)):
                    c = fresh_var("c", y.type)
                    adjoint_lets.append((c, make_gens(g, iverson(p, access(dx, iv)))))
                    contribs.setdefault(y, []).append(c)
            case MapRHS(gens=g, p=p, fn=f, args=args):
                iv = _affs(i for i, _ in g)
                partials = lookup(f).partials(*[access(a, iv) for a in args])
                for y, pk in zip(args, partials):
                    c = fresh_var("c", y.type)
                    adjoint_lets.append((c, make_gens(g, iverson(p, Mul(pk, access(dx, iv))))))
                    contribs.setdefault(y, []).append(c)
            case ContractRHS():
                for y, ce in _contract_contribs(view, dx):
                    c = fresh_var("c", y.type)
                    adjoint_lets.append((c, ce))
                    contribs.setdefault(y, []).append(c)
            case _:
                raise UnsupportedError(f"not a tensor-SSA right-hand side: {describe(rhs)}")

    def assemble(t, path, items):
        if isinstance(t, PairT):
            return Pair(assemble(t.fst, path + (0,), items), assemble(t.snd, path + (1,), items))
        mine = [c for p, c in items if p == path]
        return _dense_sum(t, mine) if mine else zero_of(t)

    outs = [assemble(x.type, (), input_contribs[x]) for x in wrt]
    result = outs[-1]
    for o in reversed(outs[:-1]):
        result = Pair(o, result)
    res = make_lets(binds + adjoint_lets, result)
    type_of(res)
    return res
