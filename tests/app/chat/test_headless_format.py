"""``--json``, ``--json-schema``, ``--regex``, ``--grammar`` (issue 46) on a real ``python -m app`` run.

Qwen2.5-Coder-0.5B through the real llama.cpp engine process; the reply on stdout is checked here with
the ``jsonschema`` package (never with the engine that enforced it), the stats line says which
constraint ran and how long its masks took, a reply cut by ``--max-tokens`` is called incomplete, and
every bad format is one line on stderr with nothing stored in the history.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from support.process_env import child_env

ROOT = Path(__file__).resolve().parents[3]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "languages": {"type": "array", "items": {"enum": ["python", "rust", "go"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}
ASK = "Describe a fictional programmer: name, age, what they like to do on weekends."


def tokchat(tmp_path: Path, model: Path, *args: str, prompt: str = ASK) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app", "-m", str(model), "--prompt", prompt, "--temperature", "0",
         "--speculative", "off", *args],
        cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=600)


def stored_conversations(tmp_path: Path) -> int:
    """Conversations in the run's history (``$TOKCHAT_DATA_DIR/history.sqlite3``); 0 when it was never made."""
    db = tmp_path / "data" / "history.sqlite3"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as connection:
        return connection.execute("select count(*) from conversations").fetchone()[0]


@pytest.mark.slow
def test_json_schema_from_a_file_gives_a_reply_that_validates(tmp_path, qwen_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    done = tokchat(tmp_path, qwen_path, "--json-schema", str(schema), "--max-tokens", "96", "--stats")
    assert done.returncode == 0, done.stderr
    jsonschema.validate(json.loads(done.stdout), PERSON)
    stats = json.loads(done.stderr.rstrip("\n").split("\n")[-1])
    assert stats["constraint"] == "json schema" and stats["finish_reason"] == "stop"
    assert stats["mask_ms"] > 0
    assert "does not conform" not in done.stderr and "incomplete" not in done.stderr
    assert "schema" not in json.dumps(stats["sampling"])  # the schema's text is not copied into every stats line


@pytest.mark.slow
def test_the_same_prompt_without_the_schema_does_not_validate(tmp_path, qwen_path):
    """The control for the test above: the model alone answers in prose."""
    done = tokchat(tmp_path, qwen_path, "--max-tokens", "48")
    assert done.returncode == 0, done.stderr
    with pytest.raises((ValueError, jsonschema.ValidationError)):
        jsonschema.validate(json.loads(done.stdout), PERSON)


@pytest.mark.slow
def test_a_reply_cut_inside_the_value_says_it_is_incomplete(tmp_path, qwen_path):
    done = tokchat(tmp_path, qwen_path, "--json-schema", json.dumps(PERSON), "--max-tokens", "5", "--stats")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.rstrip("\n").split("\n")
    assert json.loads(lines[-1])["finish_reason"] == "length"
    assert any(line.startswith("tokchat: the reply was cut by --max-tokens inside the json schema value: it is "
                               "incomplete (finish reason length)") for line in lines[:-1]), done.stderr


@pytest.mark.slow
def test_regex_and_json_hold_the_reply(tmp_path, qwen_path):
    done = tokchat(tmp_path, qwen_path, "--regex", "(yes|no)", "--max-tokens", "8",
                   prompt="Is Rust a programming language? Explain at length.")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("yes", "no")
    done = tokchat(tmp_path, qwen_path, "--json", "--max-tokens", "64", prompt="List three colours.")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)


BAD = [
    (["--json-schema", '{"type": "nope"}'], "tokchat: the JSON Schema is not valid at type:"),
    (["--json-schema", '{"not": {"type": "string"}}'], 'tokchat: the JSON Schema cannot be used: Unimplemented keys'),
    (["--json-schema", "missing.json"], "tokchat: no JSON Schema file"),
    (["--regex", ""], "tokchat: the regex is empty"),
    (["--json-schema", '{"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}'],
     "tokchat: the JSON Schema's $ref loops"),
]


@pytest.mark.parametrize("args,line", BAD, ids=["bad-type", "unsupported", "no-file", "empty-regex", "ref-loop"])
def test_a_bad_format_is_one_line_before_any_engine_work_and_nothing_is_stored(tmp_path, smollm_path, args, line):
    done = tokchat(tmp_path, smollm_path, *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(line), done.stderr
    assert stored_conversations(tmp_path) == 0


def test_a_bad_grammar_file_and_a_huge_schema_are_one_line(tmp_path, smollm_path):
    grammar = tmp_path / "g.lark"
    grammar.write_text("start: (\n")
    done = tokchat(tmp_path, smollm_path, "--grammar", str(grammar))
    assert done.returncode == 2 and done.stderr.startswith("tokchat: the grammar cannot be used:"), done.stderr
    assert done.stderr.count("\n") == 1
    huge = tmp_path / "huge.json"
    huge.write_text('{"enum": [' + ",".join(['"' + "x" * 100 + '"'] * 102_000) + "]}")
    done = tokchat(tmp_path, smollm_path, "--json-schema", str(huge))
    assert done.returncode == 2 and done.stderr.startswith("tokchat: the JSON Schema "), done.stderr
    assert "MB: the most accepted is 1 MB" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_openvino_says_in_one_line_that_a_format_needs_another_backend(tmp_path, smollm_path):
    done = tokchat(tmp_path, smollm_path, "--backend", "openvino", "--json", "--max-tokens", "8")
    assert done.returncode == 2
    assert done.stdout == ""
    said = [line for line in done.stderr.splitlines() if "cannot hold a reply to a format" in line]
    assert said == ["tokchat: OpenVINO cannot hold a reply to a format (its pipeline exposes no logits to mask): "
                    "use the llama.cpp backend (--backend cpu) or a server for --json / --json-schema / --regex / "
                    "--grammar"], done.stderr


def test_continue_with_a_format_is_refused_in_one_line(tmp_path, smollm_path):
    done = subprocess.run(
        [sys.executable, "-m", "app", "-m", str(smollm_path), "--resume", "1", "--continue", "--json"],
        cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 2
    assert done.stderr == ("tokchat: --continue cannot hold the rest of a reply to a format yet (the grammar would "
                           "start again mid-value): continue without --json/--json-schema/--regex/--grammar\n")
