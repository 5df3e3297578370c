"""Reference evaluator: the operational semantics of Figures 4 and 5.

Correctness first: a direct structural recursion (rules 4.1-4.21), generic
over the scalar domain (float64 NumPy, or sympy objects for exact checks of
rewrites).  A guarded term is never evaluated where its predicate is false
(4.12), so ``[i - 1 >= 0]·x[i - 1]`` is safe; an unguarded out-of-range
access is a TensorLangError naming the access (4.11 leaves it undefined).
A closed sub-term shared in the DAG is computed once.

Floating point (float64 inputs) follows NumPy's IEEE 754 semantics and never
raises: ``1/0 = inf``, ``x**-1`` and ``x**-2`` at 0 are ``inf``, ``0·inf``,
``inf - inf``, ``log(-1)`` and ``sqrt(-1)`` are ``nan``, ``log(0) = -inf``,
overflow gives ``±inf`` and underflow 0 (evaluation runs under
``np.errstate(all="ignore")``, so no floating-point warning is raised either,
even with warnings as errors).  A constant that does not fit a float64
(``10**400``) is a TensorLangError.  An extent that evaluates below zero is
an empty range (rule 4.7), also for a generator nested in an empty one.
Programs thousands of nodes deep are evaluated on a large stack
(``tensorlang.deep``).
"""

from __future__ import annotations

from .deep import deep

from fractions import Fraction

import numbers

import sys

import numpy as np

from . import bounds
from .errors import IndexError_, InputError, TensorLangError, describe
from .functions import expand_derivative, lookup, sympy_module
from .ir import (
    shape_of,
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
    Gen,
    Iverson,
    Let,
    Loop,
    Mul,
    Or,
    Pair,
    PairT,
    Proj,
    RealT,
    Rel,
    Relation,
    SizeVar,
    Sum,
    TensorT,
    Type,
    Var,
    free_indices,
    free_vars,
    input_vars,
    relations_of,
    size_vars,
)
from .typecheck import check_program, type_of


class Domain:
    """Scalar domain: how constants, zeros and functions are represented."""

    def __init__(self, exact: bool):
        self.exact = exact
        self.dtype = object if exact else np.float64

    def const(self, v):
        if self.exact:
            if isinstance(v, float):
                return sympy_module().Rational(Fraction(v))
            return sympy_module().Integer(v) if isinstance(v, int) else sympy_module().sympify(v)
        try:
            return float(v)
        except OverflowError:
            shown = str(v) if len(str(v)) <= 24 else f"{str(v)[:12]}... ({len(str(v))} digits)"
            raise TensorLangError(f"the constant {shown} does not fit a float64 (its limit is about 1.8e308)") from None

    def zero(self):
        return sympy_module().Integer(0) if self.exact else 0.0

    def call(self, fn, args):
        fd = lookup(fn)
        if self.exact:
            return fd.sympy(*args)
        with np.errstate(all="ignore"):
            return float(fd.numpy(*[np.float64(a) for a in args]))


def zero_value(t: Type, sizes: dict, dom: Domain):
    match t:
        case RealT():
            return dom.zero()
        case PairT(fst=a, snd=b):
            return (zero_value(a, sizes, dom), zero_value(b, sizes, dom))
        case TensorT():
            shape, el = [], t
            while isinstance(el, TensorT):
                shape.append(max(0, el.extent.evaluate(sizes)))  # a negative extent is empty (4.7)
                el = el.elem
            if el is REAL_T:
                arr = np.zeros(shape, dtype=dom.dtype)
                if dom.exact:
                    arr[...] = sympy_module().Integer(0)
                return arr
            # tensors of pairs: an array of structs, built elementwise
            return _gen_values([zero_value(t.elem, sizes, dom) for _ in range(shape[0])], t.elem, sizes, dom)
        case _:
            raise TensorLangError(f"no zero value for {t!r}")


from .ir import REAL as REAL_T  # noqa: E402


