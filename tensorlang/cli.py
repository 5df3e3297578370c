"""The ``tensorlang`` command line: ``audit`` (the cost guarantees of the
paper's Sections 5-6, see :mod:`tensorlang.audit`) and ``bench`` (the
benchmark suite in ``benchmarks/``).

Exit status of ``audit``: 0 every verdict holds (verdicts whose stage is not
available are listed as such and not claimed), 1 a verdict fails (a compiler
bug), 2 bad usage or a bad program (the TensorLangError message, no traceback).
"""

from __future__ import annotations

import json
import os
import sys

import click

from .errors import TensorLangError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """tensorlang: a tensor language whose gradients are provably cheap."""


@main.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--entry", default="loss", show_default=True,
              help="The expression (or zero-argument function returning one) to audit.")
@click.option("--wrt", default=None, help="Inputs to differentiate, comma-separated (default: every tensor input).")
@click.option("--sizes", "sizes_text", default=None,
              help=f"Sizes to report costs at, e.g. n=1000,m=16 (default: {100} for each).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="text (rich tables), json, or markdown (tables to paste into a PR).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (same as --format json).")
@click.option("--show-kernels", is_flag=True, help="Print the generated loop nests (needs the backend).")
def audit(path, entry, wrt, sizes_text, fmt, as_json, show_kernels):
    """Cost every stage of PATH's program and its derivatives; check the paper's bounds."""
    from . import audit as A

    try:
        sizes = A.parse_sizes(sizes_text)
        expr = A.load_program(path, entry)
        wrt_names = [w.strip() for w in wrt.split(",") if w.strip()] if wrt else None
        from .loops import has_loop
        from .loop_audit import audit_loop

        run = audit_loop if has_loop(expr) else A.audit  # issue #17: loops certified per checkpoint policy
        report = run(expr, wrt=wrt_names, sizes=sizes, entry=entry, show_kernels=show_kernels)
    except TensorLangError as exc:
        click.echo(f"error: {_one_line(exc)}", err=True)
        sys.exit(2)
    except RecursionError:
        click.echo("error: the program is too deeply nested for this audit", err=True)
        sys.exit(2)
    if as_json or fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2, default=str))
    elif fmt == "markdown":
        click.echo(markdown_report(report, path))
    else:
        print_report(report, path)
    sys.exit(report.exit_code)


def _one_line(exc) -> str:
    return " ".join(str(exc).split())


