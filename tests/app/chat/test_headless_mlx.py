"""Instant resume (issue 45) and reply formats (issue 46) on MLX, as a user runs them: ``python -m app --backend mlx``.

Real parts: ``python -m app`` processes with their own data, config and cache folders
(:func:`process_env.child_env`), SmolLM2's Q4_1 GGUF in MLX (``mlx[cpu]``) in the
engine's own process, the state files those engines wrote, the real SQLite history;
stdout and the ``--stats`` line read back.  A held reply is checked with the
``jsonschema`` package, which knows nothing of the engine that held it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from support.process_env import child_env

ROOT = Path(__file__).resolve().parents[3]
#: long enough to be kept (128 ids with the reply), short enough for MLX on a shared 2-core CPU
NOTES = "Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour; it rose {d % 3 + 1} times." for d in range(1, 6)
) + " What should I change?"

pytestmark = pytest.mark.slow


def tokchat(env: dict[str, str], model: Path, *args: str) -> tuple[str, dict]:
    """One real tokchat run on MLX; its stdout and its ``--stats`` line."""
    done = subprocess.run([sys.executable, "-m", "app", "-m", str(model), "--backend", "mlx", "--temperature", "0",
                           "--stats", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def state_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "xdg").rglob("state/*/*.kv"))


def test_mlx_resume_loads_the_saved_state_and_no_state_keeps_nothing(smollm_path, tmp_path):
    env = child_env(tmp_path)
    _, first = tokchat(env, smollm_path, "--prompt", NOTES, "--max-tokens", "12")
    assert first["state"] == "none (nothing saved for these ids)"
    saved = first["prompt_tokens"] + first["completion_tokens"] - 1  # the reply's last id is never evaluated
    files = state_files(tmp_path)
    assert [p.name.split("-")[0] for p in files] == [str(saved)]

    # --no-state: the conversation is evaluated whole, and nothing is read or written
    before = [(p, p.stat().st_mtime_ns) for p in files]
    _, evaluated = tokchat(env, smollm_path, "--resume", "1", "--prompt", "And in two words?", "--max-tokens", "4",
                           "--no-state")
    assert evaluated["state"] == "" and evaluated["new_prompt_tokens"] == evaluated["prompt_tokens"]
    assert [(p, p.stat().st_mtime_ns) for p in state_files(tmp_path)] == before

    _, resumed = tokchat(env, smollm_path, "--resume", "1", "--prompt", "And in two words?", "--max-tokens", "4")
    assert re.fullmatch(rf"loaded {saved} ids from disk in \d+\.\d\d s", resumed["state"]), resumed["state"]
    assert resumed["new_prompt_tokens"] == resumed["prompt_tokens"] - saved


def test_mlx_json_schema_reply_validates(smollm_path, tmp_path):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
                       "city": {"type": "string", "maxLength": 24}},
        "required": ["name", "age", "city"],
        "additionalProperties": False,
    }
    reply, stats = tokchat(child_env(tmp_path), smollm_path, "--prompt",
                           "Describe a person as JSON with name, age and city.", "--json-schema", json.dumps(schema),
                           "--max-tokens", "48")
    jsonschema.validate(json.loads(reply), schema)
    assert stats["constraint"] == "json schema" and stats["finish_reason"] == "stop"
    assert stats["mask_ms"] > 0
