"""A real SIGKILL to a real headless ``tokchat`` on every reply path keeps what was printed, marked as cut
(issue 44, C2, C3, C9).

Each run is ``python -m app`` on the real SmolLM2 model (llama.cpp) with its own data folder; the
history is read back from SQLite, first read-only (as ``export`` reads it, before any writer has opened
the file again to mark the dead writer's reply), then by the next run.  The kill comes once the
process has saved part of the reply (the saves come about once a second): what is stored is then a
prefix of what was printed, and more than the row held before.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.killed_run import kill_once_saved, last_message

from tokenizer import load_tokenizer

STORY = "Write a very long story about a dragon who learns to cook, with many chapters."
#: greedy and without a penalty: SmolLM2 writes on to max_tokens, and the same text every run
GREEDY = ("--temperature", "0", "--repeat-penalty", "1", "--backend", "cpu", "--ctx", "1024", "--threads", "1")

pytestmark = pytest.mark.slow


def _tokchat(model: Path, env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "--model", str(model), *GREEDY, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)


def _render_ids(model: Path, env: dict, cwd: Path, messages: list[dict]) -> list[int]:
    """``tokchat render --ids``: the prompt a chat sends for ``messages`` (the generation prompt included)."""
    path = cwd / "messages.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "app", "render", "--model", str(model), "--messages", str(path),
                          "--ids"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("path", ["first reply", "continue"])
def test_a_sigkill_keeps_what_was_printed_marked_cut_and_the_continue_counts_every_id(path, smollm_path, env,
                                                                                       tmp_path):
    """C2: a continuation killed kept none of its text and stayed unmarked.  C9: a reader that opens the
    file read-only showed the cut reply unmarked.  C3: continuing the cut reply stored the prompt with the
    reply's ids in it and the completion without them."""
    if path == "continue":
        first = _tokchat(smollm_path, env, tmp_path, "--prompt", STORY, "--max-tokens", "24")
        assert first.returncode == 0, first.stderr
        before = last_message(env)
        assert before.finish_reason == "length" and before.content
        printed = kill_once_saved(["--model", str(smollm_path), *GREEDY, "--resume", "1", "--continue",
                                   "--max-tokens", "600"], env, tmp_path, before.content)
        shown = before.content + printed
    else:
        before = None
        shown = kill_once_saved(["--model", str(smollm_path), *GREEDY, "--prompt", STORY, "--max-tokens", "600"],
                                env, tmp_path)
    cut = last_message(env)  # read-only: nothing has marked the row since the kill
    assert cut.finish_reason == "interrupted"
    assert shown.startswith(cut.content) and len(cut.content) > len(before.content if before else "")
    assert cut.stats is None and cut.reply_ids is None  # the shorter reply's facts are not passed off as these

    export = subprocess.run([sys.executable, "-m", "app", "export", "1", "--format", "json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    exported = json.loads(export.stdout)["messages"][-1]
    assert (exported["content"], exported["finish_reason"]) == (cut.content, "interrupted")

    go_on = _tokchat(smollm_path, env, tmp_path, "--resume", "1", "--continue", "--max-tokens", "8", "--stats")
    assert go_on.returncode == 0, go_on.stderr
    stats = json.loads(go_on.stderr.strip().splitlines()[-1])
    reply = last_message(env)
    assert reply.content.startswith(cut.content) and reply.finish_reason == "length"
    prompt = _render_ids(smollm_path, env, tmp_path, [{"role": "user", "content": STORY}])
    cut_ids = len(load_tokenizer(smollm_path).encode(cut.content))
    assert reply.stats == stats
    assert (reply.prompt_tokens, reply.completion_tokens) == (len(prompt), cut_ids + 8)
    assert [p["completion_tokens"] for p in reply.stats["parts"]] == [cut_ids, 8]
    # the continue evaluated the whole prompt and the cut reply again (a new engine): the prompt's part is
    # shown as the reply's prompt work, the reply's own ids as evaluated again to continue
    assert [p["new_prompt_tokens"] for p in reply.stats["parts"]] == [len(prompt), cut_ids]
    assert reply.prompt_tokens + reply.completion_tokens == len(prompt) + len(reply.reply_ids)
    print(f"{path}: {len(shown)} characters printed, {len(cut.content)} stored when killed; continued: prompt "
          f"{reply.prompt_tokens}, completion {reply.completion_tokens} ({cut_ids} + 8)")
