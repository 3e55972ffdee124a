"""The engine's KV state kept on disk (backends.state_cache, backends.state_keeper), on real engines and files.

The engines are the real llama.cpp on SmolLM2, in their own processes as tokchat
runs them; the state files are the ones those engines wrote.  A restored reply is
compared id for id with the reply of an engine that never exited; damaged files
(every truncation point class, bit flips all through a real file, a file of
another model or build) are refused with a reason and the prompt is evaluated; an engine
restarted after a crash (a real SIGKILL) loads what its predecessor saved.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from backends.base import LoadOptions, SamplingParams
from backends.engine_client import HostedBackend
from backends.state_cache import MAGIC, StateCache, StateKey, read_saved
from backends.state_keeper import StateKeeper, state_key

GREEDY = SamplingParams(temperature=0, max_tokens=24, repeat_penalty=1.0)
#: a first message long enough to be worth keeping (backends.state_keeper.MIN_IDS)
LONG_QUESTION = ("Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour and water at {20 + d % 5} degrees; "
    f"it rose {d % 3 + 1} times."
    for d in range(1, 15)) + " What should I change to make it rise faster?")


def _hosted(path: Path, tmp_path: Path, state_dir: Path | None, name: str) -> HostedBackend:
    backend = HostedBackend("llama.cpp")
    backend.load(path, LoadOptions(n_ctx=2048, log_path=tmp_path / f"{name}.log", state_dir=state_dir))
    return backend


def _turns(vocab):
    """The first turn's prompt, and a function giving the second turn's prompt from the first reply."""
    first = vocab.chat(LONG_QUESTION)

    def second(reply: list[int]) -> list[int]:
        # the reply ends with its stop id; the template then opens the next user turn
        return first + reply + vocab.ids("\n") + vocab.chat("And in two words?")

    return first, second


def _state_files(state_dir: Path) -> list[Path]:
    return sorted(state_dir.rglob("*.kv"))


def test_a_reply_after_a_restore_is_the_reply_of_an_engine_that_never_exited(smollm_path, vocab, tmp_path):
    state_dir = tmp_path / "state"
    first, second = _turns(vocab)
    stops = {vocab.eos}
    never_exited = _hosted(smollm_path, tmp_path, None, "never-exited")
    try:
        reply1 = list(never_exited.generate(first, GREEDY, stops))
        prompt2 = second(reply1)
        reference = never_exited.generate(prompt2, GREEDY, stops)
        expected = list(reference)
    finally:
        never_exited.close()

    saver = _hosted(smollm_path, tmp_path, state_dir, "saver")
    try:
        generation = saver.generate(first, GREEDY, stops)
        assert list(generation) == reply1
        assert generation.stats.state == "none (nothing saved for these ids)"
    finally:
        saver.close()  # the state is written after the reply; closing waits for the write (bounded)
    saved = [read_saved(path) for path in _state_files(state_dir)]
    assert [len(s.ids) for s in saved] == [len(first) + len(reply1) - 1]  # the prompt and the reply but its last id

    resumed = _hosted(smollm_path, tmp_path, state_dir, "resumed")
    try:
        generation = resumed.generate(prompt2, GREEDY, stops)
        got = list(generation)
    finally:
        resumed.close()
    assert got == expected
    loaded = len(first) + len(reply1) - 1
    assert generation.stats.state.startswith(f"loaded {loaded} ids from disk in ")
    # only what the saved state lacked was evaluated: what the engine that never exited evaluated
    assert generation.stats.prompt_evaluated == reference.stats.prompt_evaluated == len(prompt2) - loaded


def test_a_damaged_state_file_is_refused_with_its_reason_and_the_prompt_is_evaluated(smollm_path, vocab, tmp_path):
    state_dir = tmp_path / "state"
    first, second = _turns(vocab)
    stops = {vocab.eos}
    saver = _hosted(smollm_path, tmp_path, state_dir, "saver")
    try:
        reply1 = list(saver.generate(first, GREEDY, stops))
        expected = list(saver.generate(second(reply1), GREEDY, stops))
    finally:
        saver.close()
    [path] = _state_files(state_dir)  # the second turn's state superseded the first's
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10  # one bit of one value in the KV cache
    path.write_bytes(data)

    resumed = _hosted(smollm_path, tmp_path, state_dir, "resumed")
    try:
        prompt2 = second(reply1)
        generation = resumed.generate(prompt2, GREEDY, stops)
        got = list(generation)
    finally:
        resumed.close()
    assert generation.stats.state == "none (corrupt state (checksum))"
    assert generation.stats.prompt_evaluated == len(prompt2)
    assert got == expected
    # the refused file was deleted, and the engine saved the same ids' state again, whole this time
    saved = read_saved(path)
    assert len(StateCache(state_dir, 1 << 30).read_payload(saved)) == saved.payload_bytes


def _engine_and_file(smollm_path: Path, vocab, root: Path):
    from backends.llama_engine import EngineParams, LlamaEngine

    params = EngineParams(n_ctx=1024, n_threads=1)
    engine = LlamaEngine(smollm_path, params)
    keeper = StateKeeper(StateCache(root, 1 << 30), state_key(smollm_path, params, "CPU"), "SmolLM2")
    prompt = vocab.chat(LONG_QUESTION)
    engine.decode(prompt[:-1])
    keeper.keep(engine)
    keeper.flush(60)
    [path] = _state_files(root)
    return engine, keeper, prompt, path


def test_truncated_and_bit_flipped_state_files_are_all_refused(smollm_path, vocab, tmp_path):
    """A fuzz loop over one real state file: every truncation class and 60 bit flips spread through the file
    (magic, header, ids, KV payload) are refused with a reason before llama.cpp reads a byte, and the
    engine's cache is left empty for the prompt to be evaluated; the untouched file loads."""
    engine, keeper, prompt, path = _engine_and_file(smollm_path, vocab, tmp_path / "state")
    try:
        good = path.read_bytes()
        saved = read_saved(path)
        header_end = saved.payload_offset - 4 * len(saved.ids)
        cuts = sorted({0, 5, len(MAGIC) + 3, header_end - 7, header_end + 9, saved.payload_offset,
                       saved.payload_offset + saved.payload_bytes // 2, len(good) - 1})
        rng = random.Random(45)
        flips = [rng.randrange(len(good)) for _ in range(40)] + [rng.randrange(saved.payload_offset) for _ in range(20)]
        cases = [("cut", n) for n in cuts] + [("flip", n) for n in flips]
        reasons = set()
        for kind, at in cases:
            damaged = bytearray(good[:at]) if kind == "cut" else bytearray(good)
            if kind == "flip":
                damaged[at] ^= 1 << rng.randrange(8)
            path.write_bytes(damaged)
            engine.truncate(0)
            note = keeper.restore(engine, prompt)
            assert note.startswith("none (") and note != "none (nothing saved for these ids)", (kind, at, note)
            assert engine.tokens == [], (kind, at)
            assert not path.exists(), (kind, at)  # a refused file is deleted
            reasons.add(note)
        # the reasons say what was wrong, in a few words
        assert {"none (truncated)", "none (corrupt state (checksum))", "none (corrupt ids (checksum))",
                "none (corrupt header (checksum))", "none (not a tokchat state file)"} <= reasons, reasons
        path.write_bytes(good)
        assert keeper.restore(engine, prompt).startswith(f"loaded {len(prompt) - 1} ids from disk in ")
        assert engine.tokens == prompt[:-1]
    finally:
        engine.close()


def test_a_state_file_of_another_model_or_build_is_refused(smollm_path, qwen_path, vocab, tmp_path):
    from backends.llama_engine import EngineParams

    engine, keeper, prompt, path = _engine_and_file(smollm_path, vocab, tmp_path / "state")
    try:
        params = EngineParams(n_ctx=1024, n_threads=1)
        no_flash = keeper.key.layout.replace("flash_attn=auto", "flash_attn=off")
        for other, reason in ((state_key(qwen_path, params, "CPU"), "saved for another model file"),
                              (replace(keeper.key, build="another-build"), "saved by another engine build"),
                              (replace(keeper.key, layout=no_flash), "saved with other context parameters")):
            stranger = StateKeeper(keeper.cache, other)
            folder = keeper.cache.folder(other)
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, folder / path.name)  # the file lies where the other key looks
            engine.truncate(0)
            note = stranger.restore(engine, prompt)
            assert note.startswith(f"none ({reason}"), note
            assert engine.tokens == []
            assert not (folder / path.name).exists()
    finally:
        engine.close()


def _key(n: int) -> StateKey:
    return StateKey(model=f"model{n}", build="build", layout="layout")


def test_the_cache_keeps_the_longest_prefix_and_the_most_recently_used_under_its_cap(tmp_path):
    cache = StateCache(tmp_path, max_bytes=3 << 20)
    key = _key(1)
    short = cache.write(key, list(range(200)), bytes(1 << 20))
    longer = cache.write(key, list(range(300)), bytes(1 << 20))
    assert not short.exists() and longer.exists()  # the longer state serves every prompt the shorter did
    match, refused = cache.best(key, list(range(250)) + [7, 7], limit=251)
    assert match is not None and match.usable == 250 and refused == ""
    other = cache.write(key, [5] * 200, bytes(1 << 20))  # another conversation: both are kept
    assert longer.exists() and other.exists()
    cache.read_payload(match.saved)  # a load is a use: the oldest write is now the most recently used
    third = cache.write(_key(2), [9] * 200, bytes(1 << 20))
    assert longer.exists() and third.exists() and not other.exists()  # over 3 MiB: the least recently used went
    assert not list(tmp_path.rglob("*.tmp"))
    sizes = longer.stat().st_size + third.stat().st_size
    assert cache.total_bytes() == sizes
    assert cache.clear() == (2, sizes)
    assert cache.entries() == [] and cache.total_bytes() == 0


def test_an_engine_restarted_after_a_crash_loads_the_state_its_predecessor_saved(smollm_path, vocab, tmp_path):
    state_dir = tmp_path / "state"
    first, second = _turns(vocab)
    stops = {vocab.eos}
    backend = _hosted(smollm_path, tmp_path, state_dir, "crashing")
    try:
        reply1 = list(backend.generate(first, GREEDY, stops))
        deadline = time.monotonic() + 120
        while not _state_files(state_dir) and time.monotonic() < deadline:  # written beside the engine's loop
            time.sleep(0.05)
        os.kill(backend.pid, signal.SIGKILL)  # the engine dies while idle
        prompt2 = second(reply1)
        generation = backend.generate(prompt2, GREEDY, stops)
        list(generation)
    finally:
        backend.close()
    assert "died of SIGKILL" in generation.stats.notice and "started again" in generation.stats.notice
    loaded = len(first) + len(reply1) - 1
    assert generation.stats.state.startswith(f"loaded {loaded} ids from disk in ")
    assert generation.stats.prompt_evaluated == len(prompt2) - loaded
