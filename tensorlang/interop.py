"""Using tensorlang from JAX, PyTorch and SciPy (issue #18).

A tensorlang program is a function of its named inputs; its reverse
derivative ``D^T`` (paper Section 6, Figs. 14-16; ``tl.vjp``) is exactly the
vector-Jacobian product that every reverse-mode framework asks a custom
operation for.  This module wraps the two as each framework's extension point:

* ``jax_function(expr)``: ``jax.custom_vjp`` over ``jax.pure_callback`` calls
  of tensorlang's compiled kernels, so it runs under ``jax.jit`` and
  differentiates with ``jax.grad`` / ``jax.vjp`` (not ``jax.jvp``:
  custom_vjp is reverse-mode only);
* ``torch_function(expr)``: a ``torch.autograd.Function`` on CPU tensors
  (``Tensor.numpy()`` / ``torch.from_numpy`` share memory, so no copy is made
  where the layout allows it);
* ``scipy_objective(loss, wrt, **fixed)`` (interop_scipy.py): the
  ``fun(x) -> (value, grad)`` that ``scipy.optimize.minimize(..., jac=True)``
  wants, over one flat vector.

Sparse tensors cross each bridge in the framework's own sparse type
(interop_sparse.py).

For a scalar output the value and the gradient come from ONE call of
``tl.value_and_grad`` (the forward pass keeps the gradient, the backward pass
only scales it by the output cotangent); for a tensor output the backward pass
runs ``tl.vjp``.  Inputs are passed by name or positionally in
``f.input_names`` order (sorted by name unless ``inputs=[...]`` says
otherwise); inputs that are not arguments (relation data, fixed data, sizes)
are given once as keywords to the wrapper.

dtype: when every real input is float32 the results and cotangents are
float32, otherwise float64 (NumPy's promotion); each cotangent has its
input's dtype.

jax, torch and scipy are optional: a missing one is an ImportError naming
the extra to install (``pip install 'tensorlang[jax]'``).
"""

from __future__ import annotations

import importlib

import numpy as np

from . import interop_sparse as sparse_io
from .errors import InputError, TensorLangError
from .evaluator import infer_sizes
from .ir import REAL, SparseVar, TensorT, Var, input_vars, relations_of, size_vars
from .typecheck import check_program, type_of


