"""Layering of the package (issue 14, item 3 "Layering"; DESIGN.md "Pipeline").

Every module's imports, read from its source with ``ast`` (including imports
inside functions, which execute just as surely, only later), must point
downward or sideways in this order, and the import graph must have no cycle:

======  ========  =====================================================
layer   name      modules
======  ========  =====================================================
0       ir        errors, deep, decide, ir (the package ``tensorlang.ir``:
                  nodes, indices, types, expressions, scope), printer
1       core      typecheck, functions, sharing, evaluator, conditionals,
                  loops, loop_schedule,
                  api, the package ``tensorlang`` itself; the affine
                  layer (the only islpy users below the cost model):
                  isl_bridge, bounds
2       passes    tensorlang.passes.* (passes/)
3       cost,     cost_preds, cost_relations, cost_fig6, cost_fig17,
                  cost_symbolic, costmodel (the facade over them);
        backend   tensorlang.backend.*
4       driver    driver (the one stage list), loop_autodiff, loop_values,
                  loop_cost
5       top       runtime, audit, cli, dask, interop; autodiff and
                  derived_program (its callable over a derived program)
6       outside   proofs.*, benchmarks.* (not installed; run from a
                  source checkout)
======  ========  =====================================================

An import of a module in a higher layer is an upward import.  Violations not
yet fixed are listed in KNOWN_UPWARD / KNOWN_CYCLES below, each with its
reason; the test fails on any new one, and also on a KNOWN entry that no
longer occurs (so the lists only shrink).
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = ("tensorlang", "passes", "proofs", "benchmarks")

LAYERS = {
    "tensorlang.errors": 0, "tensorlang.deep": 0, "tensorlang.decide": 0,
    "tensorlang.ir": 0, "tensorlang.printer": 0,
    "tensorlang.typecheck": 1, "tensorlang.functions": 1, "tensorlang.sharing": 1,
    "tensorlang.evaluator": 1, "tensorlang.conditionals": 1, "tensorlang.loops": 1, "tensorlang.loop_schedule": 1, "tensorlang.api": 1, "tensorlang.sparse": 1, "tensorlang.relation_data": 1,
    "tensorlang": 1, "tensorlang.isl_bridge": 1, "tensorlang.bounds": 1,
    "tensorlang.passes": 2,
    "tensorlang.costmodel": 3, "tensorlang.cost_fig17": 3, "tensorlang.cost_relations": 3,
    "tensorlang.cost_symbolic": 3, "tensorlang.cost_preds": 3, "tensorlang.cost_fig6": 3,
    "tensorlang.backend": 3,
    "tensorlang.driver": 4, "tensorlang.loop_autodiff": 4, "tensorlang.loop_values": 4, "tensorlang.loop_cost": 4,
    "tensorlang.runtime": 5,
    # grad/value_and_grad/vjp/jvp are entry points beside runtime: they run the
    # driver's routes and return callables built by runtime.make_callable
    "tensorlang.autodiff": 5,
    # the callable autodiff wraps a derived program in; it builds it with runtime.make_callable
    "tensorlang.derived_program": 5,
    "tensorlang.audit": 5, "tensorlang.loop_audit": 5, "tensorlang.cli": 5,
    "tensorlang.dask": 5, "tensorlang.interop": 5, "tensorlang.interop_sparse": 5, "tensorlang.interop_scipy": 5,
    "proofs": 6, "benchmarks": 6,
}

# packages whose every submodule shares the package's layer; any other
# module must be listed by its own name
PACKAGES = ("tensorlang.ir", "tensorlang.passes", "tensorlang.backend", "proofs", "benchmarks")

# (importer, imported): reason.  Keep this list as short as possible.
KNOWN_UPWARD = {
    # (none)
}

# frozenset of the modules of one strongly connected component: reason.
KNOWN_CYCLES: dict = {
    # (none: the core's cycle {functions, ir, printer, typecheck} went when the
    # IR was split by sort; the printer imports the sort modules and the
    # package binds the reprs; iverson lives in typecheck)
}


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    if rel.endswith(".__init__") or rel == "__init__":
        rel = rel[: -len(".__init__")]
    if rel == "passes" or rel.startswith("passes."):
        rel = "tensorlang." + rel  # setuptools package-dir: passes/ is tensorlang.passes
    return rel


def modules() -> dict:
    out = {}
    for top in SOURCES:
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    out[_module_name(path)] = path
    return out


def _targets(mods: dict, current: str, is_pkg: bool, node) -> list:
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            parts = current.split(".") if is_pkg else current.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        else:
            base = node.module
        # ``from pkg import mod`` imports the submodule pkg.mod
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = []
    for m in names:
        if m == "passes" or m.startswith("passes."):
            m = "tensorlang." + m
        while m and m not in mods:  # a name inside a module: the module
            m = m.rpartition(".")[0]
        if m and m != current:
            out.append(m)
    return out


def import_graph() -> dict:
    """``{module: {imported module: first line}}`` over our own modules."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        edges = graph.setdefault(name, {})
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mods, name, path.endswith("__init__.py"), node):
                    edges.setdefault(t, node.lineno)
    return graph


