"""``--stats`` is one JSON line of its own, also after ``--show-thinking`` (issue 34, item 9).

A real ``python -m app`` run: SmolLM2 through llama.cpp with llama.cpp's real DeepSeek-R1
template (its generation prompt opens ``<think>``, so the reply starts as reasoning; see
tests/app/conversation/test_reasoning_budget.py), the reasoning shown on stderr without a
final newline, then cut by ``--reasoning-budget``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env

ROOT = Path(__file__).resolve().parents[3]
R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"

pytestmark = pytest.mark.slow




def run(tmp_path: Path, smollm_path: Path, llamacpp_models_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app", "-m", str(smollm_path), "--template-file",
         str(llamacpp_models_dir / "templates" / R1), "--prompt", "Why is the sky blue?", "--temperature", "0",
         "--max-tokens", "24", "--think", "--show-thinking", "--stats", *args],
        cwd=ROOT, env=child_env(tmp_path), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)


def test_the_stats_are_a_line_of_their_own_after_the_reasoning(tmp_path, smollm_path, llamacpp_models_dir):
    done = run(tmp_path, smollm_path, llamacpp_models_dir, "--reasoning-budget", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.rstrip("\n").split("\n")
    stats = json.loads(lines[-1])  # before: 'The answer ...{"new_prompt_tokens": ...' on one line
    # the reasoning shown is the model's, on the line(s) before: the stats line holds nothing else
    assert lines[-1].startswith("{") and stats["finish_reason"] in ("stop", "length")
    # the budget's 5 ids are the model's reasoning; tokchat's closing ids are counted apart
    assert stats["reasoning_cut"] and stats["reasoning_tokens"] == 5
    assert stats["forced_close_tokens"] > 0
    assert stats["reasoning_tokens"] + stats["forced_close_tokens"] <= stats["completion_tokens"]


def test_without_a_budget_nothing_is_counted_as_a_forced_close(tmp_path, smollm_path, llamacpp_models_dir):
    done = run(tmp_path, smollm_path, llamacpp_models_dir)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stderr.rstrip("\n").split("\n")[-1])
    assert stats["reasoning_tokens"] > 0 and stats["forced_close_tokens"] == 0 and not stats["reasoning_cut"]
