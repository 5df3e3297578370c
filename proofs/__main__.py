"""``python -m proofs [--quick] [--only N ...] [--json] [--write-readme]``.

Runs every obligation and prints the rule table with verdicts.  Exit status 1
when an obligation does not pass: a FAIL, and also a rule not implemented, a
stage not available or a rule no instance exercised (nothing checked is not
a pass), else 0.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m proofs", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the fast CI subset (fewer instances, smaller corpus)")
    ap.add_argument("--only", nargs="*", help="rule numbers to run (e.g. 5.21 'Theorem 6.1')")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--write-readme", action="store_true", help="regenerate the rule table in proofs/README.md")
    args = ap.parse_args(argv)

    from . import runner

    if args.write_readme:
        changed = runner.write_readme()
        print("proofs/README.md table " + ("updated" if changed else "already up to date"))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console(width=160)
    # a progress bar and one line per obligation on stderr, so a long run shows where it is
    with runner.ConsoleProgress(len(runner.selected(args.only))) as progress:
        results = runner.run(quick=args.quick, only=args.only, progress=progress)
    rows = {r[0].split(",")[0]: r for r in runner.table_rows()}
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=2))
    else:
        t = Table(title="proof obligations" + (" (--quick)" if args.quick else ""))
        for col in ("rule", "fig", "implementing function", "verdict", "instances", "cost check", "detail"):
            t.add_column(col, overflow="fold")
        colour = {"pass": "green", "FAIL": "bold red"}
        for r in results:
            fn = rows.get(r.number, ("", "", "?"))[2]
            c = colour.get(r.verdict, "yellow")
            t.add_row(r.number, rows.get(r.number, ("", "?"))[1], fn, f"[{c}]{r.verdict}[/]",
                      str(r.instances), r.cost, r.detail)
        con.print(t)
    counts = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("summary: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
