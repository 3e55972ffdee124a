"""Escape sequences stored in the history reach a terminal inert (issue 34, item 10).

The issue's own steps with real processes: a prompt holding an OSC window title, a bell and a
clear-screen is answered by SmolLM2 and stored; then ``tokchat export --list`` and
``export --format md|json`` write to a real pseudo-terminal (``pty.openpty``), as a user's
terminal would receive them.  A file written with ``-o`` and a pipe keep the exact text.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import pty_run
from support.process_env import child_env

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J hello \x9b2J"
#: what a terminal acts on: ESC, BEL and the one-byte CSI
RAW = pty_run.RAW_CONTROLS

pytestmark = pytest.mark.slow




def on_terminal(env: dict[str, str], *args: str) -> str:
    """Run tokchat with its stdout on a pseudo-terminal (:func:`support.pty_run.on_terminal`); what the terminal
    received, decoded."""
    run = pty_run.on_terminal(env, *args, stderr_too=False)
    assert run.returncode == 0, run.stderr
    return run.screen


def piped(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          input=stdin, stdin=subprocess.DEVNULL if stdin is None else None, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def test_stored_escape_sequences_reach_a_terminal_inert(smollm_path, tmp_path):
    env = child_env(tmp_path)
    piped(env, "-m", str(smollm_path), "--max-tokens", "1", stdin=HOSTILE)

    listing = on_terminal(env, "export", "--list")
    assert not any(c in listing for c in RAW), repr(listing)
    assert "\\x1b]0;PWNED\\x07" in listing  # shown, as text

    markdown = on_terminal(env, "export", "1", "--format", "md")
    assert not any(c in markdown for c in RAW), repr(markdown)
    assert "\\x1b[2J hello \\x9b2J" in markdown

    shown_json = on_terminal(env, "export", "1", "--format", "json")
    assert not any(c in shown_json for c in RAW), repr(shown_json)
    # the same JSON value: only its escapes differ
    assert json.loads(shown_json)["messages"][0]["content"] == HOSTILE

    # a pipe and a file keep the exact text: they are data, not a screen
    assert HOSTILE in piped(env, "export", "1", "--format", "md").stdout
    out = tmp_path / "conversation.md"
    piped(env, "export", "1", "--format", "md", "-o", str(out))
    assert HOSTILE in out.read_text(encoding="utf-8")


def test_config_show_on_a_terminal_keeps_a_hostile_value_inert(tmp_path):
    env = child_env(tmp_path)
    config = Path(env["TOKCHAT_CONFIG_DIR"]) / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[chat]\nsystem_prompt = "\\u001b]0;PWNED\\u0007 \\u009b2J be brief"\n', encoding="utf-8")
    shown = on_terminal(env, "config", "show")
    assert not any(c in shown for c in RAW), repr(shown)
    # written as TOML's own escapes: the line still reads back as the same value
    line = next(line for line in shown.splitlines() if line.startswith("system_prompt = "))
    assert "\\u001b]0;PWNED\\u0007 \\u009b2J be brief" in line
