"""Resuming against a server that now serves another model is refused, or recorded when asked (issue 34, item 3).

A SmolLM2 conversation, the server restarted with Qwen on the same port, ``--resume`` without
``--model``: the tokenizer comes from the server, so the connect's vocabulary check passes,
and before this fix the old replies were re-encoded into Qwen's ids with no word.  Real parts:
``llama-server`` from the test assets, ``python -m app`` processes with their own folders,
the SQLite history they write.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.history.model_identity import SETTINGS_KEY, vocabulary_fingerprint
from app.history.store import ChatStore
from tokenizer import load_tokenizer

from support.remote_servers import LlamaServer, free_port  # noqa: E402

from support.process_env import child_env  # noqa: E402
from support.headless_runs import db_path, exported, tokchat  # noqa: E402

pytestmark = pytest.mark.slow


def contents(conversation: dict) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in conversation["messages"]]


def test_a_resume_against_another_served_model_is_refused_unless_switched(smollm_path, qwen_path, tmp_path):
    env = child_env(tmp_path)
    port = free_port()
    server = LlamaServer(smollm_path, tmp_path, port=port).start()
    try:
        remote = ("--server", server.url)
        done = tokchat(env, *remote, "--prompt", "Say hi", "--max-tokens", "4", "--temperature", "0")
        assert done.returncode == 0, done.stderr
        # the same model again: no refusal, no notice
        done = tokchat(env, *remote, "--resume", "1", "--prompt", "Again", "--max-tokens", "4", "--temperature", "0")
        assert done.returncode == 0 and "vocabulary" not in done.stderr.replace("vocabulary check passed", ""), \
            done.stderr
    finally:
        server.stop()
    with ChatStore(db_path(tmp_path)) as store:
        assert store.load(1).info.settings[SETTINGS_KEY] == vocabulary_fingerprint(load_tokenizer(smollm_path))
    before = exported(env, 1)
    assert len(before["messages"]) == 4

    server = LlamaServer(qwen_path, tmp_path, port=port).start()  # restarted with another model, same address
    try:
        for steer in (("--prompt", "And now?"), ("--continue",)):
            done = tokchat(env, *remote, "--resume", "1", *steer, "--max-tokens", "4", "--temperature", "0")
            assert done.returncode == 2 and done.stdout == "", (steer, done.stderr)
            lines = [line for line in done.stderr.splitlines() if "--switch-model" in line]
            assert len(lines) == 1 and "written by smollm2.gguf" in lines[0], done.stderr
            assert contents(exported(env, 1)) == contents(before)  # nothing stored

        done = tokchat(env, *remote, "--resume", "1", "--switch-model", "--prompt", "And now?", "--max-tokens", "4",
                       "--temperature", "0")
        assert done.returncode == 0, done.stderr
        assert "switched from smollm2.gguf to qwen2.5-coder-0.5b.gguf" in done.stderr, done.stderr
    finally:
        server.stop()
    after = exported(env, 1)
    assert contents(after)[:4] == contents(before) and [m["role"] for m in after["messages"][4:]] == \
        ["user", "assistant"]
    with ChatStore(db_path(tmp_path)) as store:
        info = store.load(1).info
    assert info.model_name == "qwen2.5-coder-0.5b.gguf"
    assert info.settings[SETTINGS_KEY] == vocabulary_fingerprint(load_tokenizer(qwen_path))
    assert {k for k in info.settings if k != SETTINGS_KEY}  # the other stored settings are still there


def test_switch_model_needs_resume(tmp_path):
    done = tokchat(child_env(tmp_path), "--switch-model", "--prompt", "hi")
    assert done.returncode == 2 and "--switch-model goes on with a stored conversation" in done.stderr, done.stderr