def _require(module: str, extra: str, what: str):
    """Import an optional framework, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs {module}, which is not installed; install it with: pip install 'tensorlang[{extra}]'"
        ) from exc


def _extents(t, what: str) -> list:
    """The extents (affine in the sizes) of a real or tensor type; pairs are refused."""
    ext, full = [], t
    while isinstance(t, TensorT):
        ext.append(t.extent)
        t = t.elem
    if t is not REAL:
        raise TensorLangError(f"{what} has type {full}; interop takes real scalars and tensors of reals only "
                              "(split a pair into two inputs, or take tl.proj of a pair output)")
    return ext


def _result_dtype(dtypes) -> np.dtype:
    """float32 when every real input is float32, else float64 (as NumPy promotes)."""
    dtypes = list(dtypes)
    return np.dtype(np.float32) if dtypes and all(np.dtype(d) == np.float32 for d in dtypes) else np.dtype(np.float64)


def _fresh(name: str, taken: set) -> str:
    while name in taken:
        name = "_" + name
    return name


class Signature:
    """A program's argument list for a framework wrapper.

    ``names``: the arguments, in positional order; ``fixed``: everything else
    the program needs (fixed inputs, relation data, sizes), given once.
    """

    def __init__(self, expr, inputs, fixed: dict, what: str, arg_word: str = "inputs=[...]"):
        check_program(expr)
        self.expr = expr
        self.what = what
        self.out_type = type_of(expr)
        self.out_ext = _extents(self.out_type, f"the output of the program given to {what}")
        self.scalar = not self.out_ext
        self.vars = {v.name: v for v in input_vars(expr)}
        rels = {r.name for r in relations_of(expr)}
        sizes = {s.name for s in size_vars(expr)}
        for name in fixed:
            if name not in self.vars and name not in rels and name not in sizes:
                raise InputError(f"{what}: {name!r} is not an input, relation or size of the program; "
                                 f"its inputs are {sorted(self.vars)}, relations {sorted(rels)}")
        # a sparse tensor's relation may come from the tensor's own pattern (issue 16)
        own = {v.rel.name for v in self.vars.values() if isinstance(v, SparseVar)}
        missing_rels = sorted(rels - set(fixed) - own)
        if missing_rels:
            raise InputError(f"{what}: give the relation data of {missing_rels} as keywords, e.g. "
                             f"{what}(expr, {missing_rels[0]}=mask)")
        self.fixed = dict(fixed)
        if inputs is None:
            self.names = [n for n in self.vars if n not in fixed]
        else:
            self.names = [x.name if isinstance(x, Var) else str(x) for x in inputs]
            unknown = [n for n in self.names if n not in self.vars]
            if unknown:
                raise InputError(f"{what}: inputs={unknown} are not inputs of the program ({sorted(self.vars)})")
            left = sorted(set(self.vars) - set(self.names) - set(fixed))
            if left:
                raise InputError(f"{what}: the program's inputs {left} are neither in {arg_word} nor given as "
                                 "fixed keywords")
            if len(set(self.names)) != len(self.names):
                raise InputError(f"{what}: inputs=[...] names an input twice")
            both = sorted(set(self.names) & set(fixed))
            if both:
                raise InputError(f"{what}: {both} given both as arguments and as fixed inputs")
        self.exts = {n: _extents(self.vars[n].type, f"input {n}") for n in self.vars}
        self._shapes: dict = {}

    def bind(self, args, kwargs) -> list:
        """Positional and keyword arguments -> one value per name, in order."""
        if len(args) > len(self.names):
            raise InputError(f"{self.what}: {len(args)} positional arguments, but the program takes "
                             f"{len(self.names)}: {self.names}")
        vals = dict(zip(self.names, args))
        for k, v in kwargs.items():
            if k not in self.names:
                raise InputError(f"{self.what}: unknown argument {k!r}; the arguments are {self.names}"
                                 + (" (it was fixed when the function was made)" if k in self.fixed else ""))
            if k in vals:
                raise InputError(f"{self.what}: argument {k!r} given twice")
            vals[k] = v
        missing = [n for n in self.names if n not in vals]
        if missing:
            raise InputError(f"{self.what}: missing argument(s) {missing}")
        return [vals[n] for n in self.names]

    def sizes(self, shapes) -> dict:
        """Sizes inferred from the arguments' shapes and the fixed inputs (cached per shapes)."""
        key = tuple(tuple(s) for s in shapes)
        if key not in self._shapes:
            cons, given = [], {}
            for name, shape in [*zip(self.names, key),
                                *((k, sparse_io.shape_of(v)) for k, v in self.fixed.items() if k in self.vars)]:
                ext = self.exts[name]
                if len(shape) != len(ext):
                    raise InputError(f"{self.what}: input {name} must have {len(ext)} dimension(s) for type "
                                     f"{self.vars[name].type}, got shape {tuple(shape)}")
                cons += [(a, int(n), f"input {name} (shape {tuple(shape)})") for a, n in zip(ext, shape)]
            for k, v in self.fixed.items():
                if k not in self.vars and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                    given[k] = int(v)
            self._shapes[key] = infer_sizes(cons, given)
        return self._shapes[key]

    def out_shape(self, shapes) -> tuple:
        sizes = self.sizes(shapes)
        try:
            return tuple(a.evaluate(sizes) for a in self.out_ext)
        except Exception as exc:  # a size only the relation data or a keyword could give
            raise InputError(f"{self.what}: cannot infer the output's sizes from the inputs' shapes ({exc}); "
                             "give the sizes as keywords") from None

    def dtype(self, arg_dtypes) -> np.dtype:
        fixed = [sparse_io.dtype_of(v) for k, v in self.fixed.items() if k in self.vars]
        return _result_dtype([*arg_dtypes, *fixed])


