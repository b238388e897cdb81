"""No import cycle among traceparse's own modules.

Every ``import``/``from ... import`` statement of every project module counts, wherever it
stands: at the top, inside a function (a lazy import still ties the two modules together)
or under ``if TYPE_CHECKING:``. The graph is read from the source with :mod:`ast`, so the
test does not depend on what happens to be imported at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: checkout folder -> installed package name (pyproject's package-dir mapping)
PACKAGES = {"traceparse": "traceparse", "analyses": "traceparse.analyses",
            "roofline": "traceparse.roofline", "reports": "traceparse.reports"}


def project_modules() -> dict[str, Path]:
    """Installed module name -> source file, for every module of the four packages."""
    mods: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if rel.parts[0] in PACKAGES or "__pycache__" in rel.parts:
                continue  # the checkout symlinks traceparse/{analyses,...} are seen once
            parts = [package, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """The project modules that ``module`` (source ``path``) names in an import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_pkg]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(module)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_sees_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_reader_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from traceparse.x import Y\n"
                   "def f():\n    from traceparse import z as zz\n    import traceparse.w\n"
                   "from traceparse.reports import q\n")
    known = {"traceparse", "traceparse.x", "traceparse.z", "traceparse.w",
             "traceparse.reports", "traceparse.reports.q", "traceparse.m"}
    assert imports_of(src, "traceparse.m", known) == {
        "traceparse.x", "traceparse.z", "traceparse.w", "traceparse.reports.q"}


def test_project_has_no_import_cycle() -> None:
    mods = project_modules()
    assert {"traceparse.cli.main", "traceparse.analyses.attribution",
            "traceparse.reports.payload", "traceparse.samplegen"} <= set(mods)
    known = set(mods)
    graph = {m: imports_of(p, m, known) for m, p in mods.items()}
    assert "traceparse.reports.options" in graph["traceparse.reports.sections"]
    found = cycles(graph)
    if found:
        pytest.fail("import cycles: " + "; ".join(" <-> ".join(c) for c in found))
