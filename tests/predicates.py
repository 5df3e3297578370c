"""An evaluator of affine predicates of the tests' own (not the library's):
tests that simplify, decide or gist a predicate check the result point by
point against the original with it."""

from __future__ import annotations

from tensorlang.ir import And, BoolLit, Cmp, Exists, Or


def aff_value(a, env: dict, sizes: dict | None = None) -> int:
    """The affine index ``a`` at ``env`` (symbol -> int); a size symbol not
    in ``env`` is looked up by name in ``sizes``."""
    return a.const + sum(c * (env[s] if s in env else sizes[s.name]) for s, c in a.terms)


def holds(p, env: dict, sizes: dict | None = None) -> bool:
    """Does ``p`` (comparisons, ∧, ∨, bounded ∃) hold at ``env``?"""
    if isinstance(p, BoolLit):
        return p.value
    if isinstance(p, Cmp):
        lhs, rhs = aff_value(p.lhs, env, sizes), aff_value(p.rhs, env, sizes)
        return {"<": lhs < rhs, "<=": lhs <= rhs, "==": lhs == rhs}[p.op]
    if isinstance(p, And):
        return holds(p.lhs, env, sizes) and holds(p.rhs, env, sizes)
    if isinstance(p, Or):
        return holds(p.lhs, env, sizes) or holds(p.rhs, env, sizes)
    if isinstance(p, Exists):
        return any(holds(p.body, {**env, p.var: v}, sizes) for v in range(aff_value(p.extent, env, sizes)))
    raise AssertionError(f"unexpected predicate {p!r}")