class Engine:
    """Host-side calls of tensorlang's kernels: value, value-and-gradient, vjp.

    Kernels are built on first use and kept per set of differentiated inputs.
    """

    def __init__(self, sig: Signature):
        self.sig = sig
        self._value = None
        self._vg: dict = {}
        self._vjp: dict = {}
        self.dy = _fresh("dy", set(sig.vars) | set(sig.fixed))

    def _inputs(self, arrays) -> dict:
        return {**self.sig.fixed, **dict(zip(self.sig.names, arrays))}

    def value(self, arrays):
        from .runtime import make_callable

        if self._value is None:
            self._value = make_callable(self.sig.expr)
        return self._value(**self._inputs(arrays))

    def value_and_grad(self, arrays, wrt: tuple):
        """Scalar output: (value, one gradient per name in ``wrt``) from one tl.value_and_grad call."""
        from .autodiff import value_and_grad

        if wrt not in self._vg:
            self._vg[wrt] = value_and_grad(self.sig.expr, wrt=[self.sig.vars[n] for n in wrt])
        val, grads = self._vg[wrt](**self._inputs(arrays))
        return val, (grads,) if len(wrt) == 1 else tuple(grads)

    def vjp(self, arrays, dy, wrt: tuple) -> tuple:
        """The cotangents of ``wrt`` for the output cotangent ``dy`` (tl.vjp)."""
        from .autodiff import vjp

        if wrt not in self._vjp:
            self._vjp[wrt] = vjp(self.sig.expr, wrt=[self.sig.vars[n] for n in wrt], cotangent=self.dy)
        out = self._vjp[wrt](**self._inputs(arrays), **{self.dy: dy})
        return (out,) if len(wrt) == 1 else tuple(out)


def _cast(x, shape, dtype) -> np.ndarray:
    return np.asarray(x, dtype=dtype).reshape(shape)


