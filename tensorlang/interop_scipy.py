"""``tl.scipy_objective``: a tensorlang loss as SciPy's ``fun(x) -> (value, grad)`` (issue #18).

The gradient is the loss's reverse derivative ``D^T`` (paper Section 6,
Figs. 14-16), computed with the value by ONE ``tl.value_and_grad`` call per
evaluation; the inputs optimised are flattened into one vector.  A sparse
input in ``wrt`` is optimised over its stored values only (issue 16; its
cotangent lives on its relation, Section 6), so the vector has nnz entries
for it, not n·m.
"""

from __future__ import annotations

import numpy as np

from . import interop_sparse as sparse_io
from .errors import InputError, TensorLangError
from .evaluator import infer_sizes
from .interop import Signature, _require
from .ir import REAL, SparseVar
from .typecheck import check_program, type_of


class ScipyObjective:
    """``fun(x) -> (value, gradient)`` over the concatenated, flattened ``wrt`` inputs.

    For ``scipy.optimize.minimize(obj, obj.x0(...), jac=True)``.  Each call
    runs the loss's ``tl.value_and_grad`` once.  ``obj.unflatten(x)`` gives
    the inputs back by name; ``obj.values`` records the loss of every call,
    ``obj.nfev`` counts them.
    """

    def __init__(self, loss, wrt, fixed: dict):
        _require("scipy.optimize", "scipy", "tl.scipy_objective")
        from .autodiff import value_and_grad

        wrt_list = list(wrt) if isinstance(wrt, (list, tuple)) else [wrt]
        check_program(loss)
        if type_of(loss) is not REAL:
            raise TensorLangError(f"tl.scipy_objective needs a scalar loss, but the program has type {type_of(loss)}")
        self.sig = Signature(loss, wrt_list, fixed, "tl.scipy_objective", arg_word="wrt")
        self.names = tuple(self.sig.names)
        self._vg = value_and_grad(loss, wrt=[self.sig.vars[n] for n in self.names])
        # a sparse input in wrt is optimised over its stored values, on its relation's data (issue 16)
        self.sparse = {n for n in self.names if isinstance(self.sig.vars[n], SparseVar)}
        self.patterns: dict = {}
        self.shapes = None
        self.values: list = []
        self.nfev = 0

    def _set_shapes(self, shapes: dict):
        self.shapes = {n: tuple(shapes[n]) for n in self.names}
        self.sizes = [self.patterns[n].nnz if n in self.patterns else int(np.prod(s, dtype=np.int64))
                      for n, s in self.shapes.items()]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)

    def x0(self, *args, **kwargs) -> np.ndarray:
        """The initial point: arrays for the ``wrt`` inputs (positionally or by name); a missing
        one starts at zeros of the shape the fixed inputs' sizes give it."""
        if len(args) > len(self.names):
            raise InputError(f"tl.scipy_objective.x0: {len(args)} arrays for {len(self.names)} inputs {list(self.names)}")
        given = {**dict(zip(self.names, args))}
        for k, v in kwargs.items():
            if k not in self.names or k in given:
                raise InputError(f"tl.scipy_objective.x0: unexpected or repeated argument {k!r}; "
                                 f"the inputs optimised are {list(self.names)}")
            given[k] = v
        given = {k: v if k in self.sparse else np.asarray(v, dtype=np.float64) for k, v in given.items()}
        cons, fixed_sizes = [], {}
        for k, v in [*given.items(), *((k, v) for k, v in self.sig.fixed.items() if k in self.sig.vars)]:
            shape = sparse_io.shape_of(v)
            ext = self.sig.exts[k]
            if len(shape) != len(ext):
                raise InputError(f"input {k} must have {len(ext)} dimension(s), got shape {shape}")
            cons += [(a, int(n), f"input {k} (shape {shape})") for a, n in zip(ext, shape)]
        for k, v in self.sig.fixed.items():
            if k not in self.sig.vars and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                fixed_sizes[k] = int(v)
        sizes = infer_sizes(cons, fixed_sizes)
        shapes = {}
        for n in self.names:
            if n in given:
                shapes[n] = sparse_io.shape_of(given[n])
            else:
                try:
                    shapes[n] = tuple(a.evaluate(sizes) for a in self.sig.exts[n])
                except Exception:
                    raise InputError(f"tl.scipy_objective.x0: cannot tell the shape of {n} from the fixed inputs; "
                                     f"give x0({n}=...)") from None
        for n in self.sparse:
            self.patterns[n] = self._pattern(n, given.get(n), shapes[n])
        self._set_shapes(shapes)
        return self.flatten(**{n: given.get(n, np.zeros(shapes[n])) for n in self.names})

    def _pattern(self, name: str, value, shape):
        """The stored entries a sparse ``wrt`` input is optimised over: its
        relation's data when fixed, else the pattern of its initial value."""
        from .relation_data import relation_data

        rel = self.sig.vars[name].rel
        if rel.name in self.sig.fixed:
            return relation_data(self.sig.fixed[rel.name], f"relation {rel.name}").bound(shape, f"relation {rel.name}")
        if value is None:
            raise InputError(f"tl.scipy_objective.x0: give the initial value of sparse input {name}, or the data of "
                             f"relation {rel.name} as a fixed keyword, so its stored entries are known")
        return self._sparse_value(name, value, shape).rel

    def _sparse_value(self, name: str, value, shape):
        from .sparse import SparseData, prepare

        got = prepare(self.sig.expr, {name: value, **({} if name not in self.patterns else
                                                       {self.sig.vars[name].rel.name: self.patterns[name]})})[name]
        if not isinstance(got, SparseData) or got.rel.shape != tuple(shape):
            raise InputError(f"tl.scipy_objective: sparse input {name} must be scipy.sparse data of shape {shape}")
        return got

    def flatten(self, **arrays) -> np.ndarray:
        if self.shapes is None:
            self._set_shapes({n: np.shape(arrays[n]) for n in self.names})
        parts = []
        for n in self.names:
            if n in self.sparse:  # its values on the pattern, in row-major order
                parts.append(np.asarray(self._sparse_value(n, arrays[n], self.shapes[n]).values, dtype=np.float64))
                continue
            a = np.asarray(arrays[n], dtype=np.float64)
            if a.shape != self.shapes[n]:
                raise InputError(f"tl.scipy_objective: {n} has shape {a.shape}, expected {self.shapes[n]}")
            parts.append(a.ravel())
        return np.concatenate(parts)

    def unflatten(self, x) -> dict:
        if self.shapes is None:
            raise TensorLangError("tl.scipy_objective: call obj.x0(...) first, so the shapes are known")
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.offsets[-1],):
            raise InputError(f"tl.scipy_objective: x has shape {x.shape}, expected ({self.offsets[-1]},)")
        out = {n: x[self.offsets[k]:self.offsets[k + 1]].reshape(self.shapes[n]) for k, n in enumerate(self.names)
               if n not in self.sparse}
        for k, n in enumerate(self.names):
            if n in self.sparse:  # a scipy.sparse matrix (or (coords, values)) on the pattern
                from .sparse import SparseData, to_sparse

                rd = self.patterns[n]
                v = self.sig.vars[n]
                out[n] = to_sparse(v, SparseData(rd, x[self.offsets[k]:self.offsets[k + 1]].copy()), {v.rel.name: rd})
        return {n: out[n] for n in self.names}

    def __call__(self, x):
        parts = self.unflatten(x)
        val, grads = self._vg(**self.sig.fixed, **parts)
        if len(self.names) == 1:
            grads = (grads,)
        g = np.concatenate([
            sparse_io.gather_at(gr, self.shapes[n], self.patterns[n].coords).astype(np.float64) if n in self.sparse
            else np.asarray(gr, dtype=np.float64).ravel() for n, gr in zip(self.names, grads)])
        val = float(val)
        self.values.append(val)
        self.nfev += 1
        return val, g


def scipy_objective(loss, wrt, **fixed) -> ScipyObjective:
    """``obj = tl.scipy_objective(loss, wrt=[u, c], f=data)``; then
    ``res = scipy.optimize.minimize(obj, obj.x0(u=u0), jac=True, method="L-BFGS-B")`` and
    ``obj.unflatten(res.x)["u"]``."""
    return ScipyObjective(loss, wrt, fixed)
