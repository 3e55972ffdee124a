"""Instant resume through llama-server (issue 45, item 5), headless: ``--resume`` in a new tokchat process, on a
server started again, restores the slot the first run saved and the server evaluates only the rest.

Real parts: ``python -m app`` processes with their own folders (:func:`process_env.child_env`), real
``llama-server`` processes on SmolLM2 (``tests/support/remote_servers.py``) with ``--slot-save-path`` (the
second one started on the same folder after the first was stopped, on another port) and without it, the
``--stats`` JSON on stderr, the server's own count of the ids it evaluated (``new_prompt_tokens``).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env

ROOT = Path(__file__).resolve().parents[3]
NOTES = "Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour; it rose {d % 3 + 1} times." for d in range(1, 10)
) + " What should I change?"

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(smollm_path, tmp_path):
    """Start llama-servers on SmolLM2 (``--slot-save-path`` when given a folder); all stopped at the end."""
    from support.remote_servers import LlamaServer

    started = []

    def start(slots: Path | None):
        extra = ("--slot-save-path", str(slots)) if slots is not None else ()
        server = LlamaServer(smollm_path, tmp_path, ctx=1024, extra=extra).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def turn(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "app", *args, "--max-tokens", "12", "--temperature", "0", "--stats"],
                          cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


def tokchat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def test_resume_on_a_restarted_server_restores_its_saved_slot(servers, smollm_path, tmp_path):
    slots = tmp_path / "slots"
    slots.mkdir()
    env = child_env(tmp_path)
    model = ("-m", str(smollm_path))
    first_server = servers(slots)
    first = turn(env, "--server", first_server.url, *model, "--prompt", NOTES)
    assert first["state"] == "none (nothing saved for these ids)"
    saved = first["prompt_tokens"] + first["completion_tokens"] - 1  # the reply's last id is never evaluated
    first_server.slots()  # queued behind the save tokchat sent as it quit: the file is written when this answers
    first_server.stop()
    assert len(list(slots.iterdir())) == 1

    server_file = next(slots.iterdir()).name
    listed = tokchat(env, "cache")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if server_file in line)
    # the entry is named by the conversation it holds, the model, and its ids
    assert row.split()[:2] == ["1", "Here"] and smollm_path.name in row and f"{saved:,}" in row, listed.stdout
    assert "1 slot file(s) indexed" in listed.stdout

    again = servers(slots)  # the same folder, a new process on another port
    resumed = turn(env, "--server", again.url, *model, "--resume", "1", "--prompt", "And in two words?")
    assert re.fullmatch(rf"loaded {saved} ids from disk in \d+\.\d\d s", resumed["state"]), resumed["state"]
    assert resumed["new_prompt_tokens"] == resumed["prompt_tokens"] - saved  # the server's own count
    again.slots()  # the save of the longer conversation, sent as tokchat quit, is written

    cleared = tokchat(env, "cache", "clear")
    assert cleared.returncode == 0 and "forgot 1 llama-server slot file(s)" in cleared.stdout, cleared.stdout
    assert "slot file(s) indexed" not in tokchat(env, "cache").stdout
    assert server_file in {p.name for p in slots.iterdir()}  # the server's own file is where it was
    forgotten = turn(env, "--server", again.url, *model, "--resume", "1", "--prompt", "And in one word?")
    assert forgotten["state"] == "none (nothing saved for these ids)", forgotten["state"]


def test_a_server_without_slot_save_path_says_once_that_it_keeps_nothing(servers, smollm_path, tmp_path):
    plain = servers(None)
    stats = turn(child_env(tmp_path), "--server", plain.url, "-m", str(smollm_path), "--prompt", NOTES)
    assert stats["state"] == ("none (llama-server keeps nothing between its runs: start it with --slot-save-path "
                              "DIR for tokchat to keep conversations there)")
    quiet = turn(child_env(tmp_path), "--server", plain.url, "-m", str(smollm_path), "--prompt", NOTES, "--no-state")
    assert quiet["state"] == ""  # states off: nothing said, nothing asked of the server
