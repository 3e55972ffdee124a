"""``tokchat export --import`` of a hostile file: one line, exit 2, nothing stored (issue 44, C7).

Before: 200,000 nested arrays ended in a RecursionError traceback, and ``created_at: 1e300`` was
stored, after which ``export N`` failed with OverflowError in both formats.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.conversation.session import ChatMessage
from app.history.export import ImportFormatError, conversation_from_json, to_json, to_markdown
from app.history.store import ChatStore

ROOT = Path(__file__).resolve().parents[3]


def _tokchat(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOKCHAT_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def export(tmp_path) -> dict:
    """A real export of a stored two-message conversation, as parsed JSON."""
    with ChatStore(tmp_path / "source.sqlite3") as store:
        conv = store.new_conversation("/m/smollm2.gguf", "model", "", {"temperature": 0.0}, model_name="SmolLM2")
        store.add_message(conv, ChatMessage("user", "Hi"))
        reply = store.begin_reply(conv)
        store.finish_message(reply, ChatMessage("assistant", "Hello.", finish_reason="stop"))
        return json.loads(to_json(store.load(conv)))


def _stored(data_dir: Path) -> list:
    db = data_dir / "history.sqlite3"
    if not db.exists():
        return []
    with ChatStore(db) as store:
        return store.list_conversations()


def _hostile(export: dict, case: str) -> str:
    data = json.loads(json.dumps(export))
    if case == "nested":
        return "[" * 200_000 + "]" * 200_000
    if case == "created_at 1e300":
        data["created_at"] = 1e300
    elif case == "message finished_at 1e400":  # Python's json reads it as inf
        data["messages"][1]["finished_at"] = 12345.678
        return json.dumps(data).replace("12345.678", "1e400")
    elif case == "count past SQLite":
        data["messages"][1]["completion_tokens"] = 2**70
    elif case == "stats parts":
        data["messages"][1]["stats"] = {"parts": [1, 2]}
    elif case == "role":
        data["messages"][0]["role"] = "user\n\n## Assistant"
    elif case == "deep settings":
        deep: dict = {}
        for _ in range(500):
            deep = {"x": deep}
        data["settings"] = deep
    return json.dumps(data)


@pytest.mark.parametrize("case, says", [
    ("nested", "nested more than 64 levels deep"),
    ("created_at 1e300", "'created_at' is 1e+300, not a time between 1970 and 3000"),
    ("message finished_at 1e400", "'finished_at' is inf, not a time between 1970 and 3000"),
    ("count past SQLite", "'completion_tokens' is 1180591620717411303424, not an integer from 0"),
    ("stats parts", "'stats': 'parts'[0] must be an object"),
    ("role", "'role' is 'user\\n\\n## Assistant', not one of system, user, assistant, tool"),
    ("deep settings", "nested more than 64 levels deep"),
])
def test_a_hostile_import_is_one_line_and_stores_nothing(tmp_path, export, case, says):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    hostile = tmp_path / "hostile.json"
    hostile.write_text(_hostile(export, case), encoding="utf-8")
    done = _tokchat("export", "--import", str(hostile), data_dir=data_dir)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tokchat: {hostile}: ") and says in lines[0], lines
    assert _stored(data_dir) == []


def test_after_a_refused_import_a_good_one_still_exports(tmp_path, export):
    """The file that was refused left nothing behind; a valid one is stored and exports in both formats."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(json.dumps({**export, "updated_at": 1e300}), encoding="utf-8")
    good.write_text(json.dumps(export), encoding="utf-8")
    assert _tokchat("export", "--import", str(bad), data_dir=data_dir).returncode == 2
    done = _tokchat("export", "--import", str(good), data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    [row] = _stored(data_dir)
    for fmt in ("md", "json"):
        shown = _tokchat("export", str(row.id), "--format", fmt, data_dir=data_dir)
        assert shown.returncode == 0 and "Hello." in shown.stdout, shown.stderr


def test_every_accepted_import_can_be_exported_again(export):
    """What passes the check formats in both exports (the import's promise to ``export N``)."""
    conv = conversation_from_json(json.dumps({**export, "created_at": 32503679999.0}))
    assert "Hello." in to_markdown(conv) and "Hello." in to_json(conv)
    with pytest.raises(ImportFormatError, match="'created_at' is -1"):
        conversation_from_json(json.dumps({**export, "created_at": -1}))
