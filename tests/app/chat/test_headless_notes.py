"""What a headless run says about the engine it starts, checked on real processes (issue 44, C11).

``--threads 1`` was announced as "2 generation thread(s)" (the detection's default beside the
engine's own note), and a draft model of another vocabulary was reported as the main model's
failure ("could not load smollm2.gguf: ...").
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import ROOT, child_env

pytestmark = pytest.mark.slow


def tokchat(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args, "--no-history"], cwd=ROOT, env=child_env(tmp_path),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)


def test_threads_one_is_announced_as_one(smollm_path, tmp_path):
    run = tokchat(tmp_path, "-m", str(smollm_path), "--threads", "1", "--prompt", "hi", "--max-tokens", "1")
    assert run.returncode == 0, run.stderr
    counts = re.findall(r"(\d+) (?:generation )?thread\(s\)", run.stderr)
    assert counts and set(counts) == {"1"}, run.stderr


def test_a_draft_model_of_another_vocabulary_is_named_as_the_draft(smollm_path, qwen_path, tmp_path):
    run = tokchat(tmp_path, "-m", str(smollm_path), "--draft-model", str(qwen_path), "--speculative", "draft",
                  "--prompt", "hi", "--max-tokens", "1")
    assert run.returncode == 2 and run.stdout == "", run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith(f"tokchat: the draft model {qwen_path.name} cannot draft for {smollm_path.name}: "), lines
    assert f"could not load {smollm_path.name}" not in lines[0] and "--speculative off" in lines[0]
