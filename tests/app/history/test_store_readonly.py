"""Issue 26, item 8: reading the history needs no write access.

A real history (written by :class:`app.history.store.ChatStore`, WAL and all), its file and
directory made read-only, then a real ``tokchat export`` process.  Root ignores file
modes, so when the tests run as root the child drops the capabilities that let it
(``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``, ``CAP_FOWNER``) from its bounding set
before it starts: it then meets the modes as any user would.
"""
from __future__ import annotations

import ctypes
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.conversation.session import ChatMessage
from app.history.store import ChatStore, StoreError

ROOT = Path(__file__).resolve().parents[3]
_PR_CAPBSET_DROP = 24
_CAPS = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def _as_a_plain_user() -> None:
    """preexec_fn: a root child loses the right to ignore file modes (see the module docstring)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _CAPS:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def readonly_history(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with ChatStore(data / "history.sqlite3") as store:
        conv = store.new_conversation("smollm2.gguf", "chatml", sampling={"temperature": 0.0})
        store.add_message(conv, ChatMessage("user", "What is 2+2?"))
        store.add_message(conv, ChatMessage("assistant", "4"))
    (data / "history.sqlite3").chmod(0o444)
    data.chmod(0o555)
    yield data
    data.chmod(0o755)


def _export(tmp_path: Path, data: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOKCHAT_DATA_DIR=str(data), TOKCHAT_CONFIG_DIR=str(tmp_path / "config"),
               PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "app", "export", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, preexec_fn=_as_a_plain_user)


def test_the_child_really_cannot_write_there(tmp_path, readonly_history):
    """The premise: without it the tests below would pass for the wrong reason."""
    probe = subprocess.run([sys.executable, "-c", f"open({str(readonly_history / 'x')!r}, 'w')"],
                           capture_output=True, text=True, preexec_fn=_as_a_plain_user)
    assert probe.returncode != 0 and "Permission denied" in probe.stderr


def test_export_and_list_work_on_a_read_only_history(tmp_path, readonly_history):
    result = _export(tmp_path, readonly_history, "--last", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(m["role"], m["content"]) for m in data["messages"]] == [("user", "What is 2+2?"), ("assistant", "4")]
    listed = _export(tmp_path, readonly_history, "--list")
    assert listed.returncode == 0, listed.stderr
    assert "What is 2+2?" in listed.stdout
    md = _export(tmp_path, readonly_history, "--last")
    assert md.returncode == 0 and "## Assistant" in md.stdout
    # nothing was created beside it
    assert sorted(p.name for p in readonly_history.iterdir()) == ["history.sqlite3"]
    assert stat.S_IMODE((readonly_history / "history.sqlite3").stat().st_mode) == 0o444


def test_a_read_only_store_still_refuses_to_write(tmp_path):
    path = tmp_path / "history.sqlite3"
    with ChatStore(path) as store:
        conv = store.new_conversation("m.gguf")
    with ChatStore(path, readonly=True) as store:
        assert store.list_conversations()[0].id == conv
        with pytest.raises(StoreError, match="read-only"):
            store.rename(conv, "new title")


def test_no_history_yet_is_said_in_one_line(tmp_path):
    data = tmp_path / "data"
    listed = _export(tmp_path, data, "--list")
    assert listed.returncode == 0 and "no conversations" in listed.stderr
    last = _export(tmp_path, data, "--last")
    assert last.returncode == 2 and last.stderr.strip() == "tokchat: the history is empty: nothing to export"
    assert not data.exists()  # reading created nothing
