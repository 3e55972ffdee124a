"""The engine's note on a reply's counts reaches the user (issue 48, item 1): ``--stats`` and the history.

A real ``python -m app`` process against a real ``llama-server`` behind :class:`scripted_proxy.ScriptedProxy`,
whose ``/completion`` stream is scripted to count one generated id fewer than it sends.  The remote backend
then marks the reply unverified and says why in ``GenerationStats.note``; the turn holds those stats
(``TurnStats.generation``), so ``--stats`` prints the note and the history stores it, instead of a fixed
phrase.  (The TUI's stats line: tests/app/tui/test_remote_note_tui.py.)
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env
from support.remote_servers import LlamaServer
from support.scripted_proxy import Reply, ScriptedProxy, token_stream

from app.history.store import ChatStore
from tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Once upon a time"

pytestmark = pytest.mark.slow


def undercounted(ids: list[int], pieces: list[str]):
    """llama-server's stream of ``ids`` whose own count (``tokens_predicted``) is one id short."""
    def script(body: dict, _upstream) -> Reply:
        events = token_stream(ids, pieces, len(body["prompt"]))
        events[-1]["tokens_predicted"] = len(ids) - 1
        return Reply(events=events)
    return script


def note_for(ids: list[int]) -> str:
    """What the remote backend says of that stream (backends.remote's accounting)."""
    return f"the server counted {len(ids) - 1} generated ids, tokchat received {len(ids)}"


def test_the_servers_count_note_is_in_the_stats_json_and_the_history(smollm_path, tmp_path):
    """Before: ``--stats`` had ``verified: false`` and no word on why; the stored stats neither."""
    tokenizer = load_tokenizer(smollm_path)
    ids = tokenizer.encode(TEXT)[:4]
    pieces = [tokenizer.decode([t]) for t in ids]
    env = child_env(tmp_path)
    (tmp_path / "upstream").mkdir()
    server = LlamaServer(smollm_path, tmp_path / "upstream").start()
    try:
        with ScriptedProxy(server.url, {"/completion": undercounted(ids, pieces)}) as proxy:
            run = subprocess.run([sys.executable, "-m", "app", "--server", proxy.url, "--model", str(smollm_path),
                                  "--temperature", "0", "--max-tokens", "64", "--prompt", "Tell me a story",
                                  "--stats"], cwd=ROOT, env=env, capture_output=True, text=True,
                                 stdin=subprocess.DEVNULL, timeout=180)
    finally:
        server.stop()
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert run.stdout == tokenizer.decode(ids) + "\n", (run.stdout, run.stderr)
    stats = json.loads(run.stderr.strip().splitlines()[-1])
    assert (stats["verified"], stats["note"], stats["finish_reason"]) == (False, note_for(ids), "stop"), stats
    with ChatStore(Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3", readonly=True) as store:
        reply = store.load(1).messages[-1]
    assert (reply.stats["verified"], reply.stats["note"]) == (False, note_for(ids))
