"""Hand-written tensor-SSA programs (Fig. 10) for the derivative tests.

Written directly in the grammar of ``passes/ssa_form`` (not produced by the
normalizer), so the derivative rules are tested independently of Section 5.
Each example returns ``(program, inputs: dict name -> Var, make_values(rng, sizes))``.
"""

from __future__ import annotations

import numpy as np

import tensorlang as tl
from tensorlang.ir import (
    TRUE,
    Cmp,
    Rel,
    conj,
    fresh_index,
    fresh_var,
    make_lets,
    shape_of,
    sym_aff,
    tensor_type,
)
from tensorlang.passes.ssa_form import (
    AddRHS,
    ConstRHS,
    ContractRHS,
    InputRHS,
    MapRHS,
    to_expr,
)


def I(name="i"):  # noqa: E743 - a fresh index variable
    return fresh_index(name)


def A(i):
    return sym_aff(i)


def eq(a, b):
    return Cmp("==", A(a) if not hasattr(a, "terms") else a, A(b) if not hasattr(b, "terms") else b)


class Builder:
    """``b.let("X", rhs)`` appends a binding; ``b.build(out)`` closes the block."""

    def __init__(self):
        self.binds = []

    def let(self, name, view, t=None):
        e = to_expr(view)
        v = fresh_var(name, tl.type_of(e) if t is None else t)
        self.binds.append((v, e))
        return v

    def inp(self, x, *path):
        return self.let(x.name.upper(), InputRHS(x, tuple(path)))

    def build(self, out):
        return make_lets(self.binds, out)


def shape_vals(rng, t, sizes):
    dims = tuple(a.evaluate(sizes) for a in shape_of(t))
    return rng.normal(size=dims) if dims else float(rng.normal())


def convolution():
    """P = gen[i:n] sum[j:m] x[i - j + m - 1]·c[j] (Section 2.1, offset by m - 1)."""
    n, m = tl.sizes("n m")
    x, c = tl.tensor("x", n + m - 1), tl.tensor("c", m)
    b = Builder()
    X, C = b.inp(x), b.inp(c)
    i, j, a, k = I("i"), I("j"), I("a"), I("b")
    P = b.let("P", ContractRHS(((i, n),), ((j, m), (a, n + m - 1), (k, m)),
                               conj(eq(A(a), A(i) - A(j) + m - 1), eq(k, j)), ((X, (a,)), (C, (k,)))))
    return b.build(P), {"x": x, "c": c}


def deconvolution_loss():
    """l = sum[i:n] (P[i] - z[i])² with P the convolution (Section 2.1)."""
    n, m = tl.sizes("n m")
    x, c, z = tl.tensor("x", n + m - 1), tl.tensor("c", m), tl.tensor("z", n)
    b = Builder()
    X, C, Z = b.inp(x), b.inp(c), b.inp(z)
    i, j, a, k = I("i"), I("j"), I("a"), I("b")
    P = b.let("P", ContractRHS(((i, n),), ((j, m), (a, n + m - 1), (k, m)),
                               conj(eq(A(a), A(i) - A(j) + m - 1), eq(k, j)), ((X, (a,)), (C, (k,)))))
    g = I("g")
    M1 = b.let("M", ConstRHS(((g, n),), -1))
    g = I("g")
    NZ = b.let("NZ", ContractRHS(((g, n),), (), TRUE, ((M1, (g,)), (Z, (g,)))))
    g = I("g")
    R = b.let("R", AddRHS(((g, n),), TRUE, P, TRUE, NZ))
    g = I("g")
    SQ = b.let("SQ", ContractRHS(((g, n),), (), TRUE, ((R, (g,)), (R, (g,)))))
    s = I("s")
    L = b.let("L", ContractRHS((), ((s, n),), TRUE, ((SQ, (s,)),)))
    return b.build(L), {"x": x, "c": c, "z": z}


def diag_traces(k: int):
    """let A = diag(x) in trace(A) + ⋯ + trace(A) (k traces; Section 1, example 1)."""
    N = tl.size("N")
    x = tl.tensor("x", N)
    b = Builder()
    X = b.inp(x)
    i, j, q = I("i"), I("j"), I("k")
    Am = b.let("A", ContractRHS(((i, N), (j, N)), ((q, N),), conj(eq(i, j), eq(q, i)), ((X, (q,)),)))
    i, j = I("i"), I("j")
    T = b.let("T", ContractRHS((), ((i, N), (j, N)), eq(i, j), ((Am, (i, j)),)))
    S = T
    for _ in range(k - 1):
        S = b.let("S", AddRHS((), TRUE, S, TRUE, T))
    return b.build(S), {"x": x}


