"""Issue 26, items 2-4: config files that are not UTF-8 or not files, numbers that are not
finite, a repeat penalty no engine accepts, and exports that must always be JSON.

The commands run as the user runs them: a real ``python -m app`` process with its own
config and data folders under ``tmp_path``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.models.preset_match import load_settings
from app.settings.config import ConfigError, check_value
from app.history.export import conversation_from_json, to_json
from app.history.store import ChatStore

ROOT = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TOKCHAT_CONFIG_DIR=str(tmp_path / "config"), TOKCHAT_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return env


def _tokchat(tmp_path: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], input=stdin or b"", capture_output=True,
                          timeout=300, cwd=tmp_path, env=_env(tmp_path))


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", [["config", "show"], ["models"], ["tools"], ["--prompt", "Hi"]])
def test_a_config_that_is_not_utf8_is_one_line_for_every_command(tmp_path, command):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_bytes(b"\xff\xfe garbage")
    line = _one_line_error(_tokchat(tmp_path, *command))
    assert "config.toml: not UTF-8 text (byte 0xff at offset 0)" in line, line


def test_a_config_path_that_is_a_directory_is_named_as_one(tmp_path):
    (tmp_path / "config" / "config.toml").mkdir(parents=True)
    line = _one_line_error(_tokchat(tmp_path, "config", "show"))
    assert "config.toml is a directory, not a config file" in line
    path = _tokchat(tmp_path, "config", "path")
    assert path.returncode == 0
    assert "a directory, not a config file" in path.stderr.decode()
    assert "does not exist" not in path.stderr.decode()


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN"])
def test_flags_refuse_numbers_that_are_not_finite(tmp_path, text):
    line = _one_line_error(_tokchat(tmp_path, "config", "show", f"--temperature={text}"))
    assert f"--temperature: sampling.temperature must be a finite number, not {float(text)!r}" in line


@pytest.mark.parametrize("key", ["temperature", "top_p", "min_p", "repeat_penalty"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_config_files_refuse_numbers_that_are_not_finite(tmp_path, monkeypatch, key, value):
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path))
    (tmp_path / "config.toml").write_text(f"[sampling]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=f"sampling.{key} must be a finite number"):
        load_settings(use_preset=False)


def test_server_timeouts_refuse_infinity_too():
    with pytest.raises(ConfigError, match="server.idle_timeout must be a finite number"):
        check_value("config.toml", "server.idle_timeout", float("inf"))


@pytest.mark.parametrize("value, message", [
    ("0", "sampling.repeat_penalty must be more than 0, not 0.0"),
    ("-1", "sampling.repeat_penalty must be more than 0, not -1.0"),
])
def test_a_repeat_penalty_of_zero_is_refused(tmp_path, value, message):
    line = _one_line_error(_tokchat(tmp_path, "config", "show", f"--repeat-penalty={value}"))
    assert message in line


def test_probability_settings_stay_within_zero_and_one():
    with pytest.raises(ConfigError, match="sampling.top_p must be at most 1"):
        check_value("--top-p", "sampling.top_p", 1.5)
    with pytest.raises(ConfigError, match="sampling.min_p must be at most 1"):
        check_value("--min-p", "sampling.min_p", 2.0)
    assert check_value("--repeat-penalty", "sampling.repeat_penalty", 0.5) == 0.5
    assert check_value("--top-p", "sampling.top_p", 1) == 1.0


def test_an_export_is_valid_json_even_with_non_finite_numbers_stored(tmp_path):
    """A history written before the fix (``temperature = NaN``, an infinite speed) exports as JSON."""
    from app.conversation.session import ChatMessage

    db = tmp_path / "history.sqlite3"
    with ChatStore(db) as store:
        conv = store.new_conversation("m.gguf", "chatml", sampling={"temperature": float("nan"), "top_p": 0.9})
        store.add_message(conv, ChatMessage("user", "Hi"))
        store.add_message(conv, ChatMessage("assistant", "Hello"))
        stored = store.load(conv)
    stored.messages[-1].tokens_per_s = float("inf")
    text = to_json(stored)
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the export"))
    assert data["sampling"] == {"temperature": None, "top_p": 0.9}
    assert data["messages"][-1]["tokens_per_s"] is None
    # and an export with NaN (from another tool) is refused at import in one line
    bad = text.replace('"top_p": 0.9', '"top_p": NaN')
    with pytest.raises(Exception, match=r"not JSON \(NaN is not a JSON number\)"):
        conversation_from_json(bad, source="bad.json")
