"""Checkpoint schedules of a loop's reverse sweep (issue #17 item 2; an
extension of the paper's Section 6.2 adjoint to ``tl.loop``, see
tensorlang/loops.py): ``"all"``, every ``k``-th state, and Griewank's
binomial (Revolve) schedule.  Re-exported by ``tensorlang.loops``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

def binomial_budget(policy, T: int) -> int:
    """The snapshot budget ``s`` of a binomial policy at ``T`` steps (default
    ``max(1, ceil(log2 T))``, giving ``O(log T)`` repetitions)."""
    s = policy[1]
    if s is None:
        s = max(1, math.ceil(math.log2(T))) if T > 1 else 1
    return s


def repetitions(s: int, T: int) -> int:
    """Revolve's repetition number: the least ``r`` with ``C(s + r, s) >= T``."""
    r = 0
    while math.comb(s + r, s) < T:
        r += 1
    return r


@dataclass
class Schedule:
    """A reverse sweep as actions over ``T >= 1`` steps, run on one "current" state.

    ``("store", slot, t)``: copy the current state ``s_t`` to checkpoint slot
    ``slot``; ``("restore", slot, t)``: current := slot; ``("advance", t0,
    t1)``: run the body from ``s_t0`` to ``s_t1``; ``("final",)``: the
    current state is ``s_T`` (the value; the reverse sweep starts);
    ``("reverse", t)``: one adjoint step of step ``t`` at the current state
    ``s_t``.  ``slots``: peak stored states; ``forward_steps``: body
    evaluations in all (the primal's ``T`` included); ``recomputed``: those
    beyond ``T``."""

    actions: list
    slots: int
    forward_steps: int

    @property
    def recomputed(self) -> int:
        return self.forward_steps - self.steps

    @property
    def steps(self) -> int:
        return sum(1 for a in self.actions if a[0] == "reverse")


def _finish(acts: list) -> Schedule:
    slots = 1 + max((a[1] for a in acts if a[0] == "store"), default=-1)
    fwd = sum(a[2] - a[1] for a in acts if a[0] == "advance")
    return Schedule(acts, slots, fwd)


def schedule(policy, T: int) -> Schedule:
    """The action list of a checkpoint policy at ``T >= 1`` steps (class doc)."""
    acts: list = []
    if policy == "all":
        for t in range(T):
            acts += [("store", t, t), ("advance", t, t + 1)]
        acts.append(("final",))
        for t in reversed(range(T)):
            acts += [("restore", t, t), ("reverse", t)]
        return _finish(acts)
    if isinstance(policy, int):
        k = policy
        starts = list(range(0, T, k))
        nseg = len(starts)
        for j, t0 in enumerate(starts):
            acts += [("store", j, t0), ("advance", t0, min(t0 + k, T))]
        acts.append(("final",))
        for j in reversed(range(nseg)):
            t0 = starts[j]
            t1 = min(t0 + k, T)
            # recompute the segment: s_t0 is in slot j, s_t (t > t0) goes to slot nseg + t - t0 - 1
            acts.append(("restore", j, t0))
            for t in range(t0 + 1, t1):
                acts += [("advance", t - 1, t), ("store", nseg + t - t0 - 1, t)]
            for t in reversed(range(t0, t1)):
                acts += [("restore", j if t == t0 else nseg + t - t0 - 1, t), ("reverse", t)]
        return _finish(acts)
    return _revolve(T, binomial_budget(policy, T))


def _revolve(T: int, s: int) -> Schedule:
    """Griewank's binomial schedule with ``s`` snapshots (slot 0 holds ``s_0``):
    a range ``[a, b)`` holding ``s_a`` with ``c`` free slots has ``c + 1``
    checkpoints and repetition number ``r`` (least with ``C(c+1+r, c+1) >=
    b - a``); its snapshot goes where the right part, ``C(c + r, c)`` steps
    long, can be reversed with ``c`` checkpoints, and the left part with
    ``c + 1`` and ``r - 1`` repetitions (``C(c+1+r, c+1) = C(c+r, c+1) +
    C(c+r, c)``).  The forward steps beyond the primal's are at most
    ``r·T`` (Griewank and Walther, Revolve)."""
    acts: list = [("store", 0, 0), ("advance", 0, T), ("final",)]

    def rev(a: int, b: int, c: int, slot: int):
        # s_a is in slot ``slot``; ``c`` further slots are free
        if b - a == 1:
            acts.extend((("restore", slot, a), ("reverse", a)))
            return
        if c == 0:  # no snapshot left: recompute from a for each step
            for t in reversed(range(a, b)):
                acts.append(("restore", slot, a))
                if t > a:
                    acts.append(("advance", a, t))
                acts.append(("reverse", t))
            return
        # c + 1 checkpoints here (s_a's slot and c free): r repetitions
        # reverse C(c + 1 + r, c + 1) steps; the right part gets c checkpoints
        r = repetitions(c + 1, b - a)
        right = max(1, min(math.comb(c + r, c), b - a - 1))
        m = b - right
        acts.extend((("restore", slot, a), ("advance", a, m), ("store", slot + 1, m)))
        rev(m, b, c - 1, slot + 1)
        rev(a, m, c, slot)

    rev(0, T, s - 1, 0)
    return _finish(acts)
