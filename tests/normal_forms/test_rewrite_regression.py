"""Regression for the rewrite driver (issue 14 item 2): moving the passes onto
``passes/rewrite.py`` and the rule tables must not change a single program.

``tests/normal_forms/test_rewrite_regression.pkl.gz`` stores a corpus of source programs
(the examples, the benchmark workloads, the hand-written tensor-SSA examples
and a few random programs) together with what the passes made of them
*before* the port: the output of each Section 5 pass, of ``normalize``, of the
total derivative and of the adjoint (unsimplified and simplified), each
alpha-canonicalized (``canonicalize``: fresh names differ between runs).
Unpickling re-interns the stored terms, so the check is identity: the
current passes must give the very same object.  The sources are stored too
(not re-drawn), so a change to the test strategies does not move the corpus.

Regenerate (only when a pass's output is *meant* to change, and say so in the
commit): ``python -m tests.normal_forms.test_rewrite_regression``.
"""

from __future__ import annotations

import gzip
import os
import pickle
import sys

import pytest

import tensorlang as tl  # noqa: F401  (registers the built-in functions)
from tensorlang.errors import TensorLangError
from tensorlang.ir import RealT, TensorT, canonicalize, input_vars, scalar_elem

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_rewrite_regression.pkl.gz")


def _wrt(e):
    """The differentiable inputs: real-valued tensors and scalars, by name."""
    return sorted(
        v.name for v in input_vars(e) if isinstance(v.type, (RealT, TensorT)) and isinstance(scalar_elem(v.type), RealT)
    )


def _by_name(e, names):
    vs = {v.name: v for v in input_vars(e)}
    return [vs[n] for n in names]


def stages(e, wrt_names):
    """``{stage: canonical program or error text}`` for one source program."""
    from tensorlang import autodiff, driver
    from tensorlang.passes.gen_pushout import gen_pushout
    from tensorlang.passes.let_lift import let_lift
    from tensorlang.passes.pair_elim import pair_elim
    from tensorlang.sharing import explicit_sharing

    out = {}

    def rec(name, fn):
        try:
            r = fn()
        except TensorLangError as exc:
            out[name] = f"error: {type(exc).__name__}"
            return None
        out[name] = canonicalize(r)
        return r

    shared = explicit_sharing(e)
    ll = rec("let_lift", lambda: let_lift(shared))
    pe = rec("pair_elim", lambda: pair_elim(ll)) if ll is not None else None
    if pe is not None:
        rec("gen_pushout", lambda: gen_pushout(pe))
    rec("normalize", lambda: driver.route("normalize for derivatives").run(e))
    xs = _by_name(e, wrt_names)
    if xs:
        rec("derivative_raw", lambda: autodiff.derivative(e, xs, simplify=False))
        rec("derivative", lambda: autodiff.derivative(e, xs))
        rec("adjoint_raw", lambda: autodiff.adjoint(e, xs, cotangent="dy_", simplify=False))
        rec("adjoint", lambda: autodiff.adjoint(e, xs, cotangent="dy_"))
    return out


def corpus():
    """``[(label, source, wrt names)]``."""
    from proofs.theorems import example_programs, random_programs, workload_programs
    from tests import ssa_examples

    progs = []
    for label, e, wrt in example_programs() + workload_programs(True):
        if isinstance(e, Exception):
            continue
        progs.append((label, e, sorted(getattr(v, "name", v) for v in wrt) if wrt else _wrt(e)))
    for name, make in ssa_examples.EXAMPLES.items():
        e = make()[0]
        progs.append((f"ssa:{name}", e, _wrt(e)))
    for k, p in enumerate(random_programs(6, output="scalar", pairs=False)):
        progs.append((f"random scalar #{k}", p.expr, _wrt(p.expr)))
    for k, p in enumerate(random_programs(3, output="tensor", pairs=True)):
        progs.append((f"random pair #{k}", p.expr, _wrt(p.expr)))
    return progs


def _load():
    if not os.path.exists(DATA):
        pytest.fail(f"{DATA} is missing: run python -m tests.normal_forms.test_rewrite_regression")
    import tests.program_builder  # noqa: F401  (registers the functions random programs call)

    with gzip.open(DATA, "rb") as f:
        return pickle.load(f)


def _labels():
    if not os.path.exists(DATA):
        return ["<missing>"]  # the test reports it
    return [row[0] for row in _load()]


@pytest.mark.parametrize("label", _labels())
def test_passes_give_the_stored_programs(label):
    rows = {row[0]: row for row in _load()}
    if label not in rows:
        pytest.fail(f"{DATA} has no program {label!r}: regenerate it")
    _, source, wrt, want = rows[label]
    got = stages(source, wrt)
    assert set(got) == set(want)
    for stage, w in want.items():
        g = got[stage]
        if isinstance(w, str) or isinstance(g, str):
            assert g == w, f"{label} / {stage}: {g!r} != {w!r}"
        else:
            assert g is w, f"{label} / {stage} changed:\n  now {g!r}\n  was {w!r}"


def main():
    sys.setrecursionlimit(20000)
    import tests.program_builder  # noqa: F401

    rows = []
    for label, e, wrt in corpus():
        rows.append((label, e, wrt, stages(e, wrt)))
        print(label, sorted(k for k, v in rows[-1][3].items() if isinstance(v, str)), flush=True)
    with gzip.open(DATA, "wb") as f:
        pickle.dump(rows, f, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"wrote {len(rows)} programs to {DATA}")


if __name__ == "__main__":
    main()