def _gen_values(vals, elem_t: Type, sizes, dom):
    """Stack the values of a generator into the representation of [n]elem_t."""
    if isinstance(_leaf(elem_t), PairT) or isinstance(elem_t, PairT):
        out = np.empty(len(vals), dtype=object)
        for k, v in enumerate(vals):
            out[k] = v
        return out
    if not vals:
        # an inner gen of negative extent under an empty one is empty too (as in the kernels)
        shape = [0] + [max(0, a.evaluate(sizes)) for a in _shape(elem_t)]
        arr = np.zeros(shape, dtype=dom.dtype)
        return arr
    if dom.exact:
        arr = np.empty((len(vals),) + np.shape(vals[0]), dtype=object)
        for k, v in enumerate(vals):
            arr[k] = v
        return arr
    return np.array(vals, dtype=np.float64)


def _leaf(t):
    while isinstance(t, TensorT):
        t = t.elem
    return t


def _shape(t):
    out = []
    while isinstance(t, TensorT):
        out.append(t.extent)
        t = t.elem
    return out


# --------------------------------------------------------------------------


class Evaluator:
    """One evaluation: inputs, sizes, relations and the memo of closed terms."""

    def __init__(self, program: Expr, env: dict, sizes: dict, relations: dict, dom: Domain):
        from .sharing import shared_terms

        self.program = program
        self.env = env
        self.sizes = sizes
        self.relations = relations
        self.dom = dom
        self.memo: dict = {}
        # DAG-shared terms that do work: computed once per index point
        self.shared = frozenset(shared_terms(program))

    # -- expressions (Fig. 4) ----------------------------------------------------
    def ev(self, e: Expr, env: dict):
        """Evaluate with memoization: a closed term once per evaluation (an
        intermediate tensor indexed in a loop is built once), a DAG-shared
        term once per setting of its free indices (the user computed it once)."""
        memo_key = None
        fi = free_indices(e)
        if (not fi and not isinstance(e, (Var, Const))) or e in self.shared:
            lv = [v for v in free_vars(e) if v.uid != 0]
            vals = tuple(env[v] for v in lv)
            memo_key = (e, tuple(id(v) for v in vals), tuple(env[i] for i in fi))
            hit = self.memo.get(memo_key)
            if hit is not None:
                return hit[0]
        out = self._ev(e, env)
        if memo_key is not None:
            self.memo[memo_key] = (out, vals)
        return out

    def _ev(self, e: Expr, env: dict):
        dom = self.dom
        match e:
            case Var():
                return env[e]  # 4.1
            case Const(value=v):
                return dom.const(v)  # 4.2
            case Add(lhs=a, rhs=b):
                return self.ev(a, env) + self.ev(b, env)  # 4.3
            case Mul(lhs=a, rhs=b):
                return self.ev(a, env) * self.ev(b, env)  # 4.4
            case Call(fn=f, args=args) if f.startswith("D[") and f.endswith("]"):
                # rule 6.6's black box D[f](x; t) means sum_k (d_k f)(x)·t_k with
                # literal-zero tangents dropped, exactly as the kernels emit it:
                # a constant argument contributes nothing even where its partial
                # is infinite (d(1/x) at x = 0 is -inf, not 0·inf = nan)
                k = len(args) // 2
                return self.ev(expand_derivative(f[2:-1], args[:k], args[k:]), env)
            case Call(fn=f, args=args):
                return dom.call(f, [self.ev(a, env) for a in args])  # 4.5
            case Pair(fst=a, snd=b):
                return (self.ev(a, env), self.ev(b, env))  # 4.6
            case Proj(index=k, arg=a):
                return self.ev(a, env)[k]  # 4.10
            case Gen(var=i, extent=n, body=b):  # 4.7
                size = n.evaluate(self.sizes)
                vals = [self.ev(b, {**env, i: k}) for k in range(size)]
                return _gen_values(vals, type_of(b), self.sizes, dom)
            case Sum(var=i, extent=n, body=b):  # 4.8
                size = n.evaluate(self.sizes)
                acc = dom.zero()
                for k in range(size):
                    acc = acc + self.ev(b, {**env, i: k})
                return acc
            case Access(arr=a, index=ix):  # 4.11
                arr = self.ev(a, env)
                k = self.index(ix, env)
                n = len(arr)
                if not 0 <= k < n:
                    raise IndexError_(
                        f"index out of range in {describe(e)}: {ix} = {k} is not in [0, {n}); "
                        "guard the access with an Iverson bracket if it is a boundary"
                    )
                return arr[k]
            case Iverson(pred=p, body=b):  # 4.12
                if self.pred(p, env):
                    return self.ev(b, env)
                return zero_value(type_of(b), self.sizes, dom)
            case Let(var=v, value=e0, body=e1):  # 4.9
                return self.ev(e1, {**env, v: self.ev(e0, env)})
            case Loop(extent=n, init=e0, ivar=i, svar=v, body=b):  # issue #17: T sequential steps
                s = self.ev(e0, env)
                for k in range(n.evaluate(self.sizes)):
                    s = self.ev(b, {**env, i: k, v: s})
                return s
            case _:
                raise TensorLangError(f"cannot evaluate {e!r}")

    # -- indices and predicates (Fig. 5) -----------------------------------------
    def index(self, a: Aff, env: dict) -> int:
        v = a.const
        for s, c in a.terms:
            v += c * (self.sizes[s] if isinstance(s, SizeVar) else env[s])
        return v

    def pred(self, p, env: dict) -> bool:
        match p:
            case BoolLit(value=v):
                return v
            case Cmp(op=op, lhs=a, rhs=b):  # 4.18
                x, y = self.index(a, env), self.index(b, env)
                return x < y if op == "<" else (x <= y if op == "<=" else x == y)
            case And(lhs=a, rhs=b):  # 4.19, short-circuit so a guard protects a relation
                return self.pred(a, env) and self.pred(b, env)
            case Or(lhs=a, rhs=b):
                return self.pred(a, env) or self.pred(b, env)
            case Rel(rel=r, args=args):  # 4.20
                # membership: a relation is a set of tuples within its extents, so a
                # tuple outside them is not in it (as the cost model and the kernels
                # read it; a conjunction stays commutative)
                data = self.relations[r]
                ks = tuple(self.index(a, env) for a in args)
                if not all(0 <= k < n for k, n in zip(ks, data.shape)):
                    return False
                return bool(data[ks])
            case Exists(var=i, extent=n, body=b):  # 4.21
                size = n.evaluate(self.sizes)
                return any(self.pred(b, {**env, i: k}) for k in range(size))
            case _:
                raise TensorLangError(f"not a predicate: {p!r}")


