"""Headless mode: the reply on stdout, notices/reasoning/stats on stderr, Ctrl-C handled.

The in-process tests use the real tokenizer and template with the scripted
backend (exact ids); the end-to-end tests run ``python -m app`` with the
real SmolLM2 model on the CPU through llama.cpp.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.chat.headless import run_headless
from app.settings.options import ChatOptions
from app.history.recorder import HistoryRecorder
from app.history.store import ChatStore
from backends import SamplingParams
from backends.scripted import ScriptedBackend

STATS_KEYS = {"prompt_tokens", "completion_tokens", "ttft_s", "tokens_per_s", "context_used", "context_limit",
              "backend", "device", "finish_reason"}
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tok(smollm_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(smollm_path)


def _headless(options, backend, recorder=None):
    out, err = io.StringIO(), io.StringIO()
    code = run_headless(options, backend=backend, recorder=recorder, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _options(model, **kwargs):
    return ChatOptions(model=str(model), prompt=kwargs.pop("prompt", "Hello?"), ctx=kwargs.pop("ctx", 2048),
                       sampling=SamplingParams(temperature=0, max_tokens=kwargs.pop("max_tokens", 64)), **kwargs)


def test_reply_to_stdout_and_stats_to_stderr(smollm_path, tok):
    reply = tok.encode("Hi there!") + [tok.special_tokens["<|im_end|>"]]
    code, out, err = _headless(_options(smollm_path, stats=True), ScriptedBackend(reply))
    assert (code, out) == (0, "Hi there!\n")
    stats = json.loads(err.strip().splitlines()[-1])
    assert STATS_KEYS <= stats.keys()
    assert (stats["completion_tokens"], stats["finish_reason"], stats["backend"]) == (len(reply), "stop", "scripted")
    assert stats["context_used"] == stats["prompt_tokens"] + stats["completion_tokens"]


def test_thinking_goes_to_stderr_only_when_asked(smollm_path, tok):
    reply = tok.encode("<think>hmm</think>Answer.") + [tok.special_tokens["<|im_end|>"]]
    code, out, err = _headless(_options(smollm_path, template="chatml-think"), ScriptedBackend(reply))
    assert (code, out, err) == (0, "Answer.\n", "")
    code, out, err = _headless(_options(smollm_path, template="chatml-think", show_thinking=True),
                               ScriptedBackend(reply))
    assert (out, err) == ("Answer.\n", "hmm")


def test_backend_failure_keeps_the_partial_reply_and_exits_2(smollm_path, tok):
    reply = tok.encode("one two three four")
    code, out, err = _headless(_options(smollm_path, stats=True), ScriptedBackend(reply, fail_after=2))
    assert code == 2 and out == tok.decode(reply[:2]) + "\n"
    lines = err.strip().splitlines()
    assert lines[0] == "tokchat: scripted fault: the engine stopped mid-reply"
    assert json.loads(lines[1])["finish_reason"] == "error"


def test_a_too_long_prompt_is_refused_in_one_line(smollm_path):
    code, out, err = _headless(_options(smollm_path, prompt="word " * 400, ctx=128), ScriptedBackend([2]))
    assert code == 2 and out == ""
    assert err.startswith("tokchat: message too long") and err.count("\n") == 1


def test_the_turn_is_recorded_through_the_hook(smollm_path, tok, tmp_path):
    reply = tok.encode("Recorded.") + [tok.special_tokens["<|im_end|>"]]
    recorder = HistoryRecorder(store_path=tmp_path / "history.sqlite3", model_path=str(smollm_path))
    code, _, _ = _headless(_options(smollm_path, prompt="Save me"), ScriptedBackend(reply), recorder)
    stored = ChatStore(tmp_path / "history.sqlite3").load(recorder.conversation_id).messages
    assert code == 0
    assert [(m.role, m.content, m.finish_reason) for m in stored][-2:] == [
        ("user", "Save me", stored[-2].finish_reason), ("assistant", "Recorded.", "stop")]


def _env(tmp_path):
    env = dict(os.environ)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        env[name] = str(tmp_path / name.lower())
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.slow
def test_end_to_end_with_the_real_model(smollm_path, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", "What is the capital of France?",
         "--temperature", "0", "--max-tokens", "16", "--stats", "--no-history"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    stats = json.loads(result.stderr.strip().splitlines()[-1])
    assert STATS_KEYS <= stats.keys()
    assert (stats["backend"], stats["device"]) == ("llama.cpp", "CPU")
    assert 0 < stats["completion_tokens"] <= 16 and stats["finish_reason"] in ("stop", "length")
    assert stats["prompt_tokens"] > 10 and stats["context_used"] == stats["prompt_tokens"] + stats["completion_tokens"]


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_with_the_partial_reply(smollm_path, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", "Write a long story about a cat.",
         "--temperature", "0", "--max-tokens", "400", "--stats", "--no-history"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=_env(tmp_path))
    try:
        first = process.stdout.read(1)  # the reply has started streaming
        assert first
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    out = (first + rest).decode()
    assert process.returncode == 130, err.decode()
    stats = json.loads(err.decode().strip().splitlines()[-1])
    assert stats["finish_reason"] == "cancelled" and 0 < stats["completion_tokens"] < 400
    assert out.strip() and "Traceback" not in err.decode()


@pytest.mark.slow
def test_prompt_from_stdin(smollm_path, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--temperature", "0", "--max-tokens", "4",
         "--stats", "--no-history"],
        input="Say hello.", capture_output=True, text=True, timeout=300, cwd=tmp_path, env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stderr.strip().splitlines()[-1])
    assert result.stdout.strip() and 0 < stats["completion_tokens"] <= 4