def _contiguous(a: np.ndarray) -> np.ndarray:
    """C-contiguous without copying when it already is (np.ascontiguousarray would make 0-d arrays 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


# --------------------------------------------------------------------------
# JAX


def _is_bcoo(v) -> bool:
    """A ``jax.experimental.sparse.BCOO`` (checked by type name: importing
    jax.experimental.sparse only to test would slow every call)."""
    return type(v).__name__ == "BCOO" and hasattr(v, "indices") and hasattr(v, "data")


def jax_function(expr, *, inputs=None, **fixed):
    """``f = tl.jax_function(expr)``: a JAX-traceable function of the program's inputs.

    ``f(*args, **kwargs)`` takes the inputs ``f.input_names`` (positionally in
    that order, or by name) as arrays and returns a JAX array of the output's
    shape.  It works under ``jax.jit``, ``jax.grad``, ``jax.vjp`` and
    ``jax.vmap`` (sequentially).  ``fixed``: inputs, relation data and sizes
    that are not arguments.  float64 needs ``jax.config.update("jax_enable_x64", True)``.
    """
    jax = _require("jax", "jax", "tl.jax_function")
    jnp = jax.numpy
    sig = Signature(expr, inputs, fixed, "tl.jax_function")
    eng = Engine(sig)
    names = tuple(sig.names)
    calls: dict = {}  # one custom_vjp per layout: which arguments are BCOO (their static shapes)

    def make_call(layout):
        """The traced function of the flat operands for ``layout`` (per name:
        None for an array, the shape for a BCOO passed as (data, indices))."""

        def host_arrays(ops):
            arrays, k = [], 0
            for name, lay in zip(names, layout):
                if lay is None:
                    arrays.append(ops[k])
                    k += 1
                else:
                    arrays.append(sparse_io.host_sparse(np.asarray(ops[k + 1]), np.asarray(ops[k]), lay,
                                                        f"input {name}"))
                    k += 2
            return arrays

        def shapes(ops):
            out, k = [], 0
            for lay in layout:
                out.append(ops[k].shape if lay is None else lay)
                k += 1 if lay is None else 2
            return out

        def data_ops(ops):  # the differentiable operands: arrays and BCOO data
            out, k = [], 0
            for lay in layout:
                out.append(ops[k])
                k += 1 if lay is None else 2
            return out

        def out_struct(ops):
            dtype = jax.dtypes.canonicalize_dtype(sig.dtype([a.dtype for a in data_ops(ops)]))
            return jax.ShapeDtypeStruct(sig.out_shape(shapes(ops)), dtype)

        def ct_structs(ops):
            return tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in data_ops(ops))

        def host_cts(grads, ops):
            """Cotangents of the data operands: dense as the array, a BCOO's on its own indices."""
            out, k = [], 0
            for g, lay in zip(grads, layout):
                a = ops[k]
                if lay is None:
                    out.append(_cast(g, a.shape, a.dtype))
                    k += 1
                else:
                    out.append(_cast(sparse_io.gather_at(g, lay, np.asarray(ops[k + 1])), a.shape, a.dtype))
                    k += 2
            return tuple(out)

        def host_value(*ops):
            spec = out_struct(ops)
            return _cast(eng.value(host_arrays(ops)), spec.shape, spec.dtype)

        def host_value_and_grad(*ops):
            spec = out_struct(ops)
            val, grads = eng.value_and_grad(host_arrays(ops), names)
            return _cast(val, (), spec.dtype), host_cts(grads, ops)

        def host_vjp(*ops_and_dy):
            *ops, dy = ops_and_dy
            grads = eng.vjp(host_arrays(ops), np.asarray(dy, dtype=np.float64), names)
            return host_cts(grads, ops)

        def spread(cts):
            """Data cotangents -> one per operand (None for a BCOO's integer indices)."""
            out = []
            for ct, lay in zip(cts, layout):
                out += [ct] if lay is None else [ct, None]
            return tuple(out)

        @jax.custom_vjp
        def call(*ops):
            return jax.pure_callback(host_value, out_struct(ops), *ops, vmap_method="sequential")

        def fwd(*ops):
            if sig.scalar:  # value and gradient from one kernel call; backward only scales
                return jax.pure_callback(host_value_and_grad, (out_struct(ops), ct_structs(ops)), *ops,
                                         vmap_method="sequential")
            return call(*ops), ops

        def bwd(res, g):
            if sig.scalar:
                return spread(tuple((g * gr).astype(gr.dtype) for gr in res))
            return spread(tuple(jax.pure_callback(host_vjp, ct_structs(res), *res, g, vmap_method="sequential")))

        call.defvjp(fwd, bwd)
        return call

    def operand(name, v):
        a = jnp.asarray(v)
        if not jnp.issubdtype(a.dtype, jnp.floating):
            if jnp.issubdtype(a.dtype, jnp.complexfloating) or a.dtype == bool:
                raise InputError(f"tl.jax_function: input {name} must be real, got dtype {a.dtype}")
            a = a.astype(jnp.result_type(float))
        return a

    def f(*args, **kwargs):
        ops, layout = [], []
        for name, v in zip(names, sig.bind(args, kwargs)):
            if _is_bcoo(v):  # a sparse tensor: its data and indices (issue 16)
                if v.n_batch or v.n_dense:
                    raise InputError(f"tl.jax_function: BCOO input {name} has batch or dense dimensions "
                                     f"(n_batch={v.n_batch}, n_dense={v.n_dense}); tensorlang's sparse tensors "
                                     "store one value per coordinate")
                ops += [operand(name, v.data), jnp.asarray(v.indices)]
                layout.append(tuple(int(d) for d in v.shape))
            else:
                ops.append(operand(name, v))
                layout.append(None)
        layout = tuple(layout)
        if layout not in calls:
            calls[layout] = make_call(layout)
        return calls[layout](*ops)

    f.input_names = names
    f.program = expr
    f.__doc__ = f"tensorlang program as a JAX function of {', '.join(names)}"
    return f


