"""Meta-tests of proofs/ (issue #7) and the quick proof subset, run by CI inside pytest.

* every rule registered in passes/rules.py has an obligation;
* proofs/README.md's rule table names only functions and test files that
  exist, and names the function each registered rule is implemented by;
* the --quick obligations pass (one pytest case per rule, so a failing rule
  is named by its own test id).
"""

import os

import pytest

from proofs import runner
from proofs.framework import FAIL, PASS, covered_numbers, load_rules


def test_every_registered_rule_has_an_obligation():
    rules = load_rules()
    missing = sorted(set(rules) - covered_numbers(), key=runner._key)
    assert not missing, f"registered rules without an obligation in proofs/: {missing}"


def test_readme_table_names_existing_functions_and_tests():
    rows = runner.readme_rows()
    assert rows, "proofs/README.md has no rule table between the markers"
    for number, figure, fn, tests, obligation in rows:
        if fn != "—":
            assert callable(runner.resolve(fn)), f"README row {number}: {fn} is not a function"
        for t in [x.strip() for x in tests.split(",") if x.strip() and x.strip() != "—"]:
            assert os.path.exists(os.path.join(runner.ROOT, t)), f"README row {number}: no test file {t}"
        path = obligation.split(" ")[0]
        assert os.path.exists(os.path.join(runner.ROOT, path)), f"README row {number}: no obligation module {path}"


def test_readme_table_is_in_sync_with_the_registry():
    """Regenerate with ``python -m proofs --write-readme`` when a rule lands."""
    by_number = {r[0].split(",")[0]: r for r in runner.readme_rows()}
    for number, rule in load_rules().items():
        fn = getattr(rule.fn, "__wrapped__", rule.fn)
        dotted = f"{fn.__module__}.{fn.__qualname__}"
        row = next((r for n, r in by_number.items() if n == number or number in r[0].split(", ")), None)
        if row is None:  # an alias (e.g. 5.19 -> 5.18) is listed in its obligation's row
            from proofs.framework import obligation_for

            row = by_number.get(obligation_for(number).number)
        assert row is not None and row[2] == dotted, f"README row for rule {number} should name {dotted}"


def test_every_theorem_and_numbered_rule_of_the_paper_has_an_obligation():
    want = [f"5.{k}" for k in range(1, 35) if k not in (19, 20)]
    want += [f"6.{k}" for k in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16)]
    want += [f"6.{k}" for k in (20, 25, 26, 27, 28, 31, 32, 33, 34, 35, 36, 39, 44, 47, 48, 49)]
    want += [f"4.{k}" for k in range(22, 35)] + [f"6.{k}" for k in range(50, 55)]
    want += ["Theorem 6.1", "Theorem 6.55", "Section 5"]
    assert set(want) <= covered_numbers()


QUICK = [ob.number for ob in runner.ordered() if ob.quick and ob.kind != "theorem"]


@pytest.mark.parametrize("number", QUICK)
def test_quick_obligation(number):
    (r,) = runner.run(quick=True, only=[number])
    assert r.verdict == PASS, f"{r.number} {r.title}: {r.verdict}: {r.detail}"


@pytest.mark.parametrize("number", ["Theorem 6.1", "Theorem 6.55"])
def test_quick_theorem(number):
    (r,) = runner.run(quick=True, only=[number])
    assert r.verdict == PASS, f"{r.number}: {r.verdict}: {r.detail}"


def test_a_missing_module_fails_an_obligation_instead_of_passing_vacuously(monkeypatch):
    # issue 14 item 5: a missing pass module is a FAIL, never "no instances"
    import importlib

    from proofs import framework

    real = importlib.import_module

    def missing(name, *a):
        if name == "tensorlang.passes.gen_pushout":
            raise ImportError("No module named 'tensorlang.passes.gen_pushout'")
        return real(name, *a)

    monkeypatch.setattr(framework.importlib, "import_module", missing)
    r = framework.guarded("5.21", "gen pushout", framework.load_rules)
    assert r.verdict == framework.FAIL and "gen_pushout" in r.detail


def test_an_obligation_that_checks_nothing_does_not_pass():
    # issue 14 item 5: no instance fired, no stage available, an empty corpus:
    # each is a verdict that fails the run (Result.ok, the exit status)
    from proofs import __main__ as main, framework

    empty = framework.Tally("5.21", "gen pushout").result()  # a generator that produced nothing
    assert empty.verdict == framework.NOT_EXERCISED and not empty.ok
    t = framework.Tally("5.21", "gen pushout", instances=3)
    t.unavailable.append("cost: not available")
    assert not t.result().ok  # instances, none checked
    fired = framework.Tally("5.21", "gen pushout", instances=3, fired=3)
    assert fired.result().ok
    for verdict in (framework.NOT_IMPL, framework.NOT_AVAIL, framework.NOT_EXERCISED, FAIL):
        assert not framework.Result("x", "t", verdict).ok

    def vacuous(quick):
        return framework.Result("9.99", "vacuous", framework.NOT_EXERCISED)

    framework.OBLIGATIONS["9.99"] = framework.Obligation("9.99", 0, "rewrite", "vacuous", vacuous)
    try:
        assert main.main(["--only", "9.99"]) == 1
    finally:
        del framework.OBLIGATIONS["9.99"]
