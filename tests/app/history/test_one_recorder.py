"""One recorder, typed values (issue 48, finding 3), read from the source.

Headless runs and the TUI save a turn through :class:`app.history.recorder.HistoryRecorder` with the
conversation's own values (``ChatMessage``, ``ReplyEvent``): no stand-in objects (``SimpleNamespace``) that
the history then has to probe with ``getattr``; the recorder returns row ids and never writes onto the
messages it is given (the conversation keeps them: ``Conversation.mark_stored``); and whether a stored
conversation is of another vocabulary is decided in one place (``model_identity.vocabulary_switch``).
What the recorder stores is tested through real runs elsewhere (tests/app/history, tests/app/tui/test_history*.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: the modules that save or show a conversation's messages
MESSAGE_READERS = ("app/history/recorder.py", "app/history/types.py", "app/tui/history.py", "app/tui/transcript.py",
                   "app/tui/widgets/chat_view.py", "app/tools/loop.py")


def tree(path: str | Path) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"))


def calls_to(module: ast.Module, *names: str) -> list[int]:
    return [node.lineno for node in ast.walk(module) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id in names]


def test_no_stand_in_messages_anywhere_in_the_app():
    hits = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in sorted((ROOT / "app").rglob("*.py"))
            for node in ast.walk(tree(path))
            if isinstance(node, (ast.Name, ast.Attribute, ast.alias))
            and "SimpleNamespace" in (getattr(node, "id", "") or getattr(node, "attr", "")
                                      or getattr(node, "name", ""))]
    assert hits == []


def test_the_modules_that_save_and_show_messages_read_their_fields_not_probe_them():
    hits = {path: calls_to(tree(path), "getattr", "hasattr") for path in MESSAGE_READERS}
    assert {path: lines for path, lines in hits.items() if lines} == {}


def test_the_recorder_never_writes_onto_a_message():
    writes = [node.lineno for node in ast.walk(tree("app/history/recorder.py"))
              if isinstance(node, (ast.Assign, ast.AugAssign)) for target in
              (node.targets if isinstance(node, ast.Assign) else [node.target])
              for part in ast.walk(target) if isinstance(part, ast.Attribute) and part.attr == "store_id"]
    assert writes == []


def test_the_vocabulary_switch_rule_is_written_once():
    """``stored_fingerprint`` (the comparison with a stored conversation) is called by the rule's own module
    only: headless ``--resume`` and the TUI's sidebar both ask ``vocabulary_switch``."""
    callers = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "app").rglob("*.py")
                     if calls_to(tree(path), "stored_fingerprint"))
    assert callers == ["app/history/model_identity.py"]
    for front_end in ("app/chat/headless.py", "app/tui/history.py"):
        assert calls_to(tree(front_end), "vocabulary_switch"), front_end
