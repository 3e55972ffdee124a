"""No import circles in tokchat's packages, and every import points down.

The packages: ``app`` and, below it, ``tokenizer``, ``backends`` and
``templates``, which never import ``app``.  Inside ``app`` the rooms are
ordered (:data:`APP_ROOMS`, bottom first) and a module imports only from its
own room or a lower one, so the order is the one a reader can follow and no
circle can form between rooms.

Every ``import`` and ``from ... import`` in every module counts, those inside
functions too (a lazy import still ties two modules together).  ``from pkg
import name`` counts as an import of the submodule ``pkg.name`` when there is
one, of a C extension (no edge) when it is one, else of ``pkg`` itself.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "tokenizer", "backends", "templates")
#: the packages below the app: they never import it
BELOW_APP = ("tokenizer", "backends", "templates")
#: app's rooms, bottom first: ``app`` itself and ``app.errors`` (errors and shared types), then
#: one subpackage per room; ``app.__main__`` (``python -m app``) is the command line's
APP_ROOMS = ["errors", "conversation", "history", "settings", "models", "tools", "chat", "tui", "cli"]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                found.add(node.module)
                continue
            if ROOT.joinpath(*node.module.split(".")).with_suffix(".c").exists():
                continue  # from a C extension (backends._pick): it imports nothing of ours
            for alias in node.names:
                sub = ROOT.joinpath(*node.module.split("."), alias.name)
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


def app_room(module: str) -> str:
    """The room of a module of ``app`` (see :data:`APP_ROOMS`)."""
    parts = module.split(".")
    if module == "app.__main__":
        return "cli"
    if len(parts) == 1 or parts[1] == "errors":
        return "errors"
    return parts[1]


def test_the_checker_follows_from_package_import_module(tmp_path: Path):
    # ``from app.cli import chat`` imports the module app.cli.chat, not only the package;
    # a name that is not a module (a class, a function) is an import of the module it is in
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from app.cli import chat, main\n    from tokenizer import _accel\n")
    assert _imports(source) == {"app.cli.chat", "app.cli"}


def test_no_import_circles():
    graph = import_graph()
    assert "tokenizer.hf_json" in graph and "backends.engine_client" in graph  # the walk found the packages
    assert "app.cli" in graph and "app.conversation.session" in graph
    found = circles(graph)
    assert found == [], "\n".join(
        " <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)


def test_every_module_of_app_is_in_a_room():
    rooms = {app_room(m) for m in import_graph() if m.split(".")[0] == "app"}
    assert rooms == set(APP_ROOMS)


def test_no_module_of_app_imports_a_higher_room():
    graph = import_graph()
    upward = [f"{m} ({app_room(m)}) -> {d} ({app_room(d)})"
              for m, deps in sorted(graph.items()) if m.split(".")[0] == "app"
              for d in sorted(deps)
              if d.split(".")[0] == "app" and APP_ROOMS.index(app_room(d)) > APP_ROOMS.index(app_room(m))]
    assert upward == [], "\n".join(upward)


def test_the_packages_below_the_app_never_import_it():
    graph = import_graph()
    into_app = [f"{m} -> {d}" for m, deps in sorted(graph.items()) if m.split(".")[0] in BELOW_APP
                for d in sorted(deps) if d.split(".")[0] == "app"]
    assert into_app == [], "\n".join(into_app)
