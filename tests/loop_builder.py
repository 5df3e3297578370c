"""Random well-typed LOOP programs for the property tests (issue #17 "Tests":
loop programs in the hypothesis strategy and through the three oracles).

``tl.loop(T, init, lambda t, s: body, checkpoint=...)`` is an extension of
the paper's language (Section 4, Fig. 3; tensorlang/loops.py).  A drawn
program is ``post(loop(T, init, body))`` where

* ``T`` is an int in ``0..max_steps`` or the size ``T`` (value ``1..max_steps``);
* the state is a tensor ``[n]ℝ``, a scalar, or a pair (``[n]ℝ × ℝ`` or
  ``[n]ℝ × [n]ℝ``, a wave-like system);
* ``init`` is an input or a computed term of inputs (the split's ``pre``),
  ``post`` is the final state or a term consuming it (the split's ``post``);
* the body is a sum of drawn terms: the state at ``i``, stencil reads
  shifted by ±1 with an Iverson guard (``[i ≥ 1]·s[i - 1]``), the reversed
  state ``s[n - 1 - i]``, value conditionals (``tl.where``, ``maximum``,
  ``minimum``, ``abs``, ``relu``, ``softplus``), a Burgers-like upwind term,
  a global coupling ``Σ_j w[j]·s[j]``, loop-invariant factors (``a``,
  ``exp(a)``, ``Σ_j x[j]²``: hoisted), a ``t``-guard (``[t ≥ 1]``, ``[i ≤ t]``),
  and inputs indexed by ``t`` in affine ways: ``f[t, i]``, ``f[T - 1 - t, i]``,
  ``g[t + 1, i]`` (``g : [T + 1][n]``), a guarded ``[t ≥ 1]·f[t - 1, i]`` and
  a strided ``q[2t, i]`` (not a row input: its cotangent is built whole);
* the checkpoint policy is any of ``"all"``, ``k``, ``"binomial"``,
  ``("binomial", s)``.

Input values come from a NumPy generator seeded by the drawn seed (generic
values: no ties at the kinks of the conditionals, so finite differences
work away from them); magnitudes stay small (coefficients of the state sum
to at most 1 and every nonlinearity is 1-Lipschitz or bounded).

Internal to the tests: use :func:`tests.strategies.loop_programs`.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.ir import Expr, PairT, TensorT, input_vars, size_vars
from tensorlang.typecheck import type_of

POLICIES = ("all", 1, 2, 3, "binomial", ("binomial", 1), ("binomial", 2))

# the term kinds of a tensor component's body (drawn with repetition)
TENSOR_TERMS = ("self", "left", "right", "reverse", "act", "where", "maximum", "minimum", "upwind", "global",
                "invariant", "tguard", "forcing", "forcing_rev", "forcing_next", "forcing_prev", "strided",
                "other")
SCALAR_TERMS = ("self", "act", "where", "invariant", "global", "tguard", "forcing", "other")
ACTS = ("sin", "tanh", "relu", "abs", "softplus", "maximum0")


class _Loop:
    """Draws one loop program; records the inputs it declares."""

    def __init__(self, draw, symbolic_T: bool, steps: int, state: str, n, tname: str = "T", prefix: str = "",
                 decl=None):
        self.draw = draw
        self.n = n
        self.steps = steps
        self.T = tl.size(tname) if symbolic_T else steps
        # a second loop (two-loop programs): its t-shaped inputs and initial states get a prefix, and it
        # shares the first loop's other inputs (a, x, w, z: one parameter in both loops) or reads
        # terms of the first loop's result in their place (``decl``)
        self.prefix = prefix
        self.decl: dict = dict(decl or {})
        self.kinds: list = []
        self.state = state
        # the term kinds come from a seeded generator: hypothesis's own draws
        # favour the ends of a list (its boundary bias), which left kinds unseen
        self.rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    # -- inputs -------------------------------------------------------------------
    def tensor(self, name, *ext):
        if name in ("f", "g", "q", "h", "u0", "u1"):
            name = self.prefix + name
        if name not in self.decl:
            self.decl[name] = tl.tensor(name, *ext)
        return self.decl[name]

    def scalar(self, name):
        if name in ("u0", "u1"):
            name = self.prefix + name
        if name not in self.decl:
            self.decl[name] = tl.scalar(name)
        return self.decl[name]

    def coef(self, lo=-0.5, hi=0.5):
        return self.draw(st.sampled_from([lo, -0.25, 0.25, 0.5 * hi, hi]))

    def act(self, e):
        k = self.draw(st.sampled_from(ACTS))
        return {"sin": tl.sin, "tanh": tl.tanh, "relu": tl.relu, "abs": tl.abs,
                "softplus": lambda z: tl.softplus(z) - 0.6931471805599453,
                "maximum0": lambda z: tl.maximum(z, 0.5 * z)}[k](e)

    # -- one component's next value --------------------------------------------------
    def tensor_next(self, t, comp, other):
        """``gen[i:n] Σ terms`` for a tensor component ``comp(i_aff)``; ``other``
        is the other component (``(kind, getter)``) of a pair state, or None."""
        n, T = self.n, self.T
        k = self.draw(st.integers(1, 4))
        kinds = [str(x) for x in self.rng.permutation(TENSOR_TERMS)[:k]]
        if other is None:
            kinds = [x for x in kinds if x != "other"] or ["self"]
        self.kinds += kinds
        coefs = [self.coef() for _ in kinds]

        def elem(i):
            out = 0.0
            for kind, c in zip(kinds, coefs):
                out = out + c * self.term(kind, t, i, comp, other)
            return out

        return tl.gen(n, elem)

    def term(self, kind, t, i, comp, other):
        n, T = self.n, self.T
        x = lambda: self.tensor("x", n)  # noqa: E731 - a loop-invariant input
        if kind == "self":
            return comp(i)
        if kind == "left":
            return tl.iverson(i >= 1, comp(i - 1))
        if kind == "right":
            return tl.iverson(i + 1 <= n - 1, comp(i + 1))
        if kind == "reverse":
            return comp(n - 1 - i)
        if kind == "act":
            return self.act(comp(i))
        if kind == "where":
            op = self.draw(st.sampled_from([">", ">=", "<", "<="]))
            cmp = {">": tl.gt, ">=": tl.ge, "<": tl.lt, "<=": tl.le}[op](comp(i), x()[i])
            return tl.where(cmp, comp(i), 0.5 * comp(i) * x()[i])
        if kind == "maximum":
            return tl.maximum(comp(i), x()[i])
        if kind == "minimum":
            return tl.minimum(comp(i), -0.5 * x()[i])
        if kind == "upwind":  # Burgers: max(u, 0)·(u[i] - u[i-1]) + min(u, 0)·(u[i+1] - u[i]), scaled
            u = comp(i)
            back = u - tl.iverson(i >= 1, comp(i - 1))
            fwd = tl.iverson(i + 1 <= n - 1, comp(i + 1)) - u
            return -0.25 * (tl.maximum(u, 0.0) * back + tl.minimum(u, 0.0) * fwd)
        if kind == "global":
            w = self.tensor("w", n)
            return 0.25 * tl.tanh(tl.sum(n, lambda j: w[j] * comp(j)))
        if kind == "invariant":
            a = self.scalar("a")
            which = self.draw(st.sampled_from(["a", "exp", "norm"]))
            fac = {"a": lambda: a, "exp": lambda: tl.exp(a) - 1.0,
                   "norm": lambda: 0.25 * tl.sum(n, lambda j: x()[j] * x()[j])}[which]()
            return tl.tanh(fac) * comp(i)
        if kind == "tguard":
            if self.draw(st.booleans()):
                return tl.iverson(t >= 1, comp(i))
            return tl.iverson(i <= t, comp(i))
        if kind == "forcing":
            return self.tensor("f", T, n)[t, i]
        if kind == "forcing_rev":
            return self.tensor("f", T, n)[T - 1 - t, i]
        if kind == "forcing_next":
            return self.tensor("g", T + 1, n)[t + 1, i]
        if kind == "forcing_prev":
            return tl.iverson(t >= 1, self.tensor("f", T, n)[t - 1, i])
        if kind == "strided":
            return self.tensor("q", 2 * T, n)[2 * t + 1, i]
        if kind == "other":
            okind, get = other
            return get(i) if okind == "tensor" else get()
        raise AssertionError(kind)

    def scalar_next(self, t, comp, other):
        n, T = self.n, self.T
        k = self.draw(st.integers(1, 3))
        kinds = [str(x) for x in self.rng.permutation(SCALAR_TERMS)[:k]]
        if other is None:
            kinds = [x for x in kinds if x != "other"] or ["self"]
        self.kinds += ["s:" + x for x in kinds]
        out = 0.0
        for kind in kinds:
            c = self.coef()
            s = comp()
            if kind == "self":
                e = s
            elif kind == "act":
                e = self.act(s)
            elif kind == "where":
                a = self.scalar("a")
                e = tl.where(s > a, s, -0.5 * s)
            elif kind == "invariant":
                e = tl.tanh(tl.exp(self.scalar("a")) - 1.0) * s
            elif kind == "global":
                x = self.tensor("x", n)
                e = tl.tanh(tl.sum(n, lambda j: x[j] * tl.sin(s * x[j])))
            elif kind == "tguard":
                e = tl.iverson(t >= 1, s)
            elif kind == "forcing":
                e = self.tensor("h", T)[t] if self.draw(st.booleans()) else self.tensor("h", T)[T - 1 - t]
            else:
                okind, get = other
                e = tl.tanh(tl.sum(n, lambda j: get(j))) if okind == "tensor" else get()
            out = out + c * e
        return out

    # -- the whole program ------------------------------------------------------------
    def build(self, policy, init=None):
        """``post(loop(T, init, body))``; ``init``: a given initial state
        (a term of an earlier loop's result) instead of a drawn one."""
        n = self.n
        st_kind = self.state
        draw = self.draw
        comp_types = {"tensor": ["tensor"], "scalar": ["scalar"], "pair_ts": ["tensor", "scalar"],
                      "pair_tt": ["tensor", "tensor"]}[st_kind]

        def init_of(kind, k):
            u = self.tensor(f"u{k}", n) if kind == "tensor" else self.scalar(f"u{k}")
            if not draw(st.booleans()):
                return u
            self.kinds.append("init")
            if kind == "tensor":
                return tl.gen(n, lambda i: tl.tanh(u[i]) + 0.5 * tl.iverson(i >= 1, u[i - 1]))
            return tl.sin(u) + 0.25

        if init is None:
            inits = [init_of(kind, k) for k, kind in enumerate(comp_types)]
            init = inits[0] if len(inits) == 1 else tl.pair(inits[0], inits[1])

        def getter(s, k, kind):
            sk = s if len(comp_types) == 1 else tl.proj(s, k)
            return (lambda i: sk[i]) if kind == "tensor" else (lambda: sk)

        def body(t, s):
            outs = []
            for k, kind in enumerate(comp_types):
                comp = getter(s, k, kind)
                other = None
                if len(comp_types) == 2:
                    ok = comp_types[1 - k]
                    other = (ok, getter(s, 1 - k, ok))
                outs.append(self.tensor_next(t, comp, other) if kind == "tensor" else self.scalar_next(t, comp, other))
            return outs[0] if len(outs) == 1 else tl.pair(outs[0], outs[1])

        L = tl.loop(self.T, init, body, checkpoint=policy)
        post = draw(st.sampled_from(["state", "state", "map"]))
        if post == "map":
            self.kinds.append("post")
            z = self.tensor("z", n)
            if st_kind == "scalar":
                L = L * tl.sum(n, lambda i: z[i])
            elif st_kind == "tensor":
                L = tl.gen(n, lambda i: L[i] * z[i])
            else:
                L = tl.pair(tl.gen(n, lambda i: tl.proj(L, 0)[i] * z[i]), tl.proj(L, 1))
        return L


def _loss(e: Expr, n):
    """A scalar of the program's value, weighting each entry differently."""
    t = type_of(e)
    if isinstance(t, PairT):
        return _loss(tl.proj(e, 0), n) + 0.5 * _loss(tl.proj(e, 1), n)
    if isinstance(t, TensorT):
        return tl.sum(n, lambda i: e[i] * e[i] + 0.5 * e[i])
    return e * e + 0.5 * e


# how a second loop meets the first (two-loop programs): its initial state is
# the first's result; the two are independent, feeding one loss (sharing the
# first's inputs: a parameter in both); its body reads terms of the first's
# result as loop-invariant inputs (``x``, ``a``)
# ``per_element``: the second loop is a per-element loop ``gen[j:n] loop(T2,
# init_j, body_j)`` (a scalar state per j, started from the first's result,
# read back at j; run as one loop over the elements, loops.lift_loop)
LINKS = ("chain", "independent", "invariant", "per_element")


def _second_loop(draw, b: _Loop, L1, sym2: bool, steps2: int, policy2, link: str):
    """``(program value, second builder)`` of a two-loop program."""
    n = b.n
    decl = dict(b.decl)
    if link == "invariant":  # terms of L1's result stand for the inputs x and a in the second body
        t1 = type_of(L1)
        first = tl.proj(L1, 0) if isinstance(t1, PairT) else L1
        if isinstance(type_of(first), TensorT):
            decl["x"] = tl.gen(n, lambda i: tl.tanh(first[i]))
            decl["a"] = 0.5 * tl.tanh(tl.sum(n, lambda j: first[j]))
        else:
            decl["a"] = 0.5 * tl.tanh(first)
            decl["x"] = tl.gen(n, lambda i: tl.sin(first))
    if link == "per_element":
        return _per_element(draw, b, L1, sym2, steps2, policy2, decl)
    state2 = b.state if link == "chain" else draw(st.sampled_from(["tensor", "scalar", "pair_ts"]))
    b2 = _Loop(draw, sym2, steps2, state2, n, tname="T2", prefix="v", decl=decl)
    L2 = b2.build(policy2, init=L1 if link == "chain" else None)
    b.kinds += ["2:" + link] + ["2:" + k for k in b2.kinds]
    if link == "chain":
        return L2, b2
    return tl.pair(L1, L2), b2


def _per_element(draw, b: _Loop, L1, sym2: bool, steps2: int, policy2, decl):
    n = b.n
    t1 = type_of(L1)
    first = tl.proj(L1, 0) if isinstance(t1, PairT) else L1
    b2 = _Loop(draw, sym2, steps2, "scalar", n, tname="T2", prefix="v", decl=decl)
    x = b2.tensor("x", n)
    c = b2.coef()

    def elem(j):
        start = first[j] if isinstance(type_of(first), TensorT) else tl.tanh(first) + 0.5 * x[j]
        return tl.loop(b2.T, start, lambda t, s: b2.scalar_next(t, lambda: s, None) + c * tl.sin(x[j] + s),
                       checkpoint=policy2)

    b.kinds += ["2:per_element"] + ["2:" + k for k in b2.kinds]
    return tl.pair(L1, tl.gen(n, elem)), b2


def build_loop_program(draw, *, state: str = "any", symbolic_T=None, max_steps: int = 4, max_size: int = 4,
                       policies=POLICIES, loops: int = 1):
    """The parts of :func:`tests.strategies.loop_programs` (see there);
    ``loops=2``: a program with two loops, linked as in :data:`LINKS`
    (the second's ``T2`` an int or the size ``T2``, its own policy)."""
    if state == "any":
        state = draw(st.sampled_from(["tensor", "tensor", "scalar", "pair_ts", "pair_tt"]))
    sym = draw(st.booleans()) if symbolic_T is None else symbolic_T
    steps = draw(st.integers(1 if sym else 0, max_steps))
    nval = draw(st.integers(1, max_size))
    policy = draw(st.sampled_from(list(policies)))
    seed = draw(st.integers(0, 2**16))
    n = tl.size("n")
    b = _Loop(draw, sym, steps, state, n)
    expr = b.build(policy)
    sizes_env = {"n": nval, "T": steps}
    link = None
    if loops == 2:
        link = LINKS[int(b.rng.integers(len(LINKS)))]  # seeded: hypothesis's own draws favour the list's ends
        sym2 = draw(st.booleans()) if symbolic_T is None else symbolic_T
        steps2 = draw(st.integers(1 if sym2 else 0, max_steps))
        expr, _ = _second_loop(draw, b, expr, sym2, steps2, draw(st.sampled_from(list(policies))), link)
        sizes_env["T2"] = steps2
        policy = (policy, _policy_of_second(expr))
    rng = np.random.default_rng(seed)
    inputs, types = {}, {}
    for v in sorted(input_vars(expr), key=lambda v: v.name):
        t = v.type
        shape = []
        while isinstance(t, TensorT):
            shape.append(t.extent.evaluate({s: sizes_env[s.name] for s in t.extent.size_vars()}))
            t = t.elem
        inputs[v.name] = rng.uniform(-1, 1, size=tuple(shape)) if shape else float(rng.uniform(-1, 1))
        types[v.name] = v.type
    used = {s.name for s in size_vars(expr)}
    sizes = {k: v for k, v in sizes_env.items() if k in used}
    return dict(expr=expr, inputs=inputs, sizes=sizes, input_types=types, loss=_loss(expr, n),
                wrt=tuple(sorted(input_vars(expr), key=lambda v: v.name)), policy=policy, steps=steps,
                state=state, kinds=tuple(b.kinds), symbolic_T=sym, size_values=sizes_env)


def _policy_of_second(expr):
    from tensorlang.loops import chain

    return chain(expr, "test")[-1].checkpoint


@st.composite
def two_loop_programs(draw, state: str = "any", symbolic_T: bool | None = None, max_steps: int = 3,
                      max_size: int = 3):
    """Random programs with two loops (``build_loop_program(loops=2)``), as
    :class:`tests.strategies.LoopProgram`; ``policy`` is the pair of the
    loops' policies and ``steps`` the first's (``size_values["T2"]`` the second's)."""
    from .strategies import LoopProgram

    parts = build_loop_program(draw, state=state, symbolic_T=symbolic_T, max_steps=max_steps, max_size=max_size,
                               loops=2)
    return LoopProgram(parts["expr"], parts["inputs"], parts["sizes"], bound=10.0, input_types=parts["input_types"],
                       loss=parts["loss"], wrt=parts["wrt"], policy=parts["policy"], steps=parts["steps"],
                       state=parts["state"], kinds=parts["kinds"], symbolic_T=parts["symbolic_T"],
                       size_values=parts["size_values"])


__all__ = ["build_loop_program", "two_loop_programs", "POLICIES", "LINKS"]


def dot_values(a, b) -> float:
    """<a, b> over a loop state's value: an array, a float, or nested tuples of them."""
    if isinstance(a, tuple):
        return sum(dot_values(x, y) for x, y in zip(a, b))
    return float(np.sum(np.asarray(a, dtype=float) * np.asarray(b, dtype=float)))


def random_like(v, rng):
    """A standard-normal value of ``v``'s shape (nested tuples kept)."""
    if isinstance(v, tuple):
        return tuple(random_like(x, rng) for x in v)
    if np.ndim(v):
        return rng.standard_normal(np.shape(v))
    return float(rng.standard_normal())