# --------------------------------------------------------------------------
# Inputs: names, shapes, sizes


def _type_shape_leaves(t: Type, path=()):
    """Leaves of a (struct-of-arrays) type: (path of projections, extents)."""
    match t:
        case PairT(fst=a, snd=b):
            return _type_shape_leaves(a, path + (0,)) + _type_shape_leaves(b, path + (1,))
        case _:
            ext, el = _shape(t), _leaf(t)
            if isinstance(el, PairT):
                return [(path, tuple(ext), el)]
            return [(path, tuple(ext), None)]


def infer_sizes(constraints, given: dict) -> dict:
    """Solve ``extent(sizes) == length`` equations (affine in the sizes).

    ``constraints`` is a list of ``(Aff, int, what)``.  Returns name -> int;
    raises InputError naming the input whose shape is inconsistent.
    """
    sizes = dict(given)
    source = {k: f"the argument {k}={v}" for k, v in given.items()}  # where each size came from, for messages
    pending = list(constraints)
    progress = True
    while pending and progress:
        progress = False
        rest = []
        for a, length, what in pending:
            unknown = [s for s in a.size_vars() if s.name not in sizes]
            if not unknown:
                v = a.evaluate({s.name: sizes[s.name] for s in a.size_vars()} | {})
                if v != length:
                    whence = "; ".join(f"{t.name} = {sizes[t.name]} from {source[t.name]}" for t in a.size_vars())
                    raise InputError(f"{what} has length {length}, but its type says {a} = {v} ({whence})")
                progress = True
            elif len(unknown) == 1:
                s = unknown[0]
                c = a.coeff(s)
                rest_val = a.const + sum(cc * sizes[t.name] for t, cc in a.terms if t is not s)
                num = length - rest_val
                if num % c != 0 or num // c < 0:
                    raise InputError(f"{what} has length {length}, which gives no integer size {s.name} >= 0 in {a}")
                sizes[s.name] = num // c
                source[s.name] = what
                progress = True
            else:
                rest.append((a, length, what))
        pending = rest
    if pending:
        # a genuinely linear system with several unknowns per equation
        syms = {}
        eqs = []
        for a, length, what in pending:
            expr = a.const
            for s, c in a.terms:
                sv = syms.setdefault(s.name, sympy_module().Symbol(s.name, integer=True, nonnegative=True))
                expr += c * (sizes[s.name] if s.name in sizes else sv)
            eqs.append(sympy_module().Eq(expr, length))
        sol = sympy_module().solve(eqs, list(syms.values()), dict=True)
        if len(sol) != 1 or any(not sol[0].get(v, sympy_module().nan).is_integer for v in syms.values()):
            what = ", ".join(w for _, _, w in pending)
            raise InputError(f"cannot determine the sizes {sorted(syms)} from the shapes of {what}; pass them explicitly")
        for name, v in syms.items():
            sizes[name] = int(sol[0][v])
    return sizes


