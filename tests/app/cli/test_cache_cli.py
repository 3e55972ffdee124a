"""``tokchat cache`` and ``doctor``'s state line (issue 45), as real processes with their own folders.

The state files are written by the real :class:`backends.state_cache.StateCache` (a payload of
zeros stands for llama.cpp's bytes: listing reads headers only); a damaged one is listed with the
reason a resume would refuse it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.process_env import child_env

from backends.state_cache import StateCache, StateKey

ROOT = Path(__file__).resolve().parents[3]


def tokchat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def test_cache_lists_every_state_and_a_damaged_one_with_its_reason(tmp_path):
    env = child_env(tmp_path)
    root = Path(env["XDG_CACHE_HOME"]) / "tokchat" / "state"
    cache = StateCache(root, max_bytes=1 << 30)
    key = StateKey(model="m", build="b", layout="l")
    cache.write(key, list(range(3000)), bytes(3 << 20), model_name="Qwen2.5 Coder 0.5B")
    broken = cache.write(key, [7] * 500, bytes(1 << 20), model_name="Qwen2.5 Coder 0.5B")
    broken.write_bytes(broken.read_bytes()[:-10])
    done = tokchat(env, "cache")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["conversation", "model", "ids", "size", "last", "used"]
    assert any("Qwen2.5 Coder 0.5B" in line and "3,000" in line and "3.2 MB" in line for line in lines), done.stdout
    assert any(line.startswith("?") and "refused: truncated (" in line for line in lines), done.stdout
    assert lines[-1].startswith("2 state(s), ") and str(root) in lines[-1]


def test_doctor_gives_the_state_folder_and_size_or_says_it_is_off(tmp_path):
    env = child_env(tmp_path)
    root = Path(env["XDG_CACHE_HOME"]) / "tokchat" / "state"
    StateCache(root, 1 << 30).write(StateKey("m", "b", "l"), list(range(200)), bytes(1 << 20))
    done = tokchat(env, "doctor")
    assert done.returncode == 0, done.stderr
    line = next(row for row in done.stdout.splitlines() if row.startswith("engine state cache:"))
    assert line.startswith(f"engine state cache: 1 state(s), 1.0 MB of at most 4 GiB in {root}"), line
    config = Path(env["TOKCHAT_CONFIG_DIR"])
    config.mkdir(parents=True)
    (config / "config.toml").write_text("[state]\nenabled = false\n")
    done = tokchat(env, "doctor")
    line = next(row for row in done.stdout.splitlines() if row.startswith("engine state cache:"))
    assert line.startswith("engine state cache: off") and str(root) in line, line


def test_cache_lists_a_servers_slot_files_with_their_names_inert_on_a_terminal(tmp_path):
    """The index names the model as the server reported it; on a terminal its controls are shown, not acted on."""
    from support.pty_run import RAW_CONTROLS, on_terminal

    from backends.remote_slots import FOLDER, SlotIndex

    env = child_env(tmp_path)
    root = Path(env["XDG_CACHE_HOME"]) / "tokchat" / "state"
    SlotIndex(root / FOLDER, "/models/evil\x1b]0;pwned\x07.gguf\0build 1").record(list(range(300)), 0)
    run = on_terminal(env, "cache")
    assert run.returncode == 0, run.screen
    assert "300" in run.screen and "1 slot file(s) indexed" in run.screen, run.screen
    assert "evil" in run.screen and not any(c in run.screen for c in RAW_CONTROLS), repr(run.screen)
    piped = tokchat(env, "cache")  # not a terminal: the name exactly as stored
    assert "evil\x1b]0;pwned\x07.gguf" in piped.stdout
