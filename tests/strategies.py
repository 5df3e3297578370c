"""Hypothesis strategies: random well-typed tensorlang programs with inputs.

Every later stage is tested on these programs (semantics, normal-form and
cost oracles), so they cover every construct of Figure 3 of the paper
(RULES.md Section 3.1): nested ``gen`` and ``sum`` over several extents
(``n``, ``m``, ``n + m - 1``, constants), Iverson brackets whose predicates are
sometimes empty, sometimes single-point (``i = j``, ``i = 2``), sometimes dense
or triangular (``i < j``) or strided (``2·i = j``), ``exists``, relations with
random boolean data, conjunction and disjunction, lets (a tensor bound once and
indexed several times, dead lets), DAG sharing (one sub-term used twice),
pairs (construction, projection, pair-typed lets, struct-of-arrays pair
inputs, generators of pairs), black-box functions (built-in and one
user-registered binary function), and boundary accesses guarded by an Iverson
bracket (``[0 ≤ i - 1]·x[i - 1]``).

Usage::

    from tests.strategies import programs, Program

    @given(programs())
    def test_x(prog: Program):
        tl.evaluate(prog.expr, **prog.inputs)

Every access is in range wherever it is evaluated (a guard is added exactly
when the range cannot be proved for all sizes >= 1), so evaluation never
fails; every size is inferable from the inputs' shapes; magnitudes are kept
below ``prog.bound`` so nothing overflows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlang as tl
from tensorlang.ir import (
    REAL,
    Access,
    Add,
    Call,
    Const,
    Expr,
    Gen,
    IndexVar,
    Iverson,
    Let,
    Mul,
    Pair,
    PairT,
    Proj,
    RealT,
    Relation,
    SizeVar,
    Sum,
    TensorT,
    Type,
    Var,
    free_vars,
    fresh_uid,
    relations_of,
    size_vars,
)
from tensorlang.typecheck import iverson
from tensorlang.typecheck import check_program

from .program_builder import _MAX_SIZE, MIX, _Builder, _Scope, _type_extents  # noqa: F401

__all__ = ["Program", "LoopProgram", "programs", "loop_programs", "scalar_exprs", "tensor_exprs", "predicates", "MIX", "assert_close", "magnitude"]

# --------------------------------------------------------------------------
# The result


@dataclass
class Program:
    """A closed, well-typed program with inputs that make it evaluate.

    ``inputs`` maps input names to float64 arrays (tensors), floats
    (scalars), tuples (struct-of-arrays pair inputs) and boolean arrays
    (relations).  ``sizes`` maps size names to their values (also inferable
    from the inputs).  ``bound`` bounds the magnitude of every value the
    program computes (use it to scale tolerances).
    """

    expr: Expr
    inputs: dict
    sizes: dict
    bound: float = 1.0
    input_types: dict = field(default_factory=dict)
    relation_names: frozenset = frozenset()

    def evaluate(self):
        return tl.evaluate(self.expr, **self.inputs, **self.sizes)

    def symbolic_inputs(self) -> dict:
        """The inputs with every number replaced by a real sympy symbol
        (object arrays; relation data unchanged), for exact evaluation."""
        return {k: (v if k in self.relation_names else _symbolize(k, v)) for k, v in self.inputs.items()}

    def substitution(self) -> dict:
        """sympy symbol -> the float it stands for in ``inputs``."""
        out: dict = {}
        for k, v in self.inputs.items():
            if k not in self.relation_names:
                _subs_pairs(k, v, out)
        return out

    def evaluate_exact(self):
        return tl.evaluate(self.expr, **self.symbolic_inputs(), **self.sizes)

    def numeric(self, value):
        """Substitute the inputs' numbers into a value computed over
        ``symbolic_inputs()`` (float, ndarray or tuple, like the evaluator)."""
        subs = self.substitution()
        return _numeric(value, subs)

    def __repr__(self):
        ins = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.inputs.items()}
        return (f"Program(sizes={self.sizes}, bound={self.bound:.3g}, expr=\n"
                f"{tl.pretty(self.expr, sharing=False)}\n, inputs={ins})")

    def _repr_pretty_(self, p, cycle):  # hypothesis prints falsifying examples with this
        p.text(repr(self))


def _symbolize(name, v, path=""):
    if isinstance(v, tuple):
        return tuple(_symbolize(name, x, f"{path}.{k}") for k, x in enumerate(v))
    if isinstance(v, np.ndarray):
        out = np.empty(v.shape, dtype=object)
        for idx in np.ndindex(*v.shape):
            out[idx] = sympy.Symbol(f"{name}{path}_" + "_".join(map(str, idx)), real=True)
        return out
    return sympy.Symbol(f"{name}{path}", real=True)


def _subs_pairs(name, v, out, path=""):
    if isinstance(v, tuple):
        for k, x in enumerate(v):
            _subs_pairs(name, x, out, f"{path}.{k}")
    elif isinstance(v, np.ndarray):
        for idx in np.ndindex(*v.shape):
            out[sympy.Symbol(f"{name}{path}_" + "_".join(map(str, idx)), real=True)] = float(v[idx])
    else:
        out[sympy.Symbol(f"{name}{path}", real=True)] = float(v)


def _numeric(value, subs):
    if isinstance(value, tuple):
        return tuple(_numeric(x, subs) for x in value)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            out = [_numeric(x, subs) for x in value.ravel()]
            if out and isinstance(out[0], tuple):  # array of pairs
                arr = np.empty(len(out), dtype=object)
                for k, x in enumerate(out):
                    arr[k] = x
                return arr.reshape(value.shape)
            return np.array(out, dtype=np.float64).reshape(value.shape)
        return value
    if isinstance(value, sympy.Basic):
        return float(sympy.N(value.xreplace(subs), 30))
    return float(value)


def magnitude(e: Expr, env: dict | None = None, max_size: int = _MAX_SIZE) -> float:
    """A bound on |value| of every scalar ``e`` computes, for inputs in [-1, 1]
    and sizes <= 4 (knows the shapes of the functions this module generates)."""
    env = env or {}
    memo: dict = {}

    def go(x, env):
        key = (x, tuple(sorted(env.items(), key=lambda kv: id(kv[0]))))
        if key in memo:
            return memo[key]
        match x:
            case Var():
                out = env.get(x, 1.0)
            case Const(value=v):
                out = abs(float(v))
            case Add(lhs=a, rhs=b):
                out = go(a, env) + go(b, env)
            case Mul(lhs=a, rhs=b):
                out = go(a, env) * go(b, env)
            case Call(fn=f, args=args):
                bs = [go(a, env) for a in args]
                if f in ("sin", "cos", "tanh", "sigmoid"):
                    out = 1.0
                elif f == "exp":
                    out = float(np.exp(min(bs[0], 700.0)))
                elif f == "sqrt":
                    out = float(np.sqrt(bs[0]))
                elif f == "log":  # only of 1 + a², so >= 0
                    out = float(np.log(max(bs[0], 1.0)))
                elif f == "div":  # only by 1 + a² >= 1
                    out = bs[0]
                elif f == "strat_mix":
                    out = bs[0] * bs[1] + 1.0
                elif f.startswith("pow["):
                    k = float(f[4:-1])
                    out = bs[0] ** k if k > 0 else 1.0  # negative powers only of 1 + a²
                else:
                    out = float("inf")
            case Sum(extent=n, body=b):
                out = go(b, env) * max(1, n.evaluate({s: max_size for s in n.size_vars()}))
            case Gen(body=b) | Iverson(body=b):
                out = go(b, env)
            case Access(arr=a) | Proj(arg=a):
                out = go(a, env)
            case Pair(fst=a, snd=b):
                out = max(go(a, env), go(b, env))
            case Let(var=v, value=e0, body=e1):
                out = go(e1, {**env, v: go(e0, env)})
            case _:
                raise TypeError(f"not an expression: {x!r}")
        memo[key] = out
        return out

    return go(e, env)


# --------------------------------------------------------------------------
# Inputs


def _values(draw, t: Type, sizes: dict):
    match t:
        case RealT():
            return draw(st.floats(-1, 1, allow_nan=False, allow_subnormal=False))
        case PairT(fst=a, snd=b):
            return (_values(draw, a, sizes), _values(draw, b, sizes))
        case TensorT():
            shape = tuple(a.evaluate(sizes) for a in _type_extents(t))
            return draw(hnp.arrays(np.float64, shape, elements=st.floats(-1, 1, allow_nan=False, allow_subnormal=False)))
    raise AssertionError(t)


def _relation_data(draw, r: Relation, sizes: dict):
    shape = tuple(a.evaluate(sizes) for a in r.extents)
    mode = draw(st.sampled_from(["random", "empty", "full", "diagonal", "random"]))
    if mode == "empty":
        return np.zeros(shape, dtype=bool)
    if mode == "full":
        return np.ones(shape, dtype=bool)
    if mode == "diagonal":
        idx = np.indices(shape)
        return np.all(idx == idx[0], axis=0)
    return draw(hnp.arrays(np.bool_, shape))


def assert_close(got, want, bound, path="value"):
    """Compare evaluator results (float, ndarray, tuple, array of pairs) with
    relative tolerance 1e-9 and absolute tolerance 1e-9·max(1, bound)
    (``bound`` = ``prog.bound``: cancellation of large terms)."""
    tol = 1e-9 * max(1.0, bound)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), path
        for k, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, bound, f"{path}.{k}")
    elif isinstance(want, np.ndarray) and want.dtype == object:
        assert np.shape(got) == want.shape, path
        for idx in np.ndindex(*want.shape):
            assert_close(got[idx], want[idx], bound, f"{path}{list(idx)}")
    else:
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-9, atol=tol,
                                   err_msg=path)


# --------------------------------------------------------------------------
# Public strategies


@st.composite
def programs(
    draw,
    max_depth: int = 3,
    pairs: bool = True,
    relations: bool = True,
    exists: bool = True,
    lets: bool = True,
    functions: bool = True,
    smooth: bool = False,
    output: str = "any",
    max_size: int = _MAX_SIZE,
):
    """Random closed well-typed programs with matching inputs (see module doc).

    ``output``: "scalar" (type ℝ), "tensor" ([E]ℝ or [E0][E1]ℝ) or "any"
    (also pairs when ``pairs``).  ``smooth``: only functions smooth on the
    generated values (finite differences work).  Sizes are in 1..max_size.
    """
    if output not in ("any", "scalar", "tensor"):
        raise ValueError(f"output must be 'any', 'scalar' or 'tensor', got {output!r}")
    opts = dict(pairs=pairs, relations=relations, exists=exists, lets=lets, functions=functions, smooth=smooth)
    b = _Builder(draw, opts)
    b.top = max_depth
    b.max_size = max_size
    size_vals = {"n": draw(st.integers(1, max_size)), "m": draw(st.integers(1, max_size))}
    if output == "scalar":
        t = REAL
    elif output == "tensor":
        t = TensorT(b.extent(), REAL) if b.coin(5) else TensorT(b.extent(), TensorT(b.extent(), REAL))
    else:
        t = b.rand_type()
    if t is REAL:
        e, bound = b.scalar(_Scope(), max_depth, 2)
    else:
        e, bound = b.expr(t, _Scope(), max_depth)
    e = b.anchor_sizes(e)
    check_program(e)
    used = {v.name for v in free_vars(e)}
    used_rels = {r.name for r in relations_of(e)}
    sizes_env = {SizeVar(k): v for k, v in size_vals.items()}
    inputs = {}
    types = {}
    for name, v in b.inputs.items():
        if name in used:
            inputs[name] = _values(draw, v.type, sizes_env)
            types[name] = v.type
    for name, r in b.relations.items():
        if name in used_rels:
            inputs[name] = _relation_data(draw, r, sizes_env)
    used_sizes = {s.name for s in size_vars(e)}
    sizes = {k: v for k, v in size_vals.items() if k in used_sizes}
    return Program(e, inputs, sizes, bound=magnitude(e, max_size=max_size), input_types=types,
                   relation_names=frozenset(used_rels))


def scalar_exprs(**kw):
    """Programs of scalar type (a loss)."""
    return programs(output="scalar", **kw)


def tensor_exprs(**kw):
    """Programs of tensor type."""
    return programs(output="tensor", **kw)


@st.composite
def predicates(draw, max_depth: int = 2, relations: bool = True, exists: bool = True):
    """Programs ``gen[i:E0] ... [p]·1`` for a random predicate ``p`` over 1-3
    index variables: they evaluate to the indicator tensor of ``p``.  Their
    sizes need not be inferable from the inputs: pass ``**prog.sizes``
    (``prog.evaluate()`` does)."""
    opts = dict(pairs=False, relations=relations, exists=exists, lets=False, functions=False, smooth=False)
    b = _Builder(draw, opts)
    size_vals = {"n": draw(st.integers(1, _MAX_SIZE)), "m": draw(st.integers(1, _MAX_SIZE))}
    k = draw(st.integers(1, 3))
    sc = _Scope()
    binds = []
    for name in "ijk"[:k]:
        iv = IndexVar(name, fresh_uid())
        n = b.extent()
        binds.append((iv, n))
        sc = sc.with_idx(iv, n)
    p = b.pred(sc, max_depth)
    e: Expr = iverson(p, Const(1))
    for iv, n in reversed(binds):
        e = Gen(iv, n, e)
    check_program(e)
    sizes_env = {SizeVar(k): v for k, v in size_vals.items()}
    used = {v.name for v in free_vars(e)}
    used_rels = {r.name for r in relations_of(e)}
    inputs = {name: _values(draw, v.type, sizes_env) for name, v in b.inputs.items() if name in used}
    for name, r in b.relations.items():
        if name in used_rels:
            inputs[name] = _relation_data(draw, r, sizes_env)
    used_sizes = {s.name for s in size_vars(e)}
    return Program(e, inputs, {k: v for k, v in size_vals.items() if k in used_sizes}, bound=magnitude(e),
                   relation_names=frozenset(used_rels))


# --------------------------------------------------------------------------
# Loop programs (issue #17): tests/loop_builder.py draws them


@dataclass(repr=False)
class LoopProgram(Program):
    """A loop program ``post(tl.loop(T, init, body, checkpoint=policy))``
    (tests/loop_builder.py).  ``loss``: a scalar program of its value (for
    gradients); ``wrt``: every input it reads (all real); ``steps``: T's
    value; ``kinds``: the drawn body terms (for coverage statistics)."""

    loss: Expr = None
    wrt: tuple = ()
    policy: object = "all"
    steps: int = 0
    state: str = "tensor"
    kinds: tuple = ()
    symbolic_T: bool = False
    size_values: dict = field(default_factory=dict)  # n and T, also where the program does not name them

    def __repr__(self):
        return (f"LoopProgram(state={self.state}, steps={self.steps}, symbolic_T={self.symbolic_T}, "
                f"policy={self.policy!r}, kinds={self.kinds}, " + Program.__repr__(self)[len("Program("):])


@st.composite
def loop_programs(draw, state: str = "any", symbolic_T: bool | None = None, max_steps: int = 4, max_size: int = 4):
    """Random well-typed loop programs (tests/loop_builder.py): tensor,
    scalar and pair states; bodies with stencil reads, value conditionals,
    loop-invariant terms and inputs indexed by ``t`` in affine ways; ``T``
    an int in ``0..max_steps`` or the size ``T`` (``symbolic_T``: force one
    or the other); every checkpoint policy.  ``state``: "any", "tensor",
    "scalar", "pair_ts" or "pair_tt"."""
    from .loop_builder import build_loop_program

    parts = build_loop_program(draw, state=state, symbolic_T=symbolic_T, max_steps=max_steps, max_size=max_size)
    prog = LoopProgram(parts["expr"], parts["inputs"], parts["sizes"], bound=10.0, input_types=parts["input_types"],
                       loss=parts["loss"], wrt=parts["wrt"], policy=parts["policy"], steps=parts["steps"],
                       state=parts["state"], kinds=parts["kinds"], symbolic_T=parts["symbolic_T"],
                       size_values=parts["size_values"])
    return prog