def prepare_inputs(program: Expr, kwargs: dict, *, exact: bool | None = None, compressed: bool = False,
                   finite_elsewhere=frozenset()):
    """Validate inputs by name and shape; return (env, sizes, relations, domain).

    Shared by the evaluator and the compiled kernels' argument checking.
    ``compressed`` (the kernels): sparse tensors stay ``SparseData`` and
    relations come back as ``RelationData`` instead of dense tables.
    ``finite_elsewhere``: names of inputs whose NaN/inf check the caller
    leaves to the kernel it calls next (a derived program's own inputs,
    checked there), so that one call scans each array once (issue 13).
    """
    from . import sparse as sparse_

    # sparse tensors and prepared relation data (issue 16)
    kwargs = sparse_.prepare(program, kwargs) if compressed else sparse_.dense_inputs(program, kwargs)
    ins = input_vars(program)
    rels = relations_of(program)
    by_name = {}
    for v in ins:
        if v.name in by_name:
            raise InputError(f"two different inputs are named {v.name!r}")
        by_name[v.name] = v
    rel_names: dict = {}
    for r in rels:
        if r.name in rel_names:
            raise InputError(f"two different relations are named {r.name!r}")
        rel_names[r.name] = r
    size_names = {s.name for s in size_vars(program)}
    for r in rels:
        for a in r.extents:
            size_names |= {s.name for s in a.size_vars()}
    # one keyword argument per name: an input, a relation and a size may not share one
    for kind_a, names_a, kind_b, names_b in (("an input", by_name, "a relation", rel_names),
                                            ("an input", by_name, "a size", size_names),
                                            ("a relation", rel_names, "a size", size_names)):
        both = sorted(set(names_a) & set(names_b))
        if both:
            raise InputError(f"the name {both[0]!r} is used for both {kind_a} and {kind_b} in the program; rename one")
    given_sizes = {}
    for k, val in kwargs.items():
        if k in by_name or k in rel_names:
            continue
        if k in size_names:
            if not isinstance(val, (int, np.integer)) or isinstance(val, bool) or val < 0:
                raise InputError(f"size {k} must be a non-negative int, got {val!r}")
            given_sizes[k] = int(val)
            continue
        known = sorted(set(by_name) | set(rel_names) | size_names)
        raise InputError(f"unknown input {k!r}; the program's inputs are {known}")
    missing = [n for n in list(by_name) + list(rel_names) if n not in kwargs]
    if missing:
        raise InputError(f"missing input(s) {missing} for the program")

    if exact is None:
        exact = any(_is_object(kwargs[v.name]) for v in ins)
    dom = Domain(exact)

    constraints = []
    arrays = {}
    for v in ins:
        val = kwargs[v.name]
        if isinstance(val, sparse_.SparseData):  # compressed: shape from its relation data
            if val.values.dtype == object and not dom.exact:
                raise InputError(f"sparse tensor {v.name} holds exact (object) values; compiled kernels run in "
                                 "floating point (use tl.evaluate)")
            for a, length in zip(shape_of(v.type), val.rel.shape):
                constraints.append((a, int(length), f"sparse tensor {v.name} (shape {val.rel.shape})"))
            arrays[(v, ())] = val
            continue
        for path, ext, aos in _type_shape_leaves(v.type):
            if aos is not None:
                raise InputError(
                    f"input {v.name} has an array-of-structs type {v.type}; pass a struct of arrays "
                    "instead (declare it as a pair of tensors and give a tuple of arrays)"
                )
            leaf = val
            for k in path:
                if not isinstance(leaf, (tuple, list)) or len(leaf) != 2:
                    raise InputError(f"input {v.name} has pair type {v.type}; pass a tuple (a, b)")
                leaf = leaf[k]
            what = v.name + "".join(f".{k}" for k in path)
            arr = _as_array(leaf, what, dom, finite=v.name not in finite_elsewhere)
            if arr.ndim != len(ext):
                raise InputError(f"input {what} must have {len(ext)} dimension(s) for type {v.type}, got shape {arr.shape}")
            for a, length in zip(ext, arr.shape):
                constraints.append((a, int(length), f"input {what} (shape {arr.shape})"))
            arrays[(v, path)] = arr
    for r in rels:
        data = kwargs[r.name]
        if compressed:
            data = sparse_.relation_data(data, f"relation {r.name}")
            if data.shape is None:
                continue  # coordinate rows: bound to the sizes below
            if len(data.shape) != len(r.extents):
                raise InputError(f"relation {r.name} must have {len(r.extents)} dimension(s), got shape {data.shape}")
            for a, length in zip(r.extents, data.shape):
                constraints.append((a, int(length), f"relation {r.name} (shape {data.shape})"))
            continue
        try:
            data = np.asarray(data)
        except Exception as exc:
            raise InputError(f"relation {r.name}: data is not an array: {exc}") from None
        if data.dtype == bool:
            if data.ndim != len(r.extents):
                raise InputError(f"relation {r.name} must be a boolean array with {len(r.extents)} dimension(s)")
            for a, length in zip(r.extents, data.shape):
                constraints.append((a, int(length), f"relation {r.name} (shape {data.shape})"))
    sizes = infer_sizes(constraints, given_sizes)
    unknown = sorted(n for n in size_names if n not in sizes)
    if unknown:
        raise InputError(f"cannot infer size(s) {unknown} from the inputs; pass them as keyword arguments")

    env = {}
    for v in ins:
        val = kwargs[v.name]
        env[v] = _rebuild_value(v.type, (), arrays, v)
    if compressed:
        relations = {}
        for r in rels:
            rd = sparse_.relation_data(kwargs[r.name], f"relation {r.name}")
            relations[r] = rd.bound(tuple(a.evaluate(sizes) for a in r.extents), f"relation {r.name}")
    else:
        relations = {r: relation_dense(r, kwargs[r.name], sizes) for r in rels}
    return env, sizes, relations, dom


