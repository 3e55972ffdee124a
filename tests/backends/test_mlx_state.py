"""Instant resume on MLX (issue 45): mlx-lm's prompt cache kept on disk, keyed and checked as llama.cpp's states are.

The engines are the real MLX (``mlx[cpu]``) on SmolLM2's Q4_1 GGUF, in their own
processes as tokchat runs them (:class:`backends.engine_client.HostedBackend`);
the state files are the ones those engines wrote.  A reply after a restore is
compared id for id with the reply of an engine that never exited; a damaged file
is refused with its reason and the prompt evaluated; a file whose checksums hold
but whose payload MLX cannot use (not a prompt-cache file, another id count,
another shape) is refused by MLX's own check before it replaces the cache.
"""
from __future__ import annotations

import json
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from backends.base import LoadOptions, SamplingParams
from backends.engine_client import HostedBackend
from backends.state_cache import StateCache, read_saved

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0, max_tokens=12, repeat_penalty=1.0)
#: a first message whose state is worth keeping (backends.state_keeper.MIN_IDS: 128 ids with the reply),
#: no longer: MLX on this CPU evaluates a few ids a second when the machine is shared
NOTES = "Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour; it rose {d % 3 + 1} times." for d in range(1, 6)
) + " What should I change?"


def _hosted(path: Path, tmp_path: Path, state_dir: Path | None, name: str) -> HostedBackend:
    backend = HostedBackend("mlx")
    backend.load(path, LoadOptions(n_ctx=1024, log_path=tmp_path / f"{name}.log", state_dir=state_dir))
    return backend


def _state_files(state_dir: Path) -> list[Path]:
    return sorted(state_dir.rglob("*.kv"))


@dataclass
class Saved:
    """What an MLX engine that never exited did over two turns, and the state its first turn left on disk."""

    first: list[int]
    reply1: list[int]
    prompt2: list[int]
    expected: list[int]
    #: prompt ids the engine that never exited evaluated for the second turn
    evaluated: int
    #: a copy of the state folder as the first turn left it
    snapshot: Path


@pytest.fixture(scope="module")
def saved(smollm_path, vocab, tmp_path_factory) -> Saved:
    tmp = tmp_path_factory.mktemp("mlx-state")
    state_dir = tmp / "state"
    first = vocab.chat(NOTES)
    stops = {vocab.eos}
    never_exited = _hosted(smollm_path, tmp, state_dir, "never-exited")
    try:
        generation = never_exited.generate(first, GREEDY, stops)
        reply1 = list(generation)
        assert generation.stats.state == "none (nothing saved for these ids)"
        deadline = time.monotonic() + 120
        while not _state_files(state_dir) and time.monotonic() < deadline:  # written beside the engine's loop
            time.sleep(0.05)
        snapshot = tmp / "snapshot"
        shutil.copytree(state_dir, snapshot)
        prompt2 = first + reply1 + vocab.ids("\n") + vocab.chat("And in two words?")
        reference = never_exited.generate(prompt2, GREEDY, stops)
        expected = list(reference)
        assert reference.stats.state == ""  # the engine's own cache served the second turn
    finally:
        never_exited.close()
    return Saved(first, reply1, prompt2, expected, reference.stats.prompt_evaluated, snapshot)


def test_a_reply_after_a_restore_is_the_reply_of_an_mlx_engine_that_never_exited(saved, smollm_path, vocab,
                                                                                 tmp_path):
    [path] = _state_files(saved.snapshot)
    kept = read_saved(path)
    loaded = len(saved.first) + len(saved.reply1) - 1  # the prompt and the reply but its last id
    assert len(kept.ids) == loaded and list(kept.ids) == (saved.first + saved.reply1)[:loaded]
    assert "mlx" in kept.key.build and "engine=mlx" in kept.key.layout

    state_dir = tmp_path / "state"
    shutil.copytree(saved.snapshot, state_dir)
    resumed = _hosted(smollm_path, tmp_path, state_dir, "resumed")
    try:
        generation = resumed.generate(saved.prompt2, GREEDY, {vocab.eos})
        got = list(generation)
    finally:
        resumed.close()
    assert got == saved.expected
    assert generation.stats.state.startswith(f"loaded {loaded} ids from disk in "), generation.stats.state
    # only what the saved state lacked was evaluated: what the engine that never exited evaluated
    assert generation.stats.prompt_evaluated == saved.evaluated == len(saved.prompt2) - loaded


