"""The conversation is the only writer of its state (issue 48, finding 2).

:class:`app.conversation.conversation.Conversation` keeps what the engine holds (its prompt builder, the
reply the cache ends with) and where the prompt starts (its window) in private fields; a turn, fitting,
compaction and the tool loop change them through its named methods (``commit_reply``, ``move_window``,
``add_summary``, ``replace_reply`` ...).  Read from the source, so a new module that reaches into them fails
here before it can leave the engine's cache and the path disagreeing.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OWNER = ROOT / "app" / "conversation" / "conversation.py"


def private_fields() -> set[str]:
    """The private attributes ``Conversation`` sets on itself (``self._window = ...``)."""
    tree = ast.parse(OWNER.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Conversation")
    names = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self"
                        and part.attr.startswith("_")):
                    names.add(part.attr)
    return names


def reaches_into(path: Path, fields: set[str]) -> list[str]:
    """``file:line attr`` for every use of one of ``fields`` as an attribute in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in fields]


def test_the_private_fields_are_found():
    assert {"_window", "_builder", "_tail"} <= private_fields()


def test_no_other_module_of_the_app_reads_or_writes_the_conversations_private_fields():
    fields = private_fields()
    offenders = [hit for path in sorted((ROOT / "app").rglob("*.py")) if path != OWNER
                 for hit in reaches_into(path, fields)]
    assert offenders == [], "use Conversation's methods (commit_reply, move_window, ...): " + ", ".join(offenders)


def test_the_check_sees_a_write_from_another_module(tmp_path):
    """The scan itself: fit.py as it was (``c._window = plan.start``) is caught."""
    old = tmp_path / "fit.py"
    old.write_text("def fit(c, plan):\n    c._window = plan.start\n", encoding="utf-8")
    hits = [node.attr for node in ast.walk(ast.parse(old.read_text())) if isinstance(node, ast.Attribute)
            and node.attr in private_fields()]
    assert hits == ["_window"]
