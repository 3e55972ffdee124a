"""Names from files and servers reach a real terminal inert: ``tokchat tools``, ``models``, ``info`` (issue 44, C4).

Each command runs as a real process with its stdout and stderr on one pseudo-terminal
(:func:`pty_run.on_terminal`), as a user's terminal receives them: a tool's name from an MCP
server (a real one, :mod:`escape_named_mcp_server`) and a model file's name holding a window
title, a bell and a clear-screen must be shown as text (``\\x1b``), never acted on.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.process_env import child_env
from support.pty_run import RAW_CONTROLS, on_terminal

HERE = Path(__file__).resolve().parent
#: a model file's name as a hostile download or archive may leave it
EVIL_FILE = "evil\x1b]0;PWNED\x07\x1b[2Jname.gguf"

pytestmark = pytest.mark.slow


def test_tools_shows_a_tool_name_inert(tmp_path, smollm_path):
    env = child_env(tmp_path)
    config = Path(env["TOKCHAT_CONFIG_DIR"]) / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[mcp.servers.evil]\n"
                      f"command = {json.dumps(sys.executable)}\n"
                      f"args = [{json.dumps(str(HERE.parents[1] / 'support' / 'escape_named_mcp_server.py'))}]\n", encoding="utf-8")
    run = on_terminal(env, "tools", "--model", str(smollm_path))
    assert run.returncode == 0, run.screen
    assert not any(c in run.screen for c in RAW_CONTROLS), repr(run.screen)
    assert "evil\\x1b]0;PWNED\\x07\\x1b[2Jtool" in run.screen, run.screen


def test_models_and_info_show_a_file_name_inert(tmp_path):
    env = child_env(tmp_path)
    models = tmp_path / "models"
    models.mkdir()
    (models / EVIL_FILE).write_bytes(b"GGUFjunk")  # not a readable GGUF: each command names the file
    listing = on_terminal(env, "models", "--dir", str(models))
    assert listing.returncode == 0, listing.screen
    assert not any(c in listing.screen for c in RAW_CONTROLS), repr(listing.screen)
    assert "tokchat: skipped " in listing.screen and "evil\\x1b]0;PWNED\\x07\\x1b[2Jname.gguf" in listing.screen

    info = on_terminal(env, "info", str(models / EVIL_FILE))
    assert info.returncode == 2, info.screen
    assert not any(c in info.screen for c in RAW_CONTROLS), repr(info.screen)
    assert "evil\\x1b]0;PWNED\\x07\\x1b[2Jname.gguf" in info.screen, info.screen