def diag_dot():
    """let A = diag(x) in dot(A[:,0], A[0,:]) (Section 1, example 2)."""
    N = tl.size("N")
    x = tl.tensor("x", N)
    b = Builder()
    X = b.inp(x)
    i, j, q = I("i"), I("j"), I("k")
    Am = b.let("A", ContractRHS(((i, N), (j, N)), ((q, N),), conj(eq(i, j), eq(q, i)), ((X, (q,)),)))
    g, a, c = I("g"), I("a"), I("b")
    Col = b.let("Col", ContractRHS(((g, N),), ((a, N), (c, N)), conj(eq(a, g), Cmp("==", A(c), sym_aff(c) * 0)), ((Am, (a, c)),)))
    g, a, c = I("g"), I("a"), I("b")
    Row = b.let("Row", ContractRHS(((g, N),), ((a, N), (c, N)), conj(Cmp("==", A(a), sym_aff(a) * 0), eq(c, g)), ((Am, (a, c)),)))
    a, c = I("a"), I("b")
    D = b.let("D", ContractRHS((), ((a, N), (c, N)), eq(a, c), ((Col, (a,)), (Row, (c,)))))
    return b.build(D), {"x": x}


def maps():
    """sum[i] div(tanh(exp(x[i])), exp(x[i])) + sin(x[i])·y[i]: unary and binary maps."""
    n = tl.size("n")
    x, y = tl.tensor("x", n), tl.tensor("y", n)
    b = Builder()
    X, Y = b.inp(x), b.inp(y)
    g = I("g")
    E = b.let("E", MapRHS(((g, n),), TRUE, "exp", (X,)))
    g = I("g")
    T = b.let("T", MapRHS(((g, n),), TRUE, "tanh", (E,)))
    g = I("g")
    Q = b.let("Q", MapRHS(((g, n),), Cmp("<", A(g), tl.size("n") - 1), "div", (T, E)))
    g = I("g")
    S = b.let("S", MapRHS(((g, n),), TRUE, "sin", (X,)))
    g = I("g")
    SY = b.let("SY", ContractRHS(((g, n),), (), TRUE, ((S, (g,)), (Y, (g,)))))
    g = I("g")
    U = b.let("U", AddRHS(((g, n),), TRUE, Q, Cmp("<=", sym_aff(g) * 0 + 1, A(g)), SY))
    s = I("s")
    L = b.let("L", ContractRHS((), ((s, n),), TRUE, ((U, (s,)),)))
    return b.build(L), {"x": x, "y": y}


def pairs():
    """Struct-of-arrays input v = (a, b) and a pair output (M, L): rules 6.26-6.28."""
    n = tl.size("n")
    v = tl.var("v", tl.pair_type(tensor_type([n]), tensor_type([n])))
    w = tl.tensor("w", n)
    b = Builder()
    Av = b.let("Va", InputRHS(v, (0,)))
    Bv = b.let("Vb", InputRHS(v, (1,)))
    W = b.inp(w)
    g = I("g")
    M = b.let("M", ContractRHS(((g, n),), (), TRUE, ((Av, (g,)), (Bv, (g,)))))
    g = I("g")
    MW = b.let("MW", ContractRHS(((g, n),), (), Cmp("<", A(g), tl.size("n") - 1), ((M, (g,)), (W, (g,)))))
    s = I("s")
    L = b.let("L", ContractRHS((), ((s, n),), TRUE, ((MW, (s,)),)))
    from tensorlang.ir import Pair

    return b.build(Pair(M, Pair(L, Av))), {"v": v, "w": w}


