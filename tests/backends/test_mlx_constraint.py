"""Structured output on MLX (issue 46): the grammar's mask applied in the NumPy sampling chain.

Real parts: MLX (``mlx[cpu]``) on SmolLM2's Q4_1 GGUF in its own process, as tokchat
runs it (one free and one held reply, shared by the two tests: MLX is slow on this
CPU); llama.cpp as the oracle on the same weights dequantized to F32 by its own
quantize API (the exact-weights path of docs/fidelity.md, where MLX's greedy replies
are llama.cpp's); the held reply is checked with the ``jsonschema`` package, which
knows nothing of the engine that held it.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import jsonschema
import pytest

from backends.base import LoadOptions, OutputConstraint, SamplingParams
from backends.engine_client import HostedBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_fidelity import dequantized_copy  # noqa: E402

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PROMPT = "Describe a person as JSON with name, age and city."
#: tokchat's default chain (repeat penalty 1.1 over the last 64 ids), greedy: the mask comes before the penalty
FREE = SamplingParams(temperature=0, max_tokens=40)
HELD = SamplingParams(temperature=0, max_tokens=40, constraint=OutputConstraint("json_schema", json.dumps(PERSON)))
#: where the held reply is cut and continued (inside the object)
CUT = 6


@dataclass
class Reply:
    ids: list[int]
    finish_reason: str
    mask_ms: float


def _replies(engine: str, path: Path, vocab, log_dir: Path) -> dict[str, Reply]:
    """The prompt's free and held greedy replies on ``engine`` in its own process, as tokchat runs it."""
    backend = HostedBackend(engine)
    backend.load(path, LoadOptions(n_ctx=1024, log_path=log_dir / f"{engine}.log"))
    out = {}
    try:
        for name, sampling in (("free", FREE), ("held", HELD)):
            generation = backend.generate(vocab.chat(PROMPT), sampling, {vocab.eos})
            ids = list(generation)
            out[name] = Reply(ids, str(generation.stats.finish_reason), generation.stats.mask_ms)
        if engine == "mlx":  # the held reply continued after its first CUT ids, as /continue asks
            held = out["held"].ids[:CUT]
            generation = backend.generate(vocab.chat(PROMPT) + held, replace(HELD, generated_ids=CUT), {vocab.eos})
            out["continued"] = Reply(held + list(generation), str(generation.stats.finish_reason),
                                     generation.stats.mask_ms)
    finally:
        backend.close()
    return out


@pytest.fixture(scope="module")
def mlx_replies(smollm_path, vocab, tmp_path_factory) -> dict[str, Reply]:
    return _replies("mlx", smollm_path, vocab, tmp_path_factory.mktemp("mlx"))


def test_a_held_reply_on_mlx_validates_against_its_schema(mlx_replies, vocab):
    held, free = mlx_replies["held"], mlx_replies["free"]
    assert held.finish_reason == "stop", (held.finish_reason, vocab.text(held.ids))
    assert held.ids[-1] == vocab.eos
    jsonschema.validate(json.loads(vocab.text(held.ids[:-1])), PERSON)
    assert held.mask_ms > 0 and free.mask_ms == 0
    # the same model left free does not answer in this shape: the mask made the difference
    with pytest.raises((ValueError, jsonschema.ValidationError)):
        jsonschema.validate(json.loads(vocab.text([i for i in free.ids if i != vocab.eos])), PERSON)


def test_greedy_held_replies_are_the_same_on_llama_cpp_and_mlx_where_free_ones_are(mlx_replies, smollm_path, vocab,
                                                                                    tmp_path):
    exact = dequantized_copy(smollm_path, tmp_path / "smollm2-f32.gguf", tmp_path / "quantize.log")
    llama = _replies("llama.cpp", exact, vocab, tmp_path)
    texts = {f"{engine} {name}": vocab.text(reply.ids) for engine, replies in (("llama.cpp", llama),
                                                                               ("mlx", mlx_replies))
             for name, reply in replies.items()}
    # the premise: on the exact weights the free replies are the same ids (docs/fidelity.md)
    assert mlx_replies["free"].ids == llama["free"].ids, texts
    assert mlx_replies["held"].ids == llama["held"].ids, texts
    assert mlx_replies["held"].finish_reason == llama["held"].finish_reason == "stop"


def test_a_held_reply_continued_on_mlx_is_the_one_go_reply(mlx_replies, vocab):
    """The ids a continued reply holds are replayed through the matcher first (``generated_ids``), so the format
    holds from where the reply stopped: the continuation is the rest of the one-go reply, id for id."""
    assert mlx_replies["held"].finish_reason == "stop"
    assert mlx_replies["continued"].ids == mlx_replies["held"].ids, vocab.text(mlx_replies["continued"].ids)
    assert mlx_replies["continued"].finish_reason == "stop"
