"""Fusion of a cheap producer read by several consumers at their own point
(issue #13 items 2 and 5: one kernel per derivative callable, no
materialized intermediates; paper Sections 4.3 and 5.4).

``value_and_grad`` derives one program in which the loss's residuals are
shared by the value and the gradient: in the 5-point Laplacian prior
``Σ [inner]·(L u)² + (u - f)²`` both ``L u`` and ``u - f`` are let-bound
tensors read by the value's sum and by the gradient's ``2·L u`` and
``2·(u - f)``.  With two consumers neither is fused by ``fusion.py``'s
one-use rule, so the kernel stored three n x n temporaries and swept them
again: ``value_and_grad`` ran 1.5x ``grad`` (which reads each residual
once, fused) where the value should add one reduction.

``X = gen[g] s`` is substituted into every consumer when

* ``s`` is cheap and pointwise (``shifted.ops``: at most ``MAX_OPS``
  arithmetic nodes, no sum) and calls no function (``tanh``, ``sqrt`` …
  computed again in each consumer made the MLP's ``value_and_grad`` 1.5x
  and the n-body gradient 1.3x slower),
* every use is an access ``X[i_1, ..., i_k]`` whose indices are exactly the
  binders of the nest around it, over ``g``'s own extents, with no other
  binder outside them (the consumer's iteration domain is ``X``'s box, so
  each consumer evaluates ``s`` at most once per point of the box),
* the uses sit in at most ``MAX_CONSUMERS`` bindings.

Each consumer then computes ``s`` where it reads it: the work added is at
most ``(consumers - 1)·ops(s)`` per point, a bounded constant, against a
store and one load per consumer of a temporary the size of the box.  When
the consumers' nests share a domain, hfuse.py merges them and the lowering
computes the common expression once.  The decision is taken on typed IR
nodes (affine index terms), never on text.

Measured (session 16, one thread, the rule off against on in one process,
alternated, medians): the Laplacian ``value_and_grad`` at 1024² 0.84-0.94x
(3.94 -> 3.47 ms, against 2.53 ms for ``grad``), the image workload's
0.86-0.88x, the deconvolution's 0.89-0.94x at n = 10⁶ (one noisy round of
m = 16 read 1.20x), the n-body gradient's 0.96-1.01x (the one ``grad``
kernel of the benchmark suite that changes; every loss kernel is unchanged;
the loop programs were not compared).  Into sums too: the value's consumer is a sum, and forbidding it
(as shifted.py does for its rule) removed every gain.
"""

from __future__ import annotations

from ..ir import Call, Expr, children
from .shifted import MAX_OPS, ops  # MAX_OPS: arithmetic nodes of the producer's body, as for shifted uses

MAX_CONSUMERS = 3  # bindings whose nests evaluate the producer's body
MAX_SITES = 8  # uses in all


def _own_point(site, g) -> bool:
    """The use's index is its nest's binders, over ``g``'s extents, and the
    nest has no other binder (an outer one would evaluate ``s`` once per
    outer point)."""
    idx, binders, _ = site
    if len(binders) != len(g) or len(idx) != len(g):
        return False
    for a, (v, n), (_, m) in zip(idx, binders, g):
        terms = getattr(a, "terms", None)
        if terms is None or len(terms) != 1 or a.const != 0:
            return False
        (s, k), = terms
        if s is not v or k != 1 or not same_extent(n, m):
            return False
    return True


def same_extent(a, b) -> bool:
    """Structurally equal extents (canonical affine forms: sorted terms)."""
    ta, tb = getattr(a, "terms", None), getattr(b, "terms", None)
    if ta is None or tb is None or len(ta) != len(tb) or a.const != b.const:
        return False
    return all(s is t and c == d for (s, c), (t, d) in zip(ta, tb))


def _calls(e) -> bool:
    """Whether ``e`` calls a function anywhere."""
    if isinstance(e, Call):
        return True
    return any(_calls(y) for c in children(e) for y in (c if isinstance(c, tuple) else (c,)) if isinstance(y, Expr))


def own_point_uses(g, body, acc, consumers: int) -> bool:
    """Whether ``X = gen[g] body`` with the uses ``acc`` (``fusion._Uses``),
    found in ``consumers`` bindings, is a cheap producer every consumer
    reads at its own point (module doc)."""
    if not g or acc.other or not acc.sites or len(acc.sites) > MAX_SITES:
        return False
    if consumers > MAX_CONSUMERS or ops(body) > MAX_OPS or _calls(body):
        return False
    return all(_own_point(site, g) for site in acc.sites)


__all__ = ["own_point_uses", "same_extent", "MAX_OPS", "MAX_CONSUMERS"]