def layer(module: str) -> int:
    if module in LAYERS:
        return LAYERS[module]
    for p in PACKAGES:
        if module.startswith(p + "."):
            return LAYERS[p]
    raise KeyError(f"{module} has no layer")


def upward_imports(graph: dict) -> dict:
    return {(a, b): line for a, es in graph.items() for b, line in es.items() if layer(b) > layer(a)}


def cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    missing = [m for m in modules() if m not in LAYERS and not any(m.startswith(p + ".") for p in PACKAGES)]
    assert not missing, f"modules without a layer (add them to LAYERS and the docstring): {missing}"


def test_no_new_upward_import():
    found = upward_imports(import_graph())
    new = {k: v for k, v in found.items() if k not in KNOWN_UPWARD}
    assert not new, "upward imports (importer -> imported at line):\n" + "\n".join(
        f"  {a} -> {b} (line {line})" for (a, b), line in sorted(new.items()))
    gone = set(KNOWN_UPWARD) - set(found)
    assert not gone, f"fixed, remove from KNOWN_UPWARD: {sorted(gone)}"


def test_no_new_import_cycle():
    found = cycles(import_graph())
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(f"  {sorted(c)}" for c in new)
    gone = set(KNOWN_CYCLES) - set(found)
    assert not gone, f"fixed (or changed), update KNOWN_CYCLES: {[sorted(c) for c in gone]}"


def test_the_checker_sees_imports_inside_functions():
    # the checker itself: a lazy upward import is found, and a cycle through it
    src = {"tensorlang.ir": "def f():\n    from .autodiff import adjoint\n",
           "tensorlang.autodiff": "from .ir import Expr\n"}
    mods = {m: m for m in src}
    graph = {}
    for m, text in src.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mods, m, False, node):
                    graph.setdefault(m, {})[t] = node.lineno
    assert ("tensorlang.ir", "tensorlang.autodiff") in upward_imports(graph)
    assert cycles(graph) == [frozenset(src)]


def test_no_import_error_guard_around_our_modules():
    """``except ImportError`` may guard only optional third-party packages."""
    ours = ("tensorlang", "passes", "proofs", "benchmarks", "tests")
    bad = []
    for name, path in modules().items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            catches = any(
                h.type is not None and "ImportError" in ast.dump(h.type) or h.type is None for h in node.handlers)
            if not catches:
                continue
            for sub in node.body:
                for imp in ast.walk(sub):
                    if isinstance(imp, ast.ImportFrom) and (imp.level or (imp.module or "").split(".")[0] in ours):
                        bad.append(f"{name}:{imp.lineno}")
                    elif isinstance(imp, ast.Import) and any(a.name.split(".")[0] in ours for a in imp.names):
                        bad.append(f"{name}:{imp.lineno}")
    assert not bad, f"except ImportError around our own modules: {bad}"


def _imports_of(tree) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_islpy_is_imported_by_the_affine_edge_only():
    """Issue 14 item 3: the affine layer is the one islpy user; the backend,
    the bounds check and the symbolic cost model take ``isl`` from
    ``tensorlang.isl_bridge`` (imports inside functions count)."""
    users = []
    for name, path in modules().items():
        if not name.startswith(("tensorlang", "passes")):
            continue
        with open(path, encoding="utf-8") as fh:
            if "islpy" in _imports_of(ast.parse(fh.read(), path)):
                users.append(name)
    assert users == ["tensorlang.isl_bridge"], users
