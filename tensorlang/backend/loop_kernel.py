"""Compiled execution of loop programs (issue #17 item 3).

``loops.split`` cuts a program at its top-level loop into ``pre``, ``body``
and ``post``; each is compiled to its own kernel by ``tl.compile``, and the
body's kernel runs ``T`` times with ``T`` a runtime value, so the kernels'
size and compile time do not depend on ``T``.  The step loop runs in
Python around the body kernel (one validated dispatch per step, the plan
cached by the inputs' signature, ``backend/dispatch.py``).
"""

from __future__ import annotations

from ..ir import Var, input_vars, size_vars
from ..loops import Split, split
from ..typecheck import check_program


class Part:
    """One loop-free program, run compiled on the values it names."""

    def __init__(self, prog, mode: str, compile_fn):
        self.prog = prog
        self.var = prog if isinstance(prog, Var) and prog.uid == 0 else None
        if self.var is None:
            check_program(prog)
            self.fn = compile_fn(prog, mode=mode)
        self.inputs = [v.name for v in input_vars(prog)]
        self.sizes = [s.name for s in size_vars(prog)]

    def __call__(self, values: dict, sizes: dict):
        if self.var is not None:
            return values[self.var.name]
        kw = {k: values[k] for k in self.inputs}
        for s in self.sizes:
            kw[s] = sizes[s]
        if self.fn is None:
            from ..evaluator import evaluate

            return evaluate(self.prog, **kw)
        return self.fn(**kw)


class LoopProgram:
    """A loop program's parts, its sizes and its compiled primal."""

    def __init__(self, expr, stage: str, mode: str, compile_fn):
        from .. import bounds

        check_program(expr)
        bounds.check_program(expr)
        self.expr = expr
        self.mode = mode
        self.compile_fn = compile_fn
        self.sp: Split = split(expr, stage)
        self.pre = Part(self.sp.pre, mode, compile_fn)
        self.body = Part(self.sp.body, mode, compile_fn)
        self.post = Part(self.sp.post, mode, compile_fn)

    def sizes(self, inputs: dict) -> dict:
        from ..evaluator import prepare_inputs

        _, sizes, _, _ = prepare_inputs(self.expr, inputs, exact=False)
        return sizes

    def steps(self, sizes) -> int:
        return self.sp.steps.evaluate(sizes)

    def _step(self, part, values, sizes, state, t):
        values[self.sp.state.name] = state
        if self.sp.t_size is not None:
            sizes = {**sizes, self.sp.t_size.name: t}
        return part(values, sizes)

    def forward(self, inputs: dict):
        sizes = self.sizes(inputs)
        values = dict(inputs)
        s = self.pre(values, sizes)
        for t in range(self.steps(sizes)):
            s = self._step(self.body, values, sizes, s, t)
        values[self.sp.final.name] = s
        return self.post(values, sizes)

    __call__ = forward


class LoopKernel:
    """``tl.compile`` of a loop program: the three parts' kernels, the body run ``T`` times."""

    def __init__(self, expr, mode: str, threads, compile_fn):
        self.program = LoopProgram(expr, "compile", mode, compile_fn)
        self.expr = expr
        self.threads = threads

    def __call__(self, **inputs):
        return self.program.forward(inputs)