def _rebuild_value(t, path, arrays, v):
    if isinstance(t, PairT):
        return (_rebuild_value(t.fst, path + (0,), arrays, v), _rebuild_value(t.snd, path + (1,), arrays, v))
    arr = arrays[(v, path)]
    if not isinstance(arr, np.ndarray):
        return arr  # SparseData (compressed inputs)
    return arr if arr.ndim else (arr[()])


def _is_object(val) -> bool:
    if isinstance(val, (tuple, list)) and len(val) == 2 and not isinstance(val, np.ndarray):
        return any(_is_object(x) for x in val)
    sp = sys.modules.get("sympy")  # no sympy object exists before sympy is imported (it is imported lazily)
    if sp is not None and isinstance(val, sp.Basic):
        return True
    return isinstance(val, np.ndarray) and val.dtype == object


def _as_array(val, what, dom: Domain, finite: bool = True):
    if isinstance(val, np.ma.MaskedArray):  # np.asarray would drop the mask: the masked values would count
        raise InputError(f"input {what} is a masked array; pass its data (np.ma.filled) or express the mask in the program")
    if dom.exact:
        try:
            arr = np.asarray(val, dtype=object)
        except Exception as exc:
            raise InputError(f"input {what} is not an array: {exc}") from None
        ok = (numbers.Real, sympy_module().Expr)
        bad = next((v for v in arr.flat if isinstance(v, bool) or not isinstance(v, ok)), None)
        if bad is not None:  # exact evaluation takes numbers and sympy terms, nothing else
            raise InputError(f"input {what} holds {type(bad).__name__} {bad!r}; expected real numbers or sympy expressions")
        return arr
    try:
        arr = np.asarray(val)
    except Exception as exc:  # pragma: no cover - numpy's own message
        raise InputError(f"input {what} is not an array: {exc}") from None
    if arr.dtype.kind not in "fiu" or arr.dtype == bool:
        raise InputError(f"input {what} must be a real array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if finite and not np.all(np.isfinite(arr)):
        raise InputError(f"input {what} contains NaN or infinity")
    return arr


def relation_array(data, what: str):
    """Relation data as a boolean table or integer coordinate rows: a
    scipy.sparse matrix, a prepared ``tl.relation_data`` or a sparse
    tensor's data give their stored entries (``np.asarray`` made an object
    array of them, refused as "got dtype object" by the cost model, which
    took relation data only as arrays; session 12's hunt)."""
    from .relation_data import RelationData, _is_scipy, relation_data

    if _is_scipy(data) or isinstance(data, RelationData) or isinstance(getattr(data, "rel", None), RelationData):
        rd = relation_data(data, what)
        return rd.dense() if rd.shape is not None else rd.coords
    return data


def relation_dense(r: Relation, data, sizes: dict) -> np.ndarray:
    """A relation's value as a dense boolean array of its extents.

    Accepts a boolean array of that shape, integer coordinate rows of
    shape ``(nnz, arity)``, or what :func:`relation_array` converts.
    """
    ext = tuple(a.evaluate(sizes) for a in r.extents)
    arr = np.asarray(relation_array(data, f"relation {r.name}"))
    if arr.dtype == bool:
        if arr.shape != ext:
            raise InputError(f"relation {r.name} must have shape {ext}, got {arr.shape}")
        return arr
    if arr.dtype.kind in "iu":
        if arr.ndim != 2 or arr.shape[1] != len(ext):
            if not (arr.size == 0):
                raise InputError(
                    f"relation {r.name}: integer data must be coordinate rows of shape (nnz, {len(ext)}), got {arr.shape}"
                )
            arr = arr.reshape(0, len(ext))
        dense = np.zeros(ext, dtype=bool)
        for col, n in enumerate(ext):
            if arr.shape[0] and (arr[:, col].min() < 0 or arr[:, col].max() >= n):
                raise InputError(f"relation {r.name}: coordinate column {col} is outside [0, {n})")
        if arr.shape[0]:
            dense[tuple(arr[:, c] for c in range(len(ext)))] = True
        return dense
    raise InputError(f"relation {r.name} must be a boolean array or integer coordinate rows, got dtype {arr.dtype}")


@deep
def evaluate(program: Expr, **inputs):
    """Evaluate ``program`` on named inputs (arrays, scalars, relation data).

    Sizes are inferred from array shapes (or given as ``n=...``).  With sympy
    object arrays as inputs, evaluation is exact over sympy.  Returns a float
    or array (a tuple for pair outputs).
    """
    check_program(program)
    constraints = bounds.check_program(program)  # every access proven in range, or refused
    env, sizes, relations, dom = prepare_inputs(program, inputs)
    bounds.check_sizes(constraints, sizes)
    ev = Evaluator(program, env, {**sizes, **{SizeVar(k): v for k, v in sizes.items()}}, relations, dom)
    with np.errstate(all="ignore"):  # IEEE results (inf, nan), as NumPy gives them: see the module doc
        out = ev.ev(program, dict(env))
    return out



