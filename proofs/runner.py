"""Running the obligations and keeping proofs/README.md's rule table in sync.

``run(quick)`` runs every obligation (or the ``--quick`` subset: fewer
instances and a smaller corpus) and returns one :class:`Result` per rule and
theorem, in the paper's order.  ``table_rows()`` is the rule -> figure ->
implementing function -> test -> obligation table that README.md embeds
between markers; ``python -m proofs --write-readme`` regenerates it.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
import sys
import time

from . import cost_rules, derivatives, normal_forms, simplify, theorems  # noqa: F401  (they register obligations)
from .framework import OBLIGATIONS, load_rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "proofs", "README.md")
BEGIN, END = "<!-- rule-table:begin -->", "<!-- rule-table:end -->"

KIND_MODULE = {
    "rewrite": "proofs/normal_forms.py",
    "ssa": "proofs/normal_forms.py",
    "derivative": "proofs/derivatives.py",
    "adjoint": "proofs/derivatives.py",
    "cost": "proofs/cost_rules.py",
    "simplify": "proofs/simplify.py",
    "theorem": "proofs/theorems.py",
}

COST_FUNCTIONS = {6: "tensorlang.costmodel.cost", 17: "tensorlang.costmodel.inner_product_cost"}
THEOREM_FUNCTIONS = {
    "Theorem 6.1": "tensorlang.audit.audit",
    "Theorem 6.55": "tensorlang.audit.audit",
    "Section 5": "tensorlang.audit.normal_form_passes",
}


def _key(number: str):
    nums = re.findall(r"\d+", number)
    theorem = 1 if not number[0].isdigit() else 0
    return (theorem, [int(x) for x in nums])


def ordered():
    return sorted(OBLIGATIONS.values(), key=lambda ob: _key(ob.number))


def selected(only: list | None = None) -> list:
    """The obligations ``run(only=...)`` runs, in order."""
    load_rules()
    return [ob for ob in ordered() if not only or ob.number in only]


def run(quick: bool = False, only: list | None = None, progress=None) -> list:
    """Run the obligations; ``progress(result)`` after each one, and ``progress.start(obligation)``
    before it when the reporter has that method (``ConsoleProgress`` does)."""
    out = []
    for ob in selected(only):
        if hasattr(progress, "start"):
            progress.start(ob)
        t0 = time.time()
        r = ob.run(quick)
        r.detail = (r.detail + f" [{time.time() - t0:.1f}s]").strip()
        out.append(r)
        if progress:
            progress(r)
    return out


class ConsoleProgress:
    """Progress of a ``python -m proofs`` run: a rich bar (obligations done, the one running, elapsed
    time) with one line per finished obligation above it on a terminal; plain lines otherwise."""

    def __init__(self, total: int, stream=None):
        from rich.console import Console

        self.stream = stream or sys.stderr
        console = Console(file=self.stream)
        self.bar = None
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("[bold]proofs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.description}"), console=console)
            self.task = self.bar.add_task("", total=total)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def start(self, ob) -> None:
        if self.bar:
            self.bar.update(self.task, description=f"{ob.number}: {getattr(ob, 'title', '')}"[:70])

    def __call__(self, r) -> None:
        line = f"  {r.number:<13} {r.verdict:<22} {r.detail[:100]}"
        if self.bar:
            self.bar.console.print(line, markup=False, highlight=False)
            self.bar.update(self.task, advance=1)
        else:
            print(line, file=self.stream, flush=True)


def implementing_function(number: str, ob) -> str:
    rules = load_rules()
    for n in (number, *ob.aliases):
        r = rules.get(n)
        if r is not None:
            fn = getattr(r.fn, "__wrapped__", r.fn)
            return f"{fn.__module__}.{fn.__qualname__}"
    if ob.kind == "cost":
        return COST_FUNCTIONS[ob.figure]
    if ob.kind == "theorem":
        return THEOREM_FUNCTIONS[ob.number]
    return "—"


def tests_naming(number: str, fn_name: str) -> list:
    """Test files that mention the rule's number (quoted) or its function's name."""
    out = []
    short = fn_name.rsplit(".", 1)[-1] if fn_name != "—" else None
    pats = [f'"{number}"', f"'{number}'", f"rule {number}", f"Rule {number}"]
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True)):
        if os.path.basename(path) in ("test_proofs.py",):
            continue
        text = open(path, encoding="utf-8").read()
        if any(p in text for p in pats) or (short and re.search(rf"\b{re.escape(short)}\b", text)):
            out.append(os.path.relpath(path, ROOT))
    return out


def table_rows() -> list:
    rows = []
    for ob in ordered():
        fn = implementing_function(ob.number, ob)
        if ob.kind == "theorem":
            tests = ["tests/cost/test_audit.py", "tests/cost/test_proofs.py"]
        elif ob.kind == "cost":  # the function names (cost, ...) are too common to grep for
            tests = tests_naming(ob.number, "—") or [t for t in ["tests/cost/test_cost.py"]
                                                      if os.path.exists(os.path.join(ROOT, t))]
        else:
            tests = tests_naming(ob.number, fn)
        number = ob.number + ("".join(f", {a}" for a in ob.aliases if a[0].isdigit() and "-" not in a))
        rows.append((number, str(ob.figure), fn, ", ".join(tests) or "—",
                     f"{KIND_MODULE[ob.kind]} ({ob.kind})"))
    return rows


def table_markdown() -> str:
    lines = ["| rule | figure | implementing function | test | obligation |", "|---|---|---|---|---|"]
    for r in table_rows():
        lines.append("| " + " | ".join(f"`{c}`" if i == 2 and c != "—" else c for i, c in enumerate(r)) + " |")
    return "\n".join(lines)


def write_readme() -> bool:
    text = open(README, encoding="utf-8").read()
    new = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), BEGIN + "\n" + table_markdown() + "\n" + END,
                 text, flags=re.S)
    if new != text:
        with open(README, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


def readme_rows() -> list:
    """The rows of the table currently in README.md (for the meta-test)."""
    text = open(README, encoding="utf-8").read()
    m = re.search(re.escape(BEGIN) + r"(.*?)" + re.escape(END), text, flags=re.S)
    rows = []
    for line in (m.group(1) if m else "").strip().splitlines()[2:]:
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    return rows


def resolve(dotted: str):
    """Import ``a.b.c.fn`` (or a qualname below a module); raise if it does not exist."""
    parts = dotted.split(".")
    for k in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for p in parts[k:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)