def test_a_damaged_mlx_state_is_refused_with_its_reason_and_the_prompt_is_evaluated(saved, smollm_path, vocab,
                                                                                    tmp_path):
    state_dir = tmp_path / "state"
    shutil.copytree(saved.snapshot, state_dir)
    [path] = _state_files(state_dir)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10  # one bit of one value of the last layer's cache
    path.write_bytes(data)
    resumed = _hosted(smollm_path, tmp_path, state_dir, "resumed")
    try:
        generation = resumed.generate(saved.prompt2, GREEDY, {vocab.eos})
        got = list(generation)
    finally:
        resumed.close()  # waits (bounded) for the new state's write
    assert generation.stats.state == "none (corrupt state (checksum))"
    assert generation.stats.prompt_evaluated == len(saved.prompt2)
    assert got  # answered from the text
    # the refused file was deleted, and the engine saved this turn's state, whole
    [again] = _state_files(state_dir)
    rewritten = read_saved(again)
    assert len(rewritten.ids) > len(saved.first)
    assert len(StateCache(state_dir, 1 << 30).read_payload(rewritten)) == rewritten.payload_bytes


def _safetensors_edit(payload: bytes, edit) -> bytes:
    """``payload`` (a safetensors file) with its JSON header changed by ``edit`` (in place on the dict)."""
    (size,) = struct.unpack("<Q", payload[:8])
    header = json.loads(payload[8:8 + size])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + payload[8 + size:]


def test_a_payload_mlx_cannot_use_is_refused_by_mlx_before_it_replaces_the_cache(saved, smollm_path, tmp_path):
    """Files whose tokchat checksums hold (so only MLX's own check can refuse them): not a prompt-cache file,
    a prompt-cache file that says another id count, keys of another shape.  Each is refused, the cache is left
    empty and the file deleted; the untouched payload then loads."""
    from backends.mlx import clear_thread_streams
    from backends.mlx_cache import MLXPromptCache, mlx_state_key
    from backends.mlx_gguf import load_gguf_model
    from backends.model_meta import read_model_meta
    from backends.state_keeper import StateKeeper

    [path] = _state_files(saved.snapshot)
    kept = read_saved(path)
    good = bytes(StateCache(saved.snapshot, 1 << 30).read_payload(kept))

    def other_ids(header: dict) -> None:
        header["__metadata__"]["0.tokchat_ids"] = "7"

    def other_heads(header: dict) -> None:
        shape = header["0.0"]["shape"]  # the first layer's keys: (1, heads, ids, width)
        header["0.0"]["shape"] = [1, 1, shape[1] * shape[2], shape[3]]

    cache = StateCache(tmp_path / "state", 1 << 30)
    prompt = list(kept.ids) + [2]
    model = load_gguf_model(read_model_meta(smollm_path))
    try:
        engine = MLXPromptCache(model)
        keeper = StateKeeper(cache, mlx_state_key(smollm_path, "CPU"), "SmolLM2", engine="MLX")
        assert "0.tokchat_ids" in json.loads(good[8:8 + struct.unpack("<Q", good[:8])[0]])["__metadata__"]
        for payload in (b"not a prompt cache at all", _safetensors_edit(good, other_ids),
                        _safetensors_edit(good, other_heads)):
            written = cache.write(keeper.key, kept.ids, payload)
            note = keeper.restore(engine, prompt)
            assert note == "none (MLX refused the saved state)", note
            assert engine.tokens == []
            assert not written.exists()
        cache.write(keeper.key, kept.ids, good)
        assert keeper.restore(engine, prompt).startswith(f"loaded {len(kept.ids)} ids from disk in ")
        assert engine.tokens == list(kept.ids)
    finally:
        clear_thread_streams()