# --------------------------------------------------------------------------
# PyTorch


def _torch_to_numpy(t, name: str, torch):
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if sparse_io.is_torch_sparse(t, torch):  # a sparse tensor's stored entries (issue 16)
        return sparse_io.from_torch(t, name, torch)
    if t.device.type != "cpu":
        raise InputError(f"tl.torch_function: input {name} is on {t.device}; tensorlang kernels run on the CPU "
                         "(move it with .cpu())")
    if t.is_complex() or t.dtype == torch.bool:
        raise InputError(f"tl.torch_function: input {name} must be real, got dtype {t.dtype}")
    if t.dtype == torch.bfloat16:  # NumPy has no bfloat16 (.numpy() raised a TypeError): widened exactly,
        return t.detach().to(torch.float64).numpy()  # computed in float64 as float16 is (a copy)
    return t.detach().numpy()  # shares memory with the tensor (no copy), whatever its strides


def torch_function(expr, *, inputs=None, **fixed):
    """``f = tl.torch_function(expr)``: the program as a differentiable PyTorch function.

    ``f(*tensors, **kwargs)`` takes CPU tensors (positionally in
    ``f.input_names`` order, or by name) and returns a tensor of the output's
    shape; ``backward`` runs tensorlang's vjp, only for the inputs that need a
    gradient.  Once differentiable (no double backward).
    """
    torch = _require("torch", "torch", "tl.torch_function")
    from torch.autograd.function import once_differentiable

    sig = Signature(expr, inputs, fixed, "tl.torch_function")
    eng = Engine(sig)
    names = tuple(sig.names)

    class TensorLangFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            arrays = [_torch_to_numpy(t, n, torch) for n, t in zip(names, tensors)]
            dtype = sig.dtype([sparse_io.dtype_of(a) for a in arrays])
            shape = sig.out_shape([sparse_io.shape_of(a) for a in arrays])
            need = tuple(n for n, r in zip(names, ctx.needs_input_grad) if r)
            ctx.need, ctx.dtypes = need, [sparse_io.dtype_of(a) for a in arrays]
            ctx.sparse_like = {n: t for n, t in zip(names, tensors) if sparse_io.is_torch_sparse(t, torch)}
            if sig.scalar and need:  # one kernel call for value and gradient; backward scales
                val, grads = eng.value_and_grad(arrays, need)
                ctx.grads = grads
            else:
                val = eng.value(arrays)
                ctx.save_for_backward(*tensors)
            return torch.from_numpy(_contiguous(_cast(val, shape, dtype)))

        @staticmethod
        @once_differentiable
        def backward(ctx, gout):
            if not ctx.need:
                return (None,) * len(names)
            if sig.scalar:
                scale = float(gout)
                grads = dict(zip(ctx.need, (sparse_io.scale(g, scale) for g in ctx.grads)))
            else:
                arrays = [_torch_to_numpy(t, n, torch) for n, t in zip(names, ctx.saved_tensors)]
                dy = _torch_to_numpy(gout, "the output cotangent", torch).astype(np.float64, copy=False)
                grads = dict(zip(ctx.need, eng.vjp(arrays, dy, ctx.need)))
            out = []
            for n, dt in zip(names, ctx.dtypes):
                g = grads.get(n)
                if g is not None and n in ctx.sparse_like:  # on the input's own pattern and layout
                    out.append(sparse_io.to_torch(g, ctx.sparse_like[n], dt, torch))
                    continue
                out.append(None if g is None else torch.from_numpy(_contiguous(np.asarray(g, dtype=dt))))
            return tuple(out)

    def f(*args, **kwargs):
        vals = sig.bind(args, kwargs)
        tensors = [v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v)) for v in vals]
        return TensorLangFunction.apply(*tensors)

    f.input_names = names
    f.program = expr
    f.Function = TensorLangFunction
    f.__doc__ = f"tensorlang program as a PyTorch function of {', '.join(names)}"
    return f