def qform():
    """x^T A x = sum[i] x[i]·(sum[j] A[i,j]·x[j]) (the paper's qform)."""
    n = tl.size("n")
    x, Am = tl.tensor("x", n), tl.tensor("A", n, n)
    b = Builder()
    X, AA = b.inp(x), b.inp(Am)
    g, a, c, d = I("g"), I("a"), I("b"), I("c")
    Y = b.let("Y", ContractRHS(((g, n),), ((a, n), (c, n), (d, n)), conj(eq(a, g), eq(d, c)), ((AA, (a, c)), (X, (d,)))))
    a, c = I("a"), I("b")
    L = b.let("L", ContractRHS((), ((a, n), (c, n)), eq(a, c), ((X, (a,)), (Y, (c,)))))
    return b.build(L), {"x": x, "A": Am}


def relation_spmv():
    """y = gen[i] sum[j] [R(i,j)]·W[i,j]·x[j], loss sum[i] y[i]·y[i] (a data predicate)."""
    n, m = tl.sizes("n m")
    R = tl.relation("R", n, m)
    x, W = tl.tensor("x", m), tl.tensor("W", n, m)
    b = Builder()
    X, WW = b.inp(x), b.inp(W)
    g, a, c, d = I("g"), I("a"), I("b"), I("c")
    Y = b.let("Y", ContractRHS(((g, n),), ((a, n), (c, m), (d, m)),
                               conj(eq(a, g), eq(d, c), Rel(R, (A(a), A(c)))), ((WW, (a, c)), (X, (d,)))))
    g = I("g")
    YY = b.let("YY", ContractRHS(((g, n),), (), TRUE, ((Y, (g,)), (Y, (g,)))))
    s = I("s")
    L = b.let("L", ContractRHS((), ((s, n),), TRUE, ((YY, (s,)),)))
    return b.build(L), {"x": x, "W": W, "R": R}


def dead_code(k: int = 3):
    """let z0 = 2·x in … let z(k-1) = 2·x in 2·x on a scalar (§2.2): dead bindings."""
    x = tl.scalar("x")
    b = Builder()
    X = b.inp(x)
    two = b.let("two", ConstRHS((), 2))
    for _ in range(k):
        b.let("z", ContractRHS((), (), TRUE, ((two, ()), (X, ())))) 
    Y = b.let("Y", ContractRHS((), (), TRUE, ((two, ()), (X, ()))))
    return b.build(Y), {"x": x}


EXAMPLES = {
    "dead_code": dead_code,
    "convolution": convolution,
    "deconvolution_loss": deconvolution_loss,
    "diag_traces3": lambda: diag_traces(3),
    "diag_dot": diag_dot,
    "maps": maps,
    "pairs": pairs,
    "qform": qform,
    "relation_spmv": relation_spmv,
}


def input_values(inputs: dict, sizes: dict, rng):
    """Random float64 values for the program's inputs at ``sizes``."""
    from tensorlang.ir import PairT, Relation

    out = {}
    for name, v in inputs.items():
        if isinstance(v, Relation):
            dims = tuple(a.evaluate(sizes) for a in v.extents)
            out[name] = rng.random(dims) < 0.4
        elif isinstance(v.type, PairT):
            out[name] = (shape_vals(rng, v.type.fst, sizes), shape_vals(rng, v.type.snd, sizes))
        else:
            out[name] = shape_vals(rng, v.type, sizes)
    return out


def flat(v) -> np.ndarray:
    """A (nested tuple of) value(s) as one flat float vector."""
    if isinstance(v, tuple):
        return np.concatenate([flat(a) for a in v]) if v else np.zeros(0)
    return np.atleast_1d(np.asarray(v, dtype=float)).ravel()


def unflat_like(vec, like):
    """Inverse of :func:`flat` for the structure of ``like``."""
    if isinstance(like, tuple):
        out, k = [], 0
        for a in like:
            n = flat(a).size
            out.append(unflat_like(vec[k:k + n], a))
            k += n
        return tuple(out)
    if np.ndim(like) == 0:
        return float(vec[0])
    return np.asarray(vec).reshape(np.shape(like))


def run(prog, sizes: dict, **vals):
    """Evaluate ``prog`` on the subset of ``vals`` it uses, sizes given explicitly."""
    from tensorlang.ir import input_vars, relations_of, size_vars

    names = {v.name for v in input_vars(prog)} | {r.name for r in relations_of(prog)}
    kw = {k: v for k, v in vals.items() if k in names}
    kw.update({s.name: sizes[s.name] for s in size_vars(prog) if s.name in sizes})
    return tl.evaluate(prog, **kw)
