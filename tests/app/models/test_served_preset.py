"""``--server`` without ``--model`` applies the preset of what the server serves (issue 34, item 6).

Before, SmolLM2 sampled at 0.2 / 0.9 locally and at the defaults 0.7 / 0.95 through a
server, and Qwen's penalty and top-k differed, so even greedy replies differed.  Real
``llama-server`` processes from the test assets and real ``python -m app`` processes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
from support.hostile_server import HostileServer  # noqa: E402
from support.remote_servers import LlamaServer  # noqa: E402
from support.process_env import child_env  # noqa: E402
from support.headless_runs import tokchat  # noqa: E402

pytestmark = pytest.mark.slow


def shown_settings(env: dict[str, str], url: str) -> dict:
    done = tokchat(env, "config", "show", "--server", url, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(("model", "preset", "expected"), [
    ("smollm_path", "smollm2", {"temperature": 0.2, "top_p": 0.9}),
    ("qwen_path", "qwen2.5", {"top_k": 20, "top_p": 0.8, "repeat_penalty": 1.05}),
])
def test_the_served_models_preset_applies_without_model(model, preset, expected, request, tmp_path):
    path = request.getfixturevalue(model)
    env = child_env(tmp_path)
    server = LlamaServer(path, tmp_path).start()
    try:
        shown = shown_settings(env, server.url)
        for key, value in expected.items():
            assert shown[f"sampling.{key}"] == {"value": value, "source": f"preset {preset}"}, (key, shown)
        done = tokchat(env, "--server", server.url, "--prompt", "hi", "--max-tokens", "2", "--stats")
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    stats = json.loads(done.stderr.strip().splitlines()[-1])
    for key, value in expected.items():
        assert stats["sampling"][key] == value, stats["sampling"]


def test_flags_and_config_still_win_over_the_served_preset(smollm_path, tmp_path):
    env = child_env(tmp_path)
    server = LlamaServer(smollm_path, tmp_path).start()
    try:
        done = tokchat(env, "config", "show", "--server", server.url, "--json", "--temperature", "0.5")
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["sampling.temperature"]["value"] == 0.5
    assert shown["sampling.top_p"] == {"value": 0.9, "source": "preset smollm2"}


def test_a_server_that_does_not_answer_is_asked_once(smollm_path, tmp_path):
    """The preset match and the chat share one connect: a hung server costs one connect timeout, not two."""
    env = child_env(tmp_path)
    (tmp_path / "config").mkdir(parents=True, exist_ok=True)
    (tmp_path / "config" / "config.toml").write_text("[server]\nconnect_timeout = 1\n")
    with HostileServer(None, {"/health": "slow_headers"}) as hostile:
        done = tokchat(env, "--server", hostile.url, "--prompt", "hi", "--max-tokens", "2")
        hits = dict(hostile.hits)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "did not answer /health" in line]
    assert len(errors) == 1, done.stderr
    assert hits == {"/health": 1}, hits
