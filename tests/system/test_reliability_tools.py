"""Issue 15, Tools: the command line exits 2 with a one-line message on a user
error and keeps exit 1 for "a verdict failed"; issue 18.4: ``tensorlang audit
--format markdown`` prints tables that paste into a PR."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from click.testing import CliRunner

from tensorlang.cli import main

PROGRAM = textwrap.dedent(
    """
    import tensorlang as tl
    n, m = tl.sizes("n m")
    x = tl.tensor("x", n + m - 1)
    c = tl.tensor("c", m)
    z = tl.tensor("z", n)
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)

    def broken():
        raise ValueError("boom in the user's code")

    def deep():
        return deep()

    oob = tl.sum(n, lambda i: x[i + m] * z[i])
    """
)


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(PROGRAM)
    return str(p)


def _user_error(r, *fragments):
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["--entry", "broken"], ["broken()", "ValueError", "boom"]),
    (["--entry", "deep"], ["deep()", "RecursionError"]),
    (["--sizes", "n=100000000000000000000,m=3"], ["too large"]),
    (["--sizes", "n=0"], [">= 1"]),
    (["--sizes", "n=nan"], ["not an integer"]),
    (["--sizes", "q=3"], ["q"]),
    (["--wrt", "nope"], ["nope"]),
    (["--entry", "missing"], ["missing"]),
])
def test_audit_user_errors_exit_2_with_one_line(prog, args, fragments):
    _user_error(CliRunner().invoke(main, ["audit", prog, *args]), *fragments)


def test_audit_refuses_an_out_of_range_access(prog):
    _user_error(CliRunner().invoke(main, ["audit", prog, "--entry", "oob", "--sizes", "n=4,m=3"]), "x[")


@pytest.mark.parametrize("args", [["--sizes", "-3"], ["--sizes", "0", "4"], ["--timeout", "-1"], ["--timeout", "nan"],
                                  ["--repeats", "0"], ["--jobs", "0"], ["--threads", "-2"], ["--tol", "0"]])
def test_bench_bad_arguments_exit_2_with_one_line(args):
    r = CliRunner().invoke(main, ["bench", "--quick", "--no-plots", *args])
    _user_error(r, args[0])


def test_audit_markdown_is_a_pasteable_report(prog):
    r = CliRunner().invoke(main, ["audit", prog, "--sizes", "n=1000,m=16", "--format", "markdown"])
    assert r.exit_code == 0, r.output
    js = CliRunner().invoke(main, ["audit", prog, "--sizes", "n=1000,m=16", "--format", "json"])
    report = json.loads(js.output)
    md = r.output
    tables = re.findall(r"((?:^\|.*\|\n)+)", md, flags=re.M)
    assert len(tables) == 2, md
    for t in tables:  # every row has the header's number of cells
        rows = [ln for ln in t.splitlines()]
        widths = {len(re.split(r"(?<!\\)\|", ln)) for ln in rows}
        assert len(widths) == 1, rows
        assert set(rows[1]) <= set("|-:") and rows[1].count("|") == rows[0].count("|"), rows[1]
    stage_rows = tables[0].splitlines()[2:]
    assert len(stage_rows) == len(report["stages"])
    # the same facts as the JSON: the primal's cost, and one verdict row per verdict with its status
    primal = report["stages"][0]
    assert stage_rows[0].split("|")[2].strip() == str(primal["cost"])
    verdict_rows = tables[1].splitlines()[2:]
    assert len(verdict_rows) == len(report["verdicts"])
    for row, v in zip(verdict_rows, report["verdicts"]):
        assert v["name"] in row and v["status"] in row
    assert "```" in md and "sum[" in md  # the program, in a code block
