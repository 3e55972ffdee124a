"""A reply format on a server (issue 46, item 3): llama-server gets ``json_schema`` / ``grammar``, vLLM
``structured_outputs``, SGLang ``json_schema`` / ``regex`` / ``ebnf``; tokchat checks what comes back.

The llama-server tests start the real ``llama-server`` built from the same llama.cpp (Qwen2.5-Coder-0.5B)
and run ``python -m app --server URL`` as a user would.  llama-server turns a JSON Schema into GBNF
itself and leaves out what its converter does not know: ``multipleOf`` is such a keyword, so its reply
can break the schema, and tokchat says so in one line, where the local engine (llguidance) holds it.
vLLM and SGLang cannot run here: their request bodies are checked field by field.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from support.process_env import child_env
from support.remote_servers import LlamaServer

from backends.base import BackendError, SamplingParams
from backends.constraint import parse_constraint
from backends.remote_llamacpp import LlamaCppAdapter
from backends.remote_sglang import SGLangAdapter
from backends.remote_vllm import VLLMAdapter

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
#: a multiple of 3 (a spider has 8 legs): llguidance enforces ``multipleOf``, llama-server's converter leaves it out
MULTIPLE = {"type": "integer", "minimum": 0, "maximum": 30, "multipleOf": 3}


def _body(adapter, constraint) -> dict:
    return adapter.completion([1, 2, 3], SamplingParams(constraint=constraint), [2], 7).body


def test_llama_server_gets_the_schema_or_a_gbnf_grammar_and_refuses_the_rest_in_one_line():
    adapter = LlamaCppAdapter()
    assert _body(adapter, parse_constraint("json_schema", json.dumps(PERSON)))["json_schema"] == PERSON
    assert _body(adapter, parse_constraint("json"))["json_schema"] == {}
    assert _body(adapter, parse_constraint("grammar", 'root ::= "yes" | "no"'))["grammar"] == 'root ::= "yes" | "no"'
    assert "json_schema" not in _body(adapter, None) and "grammar" not in _body(adapter, None)
    for kind, source in (("regex", r"\d+"), ("grammar", 'start: "yes" | "no"')):
        with pytest.raises(BackendError, match="llama-server takes no .*: give it as a GBNF --grammar") as refused:
            _body(adapter, parse_constraint(kind, source))
        assert "\n" not in str(refused.value)


def test_vllm_and_sglang_get_the_constraint_in_their_own_fields():
    schema = parse_constraint("json_schema", json.dumps(PERSON))
    assert _body(VLLMAdapter(), schema)["structured_outputs"] == {"json": PERSON}
    assert _body(VLLMAdapter(), parse_constraint("regex", r"\d+"))["structured_outputs"] == {"regex": r"\d+"}
    sglang = _body(SGLangAdapter(), schema)["sampling_params"]
    assert json.loads(sglang["json_schema"]) == PERSON
    assert _body(SGLangAdapter(), parse_constraint("regex", r"\d+"))["sampling_params"]["regex"] == r"\d+"
    ebnf = _body(SGLangAdapter(), parse_constraint("grammar", 'root ::= "a"'))["sampling_params"]
    assert ebnf["ebnf"] == 'root ::= "a"'
    assert "structured_outputs" not in _body(VLLMAdapter(), None)


@pytest.fixture(scope="module")
def server(qwen_path, tmp_path_factory):
    running = LlamaServer(qwen_path, tmp_path_factory.mktemp("server"), ctx=1024).start()
    yield running
    running.stop()


def _tokchat(tmp_path: Path, model: Path, *args: str, prompt: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app", "-m", str(model), "--prompt", prompt, "--temperature", "0", "--stats", *args],
        cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=600)


@pytest.mark.slow
def test_a_schema_sent_to_llama_server_gives_a_reply_that_validates(server, qwen_path, tmp_path):
    done = _tokchat(tmp_path, qwen_path, "--server", server.url, "--json-schema", json.dumps(PERSON),
                    "--max-tokens", "64", prompt="Describe a fictional programmer.")
    assert done.returncode == 0, done.stderr
    jsonschema.validate(json.loads(done.stdout), PERSON)
    stats = json.loads(done.stderr.rstrip("\n").split("\n")[-1])
    assert stats["constraint"] == "json schema" and stats["backend"] == "remote" and stats["mask_ms"] == 0
    assert "does not conform" not in done.stderr


@pytest.mark.slow
def test_a_server_reply_that_breaks_the_schema_is_said_in_one_line(server, qwen_path, tmp_path):
    ask = "How many legs does a spider have? Answer with the number."
    done = _tokchat(tmp_path, qwen_path, "--server", server.url, "--json-schema", json.dumps(MULTIPLE),
                    "--max-tokens", "16", prompt=ask)
    assert done.returncode == 0, done.stderr
    value = json.loads(done.stdout)
    assert value % 3 != 0  # the server left multipleOf out
    lines = done.stderr.rstrip("\n").split("\n")
    said = [line for line in lines if "does not conform" in line]
    assert said == [f"tokchat: the reply from llamacpp at 127.0.0.1:{server.port} does not conform: the reply does "
                    f"not match the schema at the top level: {value} is not a multiple of 3"], done.stderr
    # the local engine holds the same schema
    local = _tokchat(tmp_path, qwen_path, "--json-schema", json.dumps(MULTIPLE), "--max-tokens", "16", prompt=ask)
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout) % 3 == 0 and json.loads(local.stderr.splitlines()[-1])["finish_reason"] == "stop"
    assert "does not" not in local.stderr and "incomplete" not in local.stderr
