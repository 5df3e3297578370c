"""An independent oracle for the cost model (paper Section 4.3, Figure 6):
a counting evaluator.

It *executes* the program with the reference evaluator's rules (Figs. 4-5)
and counts scalar operations as it performs them, applying the cost rules
operationally instead of counting domains:

* every ``·`` performed is one multiplication (4.25), every ``f(...)`` one
  call of ``f`` (4.26);
* a term under a bracket whose predicate is false is not evaluated, so costs
  nothing (4.33);
* ``[p0]·e0 + [p1]·e1`` performs its addition only where both predicates
  hold (4.24 (*); an operand without a bracket has ``p = true``, directly
  nested brackets conjoin);
* ``sum[i0]...sum[ik] [p]·e`` (a chain of sums and the brackets directly
  under it) loops over every tuple, evaluates ``e`` where ``p`` holds, and
  performs ``k - 1`` additions for ``k`` such tuples (4.30 (**));
* every evaluation is counted: the evaluator's memo of closed terms is off,
  because the model charges a term each time its context evaluates it.

Like ``tl.cost`` it runs on ``explicit_sharing(expr)`` (a DAG-shared term
the user computed once is one ``let``).  It shares no code with
``tensorlang.costmodel`` (no isl, no count terms).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from tensorlang.evaluator import Evaluator, prepare_inputs
from tensorlang.ir import Add, Call, Iverson, Mul, PairT, RealT, SizeVar, Sum, TensorT, input_vars
from tensorlang.sharing import explicit_sharing
from tensorlang.typecheck import check_program


def _brackets(e):
    """The predicates of the brackets directly around ``e`` and the term inside."""
    ps = []
    while isinstance(e, Iverson):
        ps.append(e.pred)
        e = e.body
    return ps, e


class CountingEvaluator(Evaluator):
    """The reference evaluator, counting ``+``, ``·`` and calls as it goes."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.adds = 0
        self.mults = 0
        self.calls: Counter = Counter()

    def holds(self, preds, env) -> bool:
        return all(self.pred(p, env) for p in preds)

    def ev(self, e, env):  # no memo: each evaluation is charged
        return self._ev(e, env)

    def _ev(self, e, env):
        match e:
            case Add(lhs=a, rhs=b):
                pa, _ = _brackets(a)
                pb, _ = _brackets(b)
                out = self.ev(a, env) + self.ev(b, env)
                if self.holds(pa, env) and self.holds(pb, env):
                    self.adds += 1
                return out
            case Mul(lhs=a, rhs=b):
                out = self.ev(a, env) * self.ev(b, env)
                self.mults += 1
                return out
            case Call(fn=f, args=args):
                vals = [self.ev(a, env) for a in args]
                self.calls[f] += 1
                return self.dom.call(f, vals)
            case Sum():
                chain = []
                x = e
                while isinstance(x, Sum):
                    chain.append((x.var, x.extent))
                    x = x.body
                preds, body = _brackets(x)
                acc = self.dom.zero()
                k = 0
                for env2 in self._tuples(chain, env):
                    if self.holds(preds, env2):
                        v = self.ev(body, env2)
                        acc = v if k == 0 else acc + v
                        k += 1
                self.adds += max(k - 1, 0)
                return acc
            case _:
                return super()._ev(e, env)

    def _tuples(self, chain, env):
        if not chain:
            yield env
            return
        (i, n), rest = chain[0], chain[1:]
        for v in range(self.index(n, env)):
            yield from self._tuples(rest, {**env, i: v})


def _random_value(t, sizes, rng):
    match t:
        case RealT():
            return float(rng.uniform(0.5, 1.5))
        case PairT(fst=a, snd=b):
            return (_random_value(a, sizes, rng), _random_value(b, sizes, rng))
        case TensorT():
            shape = []
            while isinstance(t, TensorT):
                shape.append(t.extent.evaluate(sizes))
                t = t.elem
            return rng.uniform(0.5, 1.5, size=shape)
    raise AssertionError(t)


def counting_cost(expr, inputs=None, **sizes_and_relations) -> dict:
    """``{"adds", "mults", "calls": {fn: k}}`` counted by executing ``expr``.

    ``inputs`` maps input names to values; missing inputs get random values
    of their declared types at the given sizes (values do not affect the
    count).  Sizes and relation data are keywords, as for ``tl.cost``."""
    check_program(expr)
    shared = explicit_sharing(expr)
    inputs = dict(inputs or {})
    rng = np.random.default_rng(0)
    size_env = {k: v for k, v in sizes_and_relations.items() if isinstance(v, int)}
    for v in input_vars(shared):
        if v.name not in inputs:
            inputs[v.name] = _random_value(v.type, size_env, rng)
    kw = {**inputs, **sizes_and_relations}
    names = {v.name for v in input_vars(shared)} | set(sizes_and_relations)
    env, sizes, relations, dom = prepare_inputs(shared, {k: x for k, x in kw.items() if k in names and _used(shared, k, x)})
    ev = CountingEvaluator(shared, env, {**sizes, **{SizeVar(k): v for k, v in sizes.items()}}, relations, dom)
    ev.ev(shared, dict(env))
    return {"adds": ev.adds, "mults": ev.mults, "calls": {f: k for f, k in sorted(ev.calls.items()) if k}}


def _used(expr, name, val) -> bool:
    """Sizes the program does not mention are dropped (prepare_inputs rejects them)."""
    from tensorlang.ir import relations_of, size_vars

    if isinstance(val, int):
        names = {s.name for s in size_vars(expr)}
        for r in relations_of(expr):
            for a in r.extents:
                names |= {s.name for s in a.size_vars()}
        return name in names
    return True


def total(breakdown: dict) -> int:
    return breakdown["adds"] + breakdown["mults"] + sum(breakdown["calls"].values())

