"""Theorem obligations: Section 5's pass obligations, Theorems 6.1 and 6.55.

Checked over a corpus: every example in ``examples/``, every benchmark
workload (``benchmarks/workloads.py``) and random programs
(``tests/strategies.py``).  For each program, :func:`tensorlang.audit.audit`
costs every stage and decides each bound symbolically for all sizes >= 1
where it can, else on a grid (the verdict says which).  The passes are also
checked for exact semantics on the random programs.
"""

from __future__ import annotations

import glob
import os

from tensorlang.audit import audit, load_program
from tensorlang.errors import TensorLangError, UnsupportedError
from tensorlang.ir import Expr

from .framework import FAIL, NOT_AVAIL, PASS, Result, guarded, obligation, same_semantics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def example_programs():
    """``[(label, expr, wrt)]`` for every Expr ``loss`` in examples/*.py."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        try:
            e = load_program(path, "loss")
        except TensorLangError:
            continue
        out.append((f"examples/{os.path.basename(path)}", e, None))
    return out


def workload_programs(quick: bool):
    from benchmarks.workloads import WORKLOADS
    out = []
    for w in WORKLOADS:
        try:
            e, _ = w.program()
        except Exception as exc:  # a workload that cannot be built is reported, not skipped silently
            out.append((f"benchmarks:{w.name}", exc, None))
            continue
        out.append((f"benchmarks:{w.name}", e, list(w.wrt)))
    return out


def random_programs(count: int, seed: int = 0, **kw):
    """``count`` programs from tests/strategies.py, a function of ``(count,
    seed, kw)`` alone.

    Not drawn by ``@given``: hypothesis's engine mixes in process state (a
    derandomized run still draws "local constants" harvested from every
    module in ``sys.modules``, so importing ``rich`` first changed random
    tensor #7).  Each program is drawn from its own ``ConjectureData`` fed by
    a ``random.Random`` seeded from ``seed`` and its position, with the
    constant pools switched off; a draw the strategy rejects is replaced by
    the next seed.  (Internal hypothesis API; hypothesis is pinned.)"""
    # hypothesis is a [test] dependency of the proofs: without it this
    # generator fails the obligation instead of yielding no programs
    import random
    import warnings

    from hypothesis.errors import HypothesisDeprecationWarning, StopTest, UnsatisfiedAssumption
    from hypothesis.internal.conjecture.data import ConjectureData
    from hypothesis.internal.conjecture.providers import HypothesisProvider

    from tests.strategies import programs

    class _NoConstants(HypothesisProvider):
        def _maybe_draw_constant(self, *args, **kwargs):
            return None  # the constant pools depend on the loaded modules

    strategy = programs(**kw)
    got = []
    for attempt in range(100 * count):
        if len(got) == count:
            break
        data = ConjectureData(random=random.Random(f"tensorlang-proofs/{seed}/{attempt}"), provider=_NoConstants)
        try:
            with warnings.catch_warnings():  # the strategy's assume() outside @given
                warnings.simplefilter("ignore", HypothesisDeprecationWarning)
                got.append(data.draw(strategy))
        except (StopTest, UnsatisfiedAssumption):
            continue
    if len(got) < count:
        raise RuntimeError(f"random_programs drew {len(got)} of {count} programs")
    return got


def corpus(quick: bool):
    progs = example_programs() + workload_programs(quick)
    for k, p in enumerate(random_programs(2 if quick else 30, output="scalar", pairs=False)):
        progs.append((f"random scalar #{k}", p.expr, None))
    if not quick:
        for k, p in enumerate(random_programs(10, output="tensor", pairs=False)):
            progs.append((f"random tensor #{k}", p.expr, None))
    return progs


_CACHE: dict = {}


def _audits(quick: bool):
    key = quick
    if key not in _CACHE:
        rows = []
        for label, e, wrt in corpus(quick):
            if not isinstance(e, Expr):
                rows.append((label, None, f"could not build: {e}"))
                continue
            try:
                rows.append((label, audit(e, wrt=wrt), None))
            except TensorLangError as exc:
                rows.append((label, None, str(exc)))
        _CACHE[key] = rows
    return _CACHE[key]


def _theorem(name: str, title: str, quick: bool) -> Result:
    fails, unchecked, grid, ok = [], [], [], 0
    for label, rep, err in _audits(quick):
        if rep is None:
            unchecked.append(f"{label}: {err}")
            continue
        v = next(x for x in rep.verdicts if x.name == name)
        if v.holds is False:
            fails.append(f"{label}: {v.detail}")
        elif v.holds is None:
            unchecked.append(f"{label}: {v.detail}")
        else:
            ok += 1
            if v.method != "symbolic":
                grid.append(label)
    n = ok + len(fails) + len(unchecked)
    how = "symbolic for all sizes >= 1" + (f"; grid only for {', '.join(grid[:4])}" if grid else "")
    if fails:
        return Result(name, title, FAIL, n, "", how, "; ".join(fails[:3]))
    if ok == 0:
        return Result(name, title, NOT_AVAIL, n, "", how, "; ".join(unchecked[:2]) or "empty corpus")
    detail = f"holds on {ok} of {n} programs"
    if unchecked:
        detail += f"; not checked on {len(unchecked)} (" + "; ".join(unchecked[:2]) + ")"
    return Result(name, title, PASS, n, "", how, detail)


@obligation("Theorem 6.1", figure=13, kind="theorem", title="$(D⟦e⟧σ) <= 4·$(e) for e in tensor SSA")
def theorem_6_1(quick):
    return guarded("Theorem 6.1", "$(D e) <= 4 $(e)", lambda: _theorem(
        "Theorem 6.1", "$(D⟦e⟧σ) <= 4·$(e) for e in tensor SSA", quick))


@obligation("Theorem 6.55", figure=17, kind="theorem", title="$_IO(D^T⟦e⟧σ) <= 4·$_IO(e) for e in tensor SSA")
def theorem_6_55(quick):
    return guarded("Theorem 6.55", "$_IO(D^T e) <= 4 $_IO(e)", lambda: _theorem(
        "Theorem 6.55", "$_IO(D^T⟦e⟧σ) <= 4·$_IO(e) for e in tensor SSA", quick))


@obligation("Section 5", figure=7, kind="theorem", title="passes: cost-neutral (c = 1) and exact semantics")
def section_5(quick):
    def run():
        r = _theorem("pass cost-neutrality", "every pass: $(γ(e)) <= $(e)", quick)
        r.number = "Section 5"
        sem = _pass_semantics(quick)
        if sem:
            r.verdict, r.detail = FAIL, sem + "; " + r.detail
        r.semantics = "exact sympy, every pass's input vs output, random programs"
        return r

    return guarded("Section 5", "passes", run)


def _pass_semantics(quick: bool) -> str | None:
    from tensorlang.audit import normal_form_passes

    from .terms import EXACT_SIZES  # noqa: F401  (sizes come from each program)

    for k, p in enumerate(random_programs(3 if quick else 25, seed=1, pairs=True)):
        cur = p.expr
        for label, fn in normal_form_passes():
            try:
                nxt = fn(cur)
            except UnsupportedError:  # e.g. an array-of-structs output: refused, not a wrong answer
                break
            msg = same_semantics(cur, nxt, [p.sizes]) if not p.relation_names else None
            if msg:
                return f"random program #{k}, {label}: {msg}"
            cur = nxt
    return None

