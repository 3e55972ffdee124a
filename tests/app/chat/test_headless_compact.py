"""Headless ``--compact`` (issue 47, part 3) in real ``python -m app`` processes on SmolLM2 through llama.cpp,
``--ctx 512``, each turn a ``--resume`` of the stored conversation:

* ``summarize``: once the next message would not fit, a summary is made, said on stderr, stored as a
  ``summary`` row with its ids and cost, counted in ``--stats`` (``compacted_turns``, ``summary_tokens``),
  and a later process that reopens the conversation keeps its turns out of the prompt and the summary in;
* ``refuse``: exit 2, one line saying how much must go, nothing stored.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env

from app.history.store import ChatStore

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def note(n: int) -> str:
    """About 120 tokens: three or four turns fill a context of 512."""
    return (f"Note {n}: my friend number {n} is called Name{n}; she lives in city {n}, works as a baker, keeps "
            f"{n} cats and a garden with {n + 2} apple trees and a small pond full of fish. " * 2).strip()


def tokchat(tmp_path: Path, model: Path, policy: str, prompt: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app", "-m", str(model), "--ctx", "512", "--max-tokens", "32", "--temperature", "0",
         "--speculative", "off", "--compact", policy, "--stats", "--prompt", prompt, *args],
        cwd=ROOT, env=child_env(tmp_path), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)


def stats_of(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stderr.strip().splitlines()[-1])


def rows(tmp_path: Path) -> list:
    with ChatStore(tmp_path / "data" / "history.sqlite3") as store:
        return store.load(1).messages


def test_summarize_stores_a_summary_and_reports_it_in_stats(smollm_path, tmp_path):
    done = tokchat(tmp_path, smollm_path, "summarize", note(0))
    assert done.returncode == 0, done.stderr
    made = None
    for n in range(1, 8):
        done = tokchat(tmp_path, smollm_path, "summarize", note(n), "--resume", "1")
        assert done.returncode == 0, done.stderr
        stats = stats_of(done)
        if stats["compacted_turns"]:
            made = n
            break
        assert stats["summary_tokens"] == 0 and "summary of the first" not in done.stderr
    assert made is not None, "the conversation never outgrew the context"
    line = next(x for x in done.stderr.splitlines() if x.startswith("tokchat: summary of the first "))
    assert "stored" in line and "context full: left the" not in done.stderr  # summarized, not silently dropped
    summaries = [m for m in rows(tmp_path) if m.role == "summary"]
    assert len(summaries) == 1
    summary = summaries[0]
    assert summary.content and summary.content in line  # the text shown is the text stored
    assert len(summary.reply_ids) == stats["summary_tokens"] > 0  # its ids, and its cost:
    assert summary.stats["prompt_tokens"] > 0 and summary.stats["compacted_turns"] == stats["compacted_turns"]
    # a later process reopens it: the summary stays in the prompt, its turns stay out, nothing is dropped again
    done = tokchat(tmp_path, smollm_path, "summarize", "And what do you remember about my friends?", "--resume", "1")
    assert done.returncode == 0, done.stderr
    # (it may summarize again: then the new summary folds in the stored one; it never drops silently)
    assert "context full: left the" not in done.stderr and stats_of(done)["dropped_turns"] >= stats["compacted_turns"]
    render = subprocess.run([sys.executable, "-m", "app", "export", "1", "--format", "json"], cwd=ROOT,
                            env=child_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert render.returncode == 0 and '"summary"' in render.stdout


def test_refuse_sends_nothing_and_says_how_much_must_go(smollm_path, tmp_path):
    done = tokchat(tmp_path, smollm_path, "refuse", note(0))
    assert done.returncode == 0, done.stderr
    for n in range(1, 8):
        before = len(rows(tmp_path))
        done = tokchat(tmp_path, smollm_path, "refuse", note(n), "--resume", "1")
        if done.returncode == 2:
            break
        assert done.returncode == 0, done.stderr
    assert done.returncode == 2 and done.stdout == ""
    assert "tokchat: context full (policy refuse): about " in done.stderr and "would have to leave" in done.stderr
    assert len(rows(tmp_path)) == before  # nothing stored
