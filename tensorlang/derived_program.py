"""A derived program run on the inputs of the original one (``_Program``):
the callable behind ``grad``, ``value_and_grad``, ``vjp`` and ``jvp`` of a
loop-free program (tensorlang.autodiff builds the derived program and wraps
it here).

Sizes are inferred from the original program's inputs, checked against its
bounds constraints, and remembered per input signature (with the kernel's
own plan) so that a repeated call goes straight to the kernel; a call with a
size of 0 runs the program derived again for sizes >= 0.
"""

from __future__ import annotations

from .deep import deep

import os

from . import bounds
from .passes.profile import stage as _timed
from .errors import InputError, TensorLangError
from .ir import Expr, input_vars, relations_of, size_vars
from .isl_bridge import sizes_may_be_zero

_DEBUG = os.environ.get("TENSORLANG_DEBUG", "") not in ("", "0")


_dispatch = None  # (check_finite, signature, relation_inputs), imported on the first call (a per-call import costs ~1 us)


def _load_dispatch() -> None:
    global _dispatch
    from .backend.dispatch import check_finite, relation_inputs, signature

    _dispatch = (check_finite, signature, relation_inputs)


class _Program:
    """A derived program run on the inputs of the original one.

    Sizes are inferred from the original program's inputs (the derived one
    may no longer mention the inputs that determine them) and inputs it does
    not use are not passed on.
    """

    def __init__(self, source: Expr, prog: Expr, loops: str, extra=(), threads=None, entry=None):
        from .runtime import make_callable

        self.source = source
        self.prog = prog
        # the source's accesses are proven in range, up to these size constraints
        with _timed("bounds"):
            self.constraints = bounds.check_program(source)
        if _DEBUG:  # and the derived program's own accesses, as a check of the passes
            bounds.check_program(prog)
        self.extra = {v.name: v for v in extra}
        self.fn = make_callable(prog, loops=loops, threads=threads)
        self.loops, self.threads = loops, threads
        self.cache_hit = entry is not None and entry.hit  # the program came from the derived-program cache
        # simplify decided the derived program's predicates for sizes >= 1; a call
        # with a size of 0 runs the program derived again for sizes >= 0
        self._build = entry.build if entry is not None else None
        self._zero_fn = None
        self.inputs = {v.name for v in input_vars(prog)}
        self.sizes = {s.name for s in size_vars(prog)}
        self.rels = {r.name for r in relations_of(prog)}
        # call signature -> (sizes passed on, finiteness checks, fast entry or None)
        self._plans: dict = {}
        from .sparse import sparse_inputs

        self.sparse_src = source if not extra else _with_inputs(source, extra)
        self.sparse = bool(sparse_inputs(self.sparse_src))
        # relation data enters a plan as RelationData (dispatch.relation_inputs);
        # sparse tensors (which may come as dense arrays) always take the full path
        self.rel_names = tuple(dict.fromkeys(r.name for r in relations_of(self.sparse_src)))
        self._plannable = not self.sparse
        # no sparse tensor and no relation: no input to prepare, no packed output to unpack
        self.dense = not self.sparse and not self.rel_names
        self.packed_ok = False  # set by grad/vjp for sparse wrt (their outputs go through _sparse_out)

    def prepared(self, kwargs: dict) -> dict:
        """The inputs with sparse data prepared (once per call, shared by the
        kernels this call runs)."""
        if not self.sparse:
            return kwargs
        from .sparse import prepare

        return prepare(self.sparse_src, kwargs)

    def __call__(self, kwargs: dict):
        if self.sparse:  # sparse tensors and relation data prepared once per call (issue 16)
            from .sparse import prepare

            kwargs = prepare(self.sparse_src, kwargs)
        if _dispatch is None:
            _load_dispatch()
        check_finite, signature, relation_inputs = _dispatch
        if self.rel_names:  # once per call, through tl.relation_data's cache (a mutated mask is converted again)
            kwargs = relation_inputs(kwargs, self.rel_names)
        sig = signature(kwargs) if self._plannable else None
        plan = self._plans.get(sig) if sig is not None else None
        if plan is not None and plan[2] is not None:
            # validated once for this signature: one finiteness pass over every
            # input, then the kernel's own plan (no second signature, no kwargs)
            run, kplan, checks = plan[2]
            check_finite(kwargs, checks, kplan.scan)  # on the kernel's threads when large
            out = run(kplan, kwargs, None)  # relation outputs come back packed
            if self.rel_names and not self.packed_ok:
                from .sparse import unpack_outputs

                out = unpack_outputs(out)
            return out
        return self._call(kwargs, sig, plan)

    @deep
    def _call(self, kwargs: dict, sig, plan):
        from .backend.dispatch import finite_checks, remember

        if plan is not None:  # this signature passed the checks below once (backend/dispatch.py)
            from .backend.dispatch import check_finite

            check_finite(kwargs, plan[1])
            call_sizes = plan[0]
        else:
            from .evaluator import prepare_inputs

            src_kw = {k: v for k, v in kwargs.items() if k not in self.extra}
            missing = [k for k in self.extra if k not in kwargs]
            if missing:
                raise InputError(f"missing input(s) {missing}")
            # sizes only (no dense copies); the inputs passed on are checked for NaN/inf by the kernel's own
            # validation, so each array is scanned once per call (issue 13)
            _, sizes, _, _ = prepare_inputs(self.source, src_kw, compressed=True, finite_elsewhere=self.inputs)
            bounds.check_sizes(self.constraints, sizes)
            if any(v < 1 for v in sizes.values()):
                return self._at_zero_size(kwargs, sizes)
            call_sizes = {k: v for k, v in sizes.items() if k in self.sizes}
            if sig is not None:
                # the inputs passed on are checked by the kernel's own plan
                checks = tuple(c for c in finite_checks(self.source, src_kw) if c[0] not in self.inputs)
                plan = (call_sizes, checks, None)
                remember(self._plans, sig, plan)
        call = {k: v for k, v in kwargs.items() if k in self.inputs or k in self.rels}
        call.update(call_sizes)
        if self.packed_ok and (self.sparse or self.rels):
            from .sparse import keep_packed

            with keep_packed():  # sparse cotangents come back packed on their relation
                out = self.fn(**call)
        else:
            out = self.fn(**call)
        if sig is not None and plan is not None:
            entry = getattr(self.fn, "planned_entry", None)
            got = entry(call) if entry is not None else None
            if got is not None:  # the kernel planned this call: later calls go straight to it
                run, kplan = got
                remember(self._plans, sig, (plan[0], plan[1], (run, kplan, plan[1] + tuple(kplan.checks))))
        return out


    def _at_zero_size(self, kwargs: dict, sizes: dict):
        """A call with some size 0.  The derived program's predicates were
        decided for sizes >= 1 (``[n >= 1]`` is true there, an unused
        ``exists k < n`` holds), so it is derived again with every question
        asked for sizes >= 0 (``isl_bridge.sizes_may_be_zero``), once per
        callable, and run like the first (no signature plan: such calls are
        rare and take the checked path)."""
        if self._zero_fn is None:
            if self._build is None:  # pragma: no cover - every derived program has its builder
                raise TensorLangError("internal: a derived program without its builder was called at a size of 0")
            from .runtime import make_callable

            with sizes_may_be_zero():
                prog = self._build()
            self._zero_fn = (make_callable(prog, loops=self.loops, threads=self.threads),
                             {v.name for v in input_vars(prog)} | {r.name for r in relations_of(prog)},
                             {s.name for s in size_vars(prog)})
        fn, names, size_names = self._zero_fn
        call = {k: v for k, v in kwargs.items() if k in names}
        call.update({k: v for k, v in sizes.items() if k in size_names})
        with sizes_may_be_zero():  # anything the callable derives lazily, too
            if self.packed_ok and (self.sparse or self.rels):
                from .sparse import keep_packed

                with keep_packed():
                    return fn(**call)
            return fn(**call)


def _with_inputs(source: Expr, extra) -> Expr:
    """A pair program mentioning ``source`` and the extra inputs (tangents,
    cotangent), so that their sparse data is prepared with the source's."""
    from .ir import Pair

    out = source
    for v in extra:
        out = Pair(out, v)
    return out
