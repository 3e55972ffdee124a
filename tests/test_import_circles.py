"""No import circles in the packages below the app: tokenizer, backends, templates.

Every ``import`` and ``from ... import`` in every module counts, those inside
functions too (a lazy import still ties two modules together).  ``from pkg
import name`` counts as an import of the submodule ``pkg.name`` when there is
one, of a C extension (no edge) when it is one, else of the package itself.
``app/`` is not checked yet: its circles are issue 23's work.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tokenizer", "backends", "templates")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module not in PACKAGES:
                found.add(node.module)
                continue
            for alias in node.names:
                sub = ROOT / node.module / alias.name
                if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                    found.add(f"{node.module}.{alias.name}")
                elif not sub.with_suffix(".c").exists():  # a C extension imports nothing of ours
                    found.add(node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of PACKAGES it imports."""
    raw: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            raw[name] = {d for d in _imports(path) if d.split(".")[0] in PACKAGES}

    def known(name: str) -> str:
        while name and name not in raw:
            name = name.rpartition(".")[0]
        return name

    return {m: {known(d) for d in deps if known(d) and known(d) != m} for m, deps in raw.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles_below_the_app():
    graph = import_graph()
    assert "tokenizer.hf_json" in graph and "backends.hosted" in graph  # the walk found the packages
    found = circles(graph)
    assert found == [], "\n".join(
        " <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)