def _md(text) -> str:
    """A markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


_HOW = {"symbolic": "symbolically, all sizes >= 1", "grid": "on a grid of sizes only", "counterexample": "counterexample"}


def markdown_report(report, path: str = "") -> str:
    """The audit as GitHub-flavoured markdown: the program, the cost of every
    stage and the verdicts as tables (``tensorlang audit --format markdown``)."""
    sizes = ", ".join(f"{k}={v}" for k, v in report.sizes.items()) or "(no sizes)"
    out = [f"### tensorlang audit: `{path}` :: `{report.entry}`", "",
           f"wrt {', '.join(f'`{w}`' for w in report.wrt) or '(none)'}; costs at {sizes}", "",
           "```", report.program, "```", "",
           "| stage | cost | ratio | symbolic cost (sizes >= 1) | IO cost |",
           "|---|---:|---:|---|---:|"]
    for r in report.rows:
        if not r.available:
            out.append(f"| {_md(r.name)} | not available |  | {_md(r.reason or '')} |  |")
            continue
        sym = "n/a" if r.symbolic is None else f"`{_md(r.symbolic)}`"
        if r.reason:
            sym += f" ({_md(r.reason)})"
        io = r.io_cost_at(report.sizes) if r.cost is not None else None
        out.append(f"| {_md(r.name)} | {'n/a' if r.cost is None else r.cost} | {_fmt_ratio(r.ratio)} | {sym} | "
                   f"{'' if io is None else io} |")
    out += ["", "| claim | verdict | how decided | detail |", "|---|---|---|---|"]
    mark = {"holds": "✅ holds", "FAILS": "❌ **FAILS**", "not available": "⚠️ not available"}
    for v in report.verdicts:
        out.append(f"| {_md(v.name)}: {_md(v.claim)} | {mark[v.status]} | {_md(_HOW.get(v.method, v.method))} | "
                   f"{_md(v.detail)} |")
    out += ["", "Asymptotic class (leading monomials): " +
            "; ".join(f"{k}: `{val}`" for k, val in report.asymptotic.items()), ""]
    if report.failed:
        out.append("**A cost guarantee FAILS** (a compiler bug): " + ", ".join(x.name for x in report.failed))
    elif report.unchecked:
        out.append("Not checked (a stage is not available): " + ", ".join(x.name for x in report.unchecked))
    else:
        out.append("All verdicts hold.")
    for name, src in report.kernels.items():
        out += ["", f"<details><summary>kernel: {name}</summary>", "", "```python", src.rstrip(), "```", "", "</details>"]
    return "\n".join(out) + "\n"


def _fmt_ratio(r) -> str:
    return "" if r is None else f"{r:.3g}x"


def print_report(report, path: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(120, Console().width))
    sizes = ", ".join(f"{k}={v}" for k, v in report.sizes.items()) or "(no sizes)"
    con.print(f"[bold]tensorlang audit[/bold] {path} :: {report.entry}   wrt {', '.join(report.wrt) or '(none)'}")
    con.print(report.program, markup=False, highlight=False)
    t = Table(title=f"cost (Figure 6: additions, multiplications, function calls) at {sizes}")
    t.add_column("stage")
    t.add_column("cost", justify="right")
    t.add_column("ratio", justify="right")
    t.add_column("symbolic cost (sizes >= 1)")
    t.add_column("IO cost", justify="right")
    for r in report.rows:
        if not r.available:
            t.add_row(r.name, "[yellow]not available[/yellow]", "", r.reason or "", "")
            continue
        sym = "n/a" if r.symbolic is None else str(r.symbolic)
        if r.reason:
            sym += f"  ({r.reason})"
        t.add_row(r.name, "n/a" if r.cost is None else str(r.cost), _fmt_ratio(r.ratio), sym,
                  str(r.io_cost_at(report.sizes) or "") if r.cost is not None else "")
    con.print(t)
    v = Table(title="verdicts")
    v.add_column("claim")
    v.add_column("verdict")
    v.add_column("how decided")
    v.add_column("detail")
    colour = {"holds": "green", "FAILS": "bold red", "not available": "yellow"}
    for x in report.verdicts:
        how = {"symbolic": "symbolically, all sizes >= 1", "grid": "on a grid of sizes only",
               "counterexample": "counterexample"}.get(x.method, x.method)
        v.add_row(f"{x.name}: {x.claim}", f"[{colour[x.status]}]{x.status}[/]", how, x.detail)
    con.print(v)
    con.print("asymptotic class (leading monomials): " +
              "; ".join(f"{k}: {val}" for k, val in report.asymptotic.items()))
    for name, src in report.kernels.items():
        con.rule(f"kernel: {name}")
        con.print(src, markup=False, highlight=False)
    if report.failed:
        con.print("[bold red]A cost guarantee FAILS: this is a compiler bug (the paper's bound must hold for "
                  "every program).[/bold red] Failing: " + ", ".join(x.name for x in report.failed))
    elif report.unchecked:
        con.print("[yellow]Not checked (a stage is not available): "
                  + ", ".join(x.name for x in report.unchecked) + "[/yellow]")
    else:
        con.print("[green]All verdicts hold.[/green]")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args):
    """Run the benchmark suite (forwards ARGS to benchmarks.runner, e.g. --quick)."""
    runner = _load_bench_runner()
    if runner is None:
        sys.exit(2)
    rc = runner.main(list(args))
    sys.exit(rc if isinstance(rc, int) else 0)


def _load_bench_runner():
    """benchmarks/ sits next to the package in a source checkout and is not
    installed: locate it (no ImportError guard: once found, a failing import
    of the suite is a bug to see, not a reason to say it is missing)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("benchmarks") is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if os.path.isfile(os.path.join(root, "benchmarks", "runner.py")):
            sys.path.insert(0, root)
    if importlib.util.find_spec("benchmarks") is None:
        click.echo("error: the benchmark suite is not available (no benchmarks/ package); "
                   "run from a source checkout with the [bench] extra installed", err=True)
        return None
    return importlib.import_module("benchmarks.runner")


if __name__ == "__main__":  # pragma: no cover
    main()
