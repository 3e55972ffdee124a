"""llama-server's slots saved to its disk and restored in a later run (issue 45, item 5); what the other
engines keep, said once.

Real parts: ``llama-server`` processes (:mod:`remote_servers`) on SmolLM2, started with and without
``--slot-save-path``, stopped and started again on the same folder as a user restarts a server; the
slot files they write; tokchat's remote backend connected as a chat connects it (:func:`connect`,
states on).  The oracle of a restored turn is the same turn answered by the server that never
stopped (its slot held the same cache in memory), greedy, id for id; the ids evaluated are the
server's own count (``timings.prompt_n``).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from support.remote_servers import LlamaServer

from backends.base import GenerationStats, LoadOptions, SamplingParams
from backends.remote import RemoteBackend, RemoteSettings
from backends.remote_connect import connect
from backends.remote_llamacpp import LlamaCppAdapter
from backends.remote_sglang import SGLangAdapter
from backends.remote_slots import SlotIndex, SlotKeeper, server_state
from backends.remote_vllm import VLLMAdapter
from tokenizer import load_tokenizer

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, seed=7)
NOTES = "Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour; it rose {d % 3 + 1} times." for d in range(1, 10))
NEXT = "<|im_end|>\n<|im_start|>user\nAnd in two words?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer(smollm_path):
    return load_tokenizer(smollm_path)


def server(model: Path, tmp_path: Path, slots: Path | None) -> LlamaServer:
    extra = ("--slot-save-path", str(slots)) if slots is not None else ()
    return LlamaServer(model, tmp_path, ctx=1024, extra=extra).start()


def turn(backend: RemoteBackend, prompt: list[int], stop: int) -> tuple[list[int], GenerationStats]:
    generation = backend.generate(prompt, GREEDY, {stop})
    ids = list(generation)
    return ids, generation.stats


def im_end(tokenizer) -> int:
    (tid,) = tokenizer.encode("<|im_end|>", special=True)
    return tid


def first_prompt(tokenizer) -> list[int]:
    return tokenizer.encode(f"<|im_start|>user\n{NOTES}<|im_end|>\n<|im_start|>assistant\n", special=True)


def test_a_restored_slot_evaluates_only_the_rest_and_replies_as_the_server_that_kept_it(
        smollm_path, tokenizer, tmp_path):
    slots, states = tmp_path / "slots", tmp_path / "state"
    slots.mkdir()
    stop = im_end(tokenizer)
    prompt = first_prompt(tokenizer)
    kept = server(smollm_path, tmp_path, slots)
    try:
        first = connect(RemoteSettings(url=kept.url), tokenizer, str(smollm_path), state_dir=states)
        reply, stats = turn(first, prompt, stop)
        first.close()  # the slot's save, sent after the reply, is waited for a bounded while
        assert stats.state == "none (nothing saved for these ids)"
        saved = len(prompt) + len(reply) - 1  # the reply's last id is never evaluated
        follow = prompt + reply + tokenizer.encode(NEXT, special=True)
        # the oracle: the server that never stopped answers the next turn from the cache it still holds
        oracle = connect(RemoteSettings(url=kept.url), tokenizer, str(smollm_path), state_dir=None)
        expected, in_memory = turn(oracle, follow, stop)
        oracle.close()
        assert in_memory.prompt_evaluated == len(follow) - saved
        # the server's file (saved before it took the oracle's turn) and tokchat's record of its ids
        assert isinstance(first.state, SlotKeeper)
        (entry,) = first.state.index.entries()
        assert [p.name for p in slots.iterdir()] == [entry.filename] and len(entry.ids) == saved
    finally:
        kept.stop()

    again = server(smollm_path, tmp_path, slots)  # a new server process on the same folder, another port
    try:
        resumed = connect(RemoteSettings(url=again.url), tokenizer, str(smollm_path), state_dir=states)
        got, stats = turn(resumed, follow, stop)
        resumed.close()
    finally:
        again.stop()
    assert stats.state.startswith(f"loaded {saved} ids from disk in "), stats.state
    assert stats.prompt_evaluated == len(follow) - saved  # the server's own count: only the rest
    assert got == expected


def test_a_server_without_slot_save_path_is_said_once_and_nothing_is_kept(smollm_path, tokenizer, tmp_path):
    plain = server(smollm_path, tmp_path, None)
    try:
        backend = connect(RemoteSettings(url=plain.url), tokenizer, str(smollm_path), state_dir=tmp_path / "state")
        prompt = first_prompt(tokenizer)
        reply, first = turn(backend, prompt, im_end(tokenizer))
        _, second = turn(backend, prompt + reply + tokenizer.encode(NEXT, special=True), im_end(tokenizer))
        backend.close()
    finally:
        plain.stop()
    assert first.state == LlamaCppAdapter.state_note
    assert "keeps nothing between its runs" in first.state and "--slot-save-path" in first.state
    assert second.state == ""  # once
    assert not (tmp_path / "state").exists()


def test_a_deleted_slot_file_is_a_note_and_the_prompt_is_evaluated(smollm_path, tokenizer, tmp_path):
    slots, states = tmp_path / "slots", tmp_path / "state"
    slots.mkdir()
    prompt = first_prompt(tokenizer)
    first_server = server(smollm_path, tmp_path, slots)
    try:
        first = connect(RemoteSettings(url=first_server.url), tokenizer, str(smollm_path), state_dir=states)
        reply, _ = turn(first, prompt, im_end(tokenizer))
        first.close()
    finally:
        first_server.stop()
    (saved_file,) = slots.iterdir()
    saved_file.unlink()
    follow = prompt + reply + tokenizer.encode(NEXT, special=True)
    again = server(smollm_path, tmp_path, slots)
    try:
        resumed = connect(RemoteSettings(url=again.url), tokenizer, str(smollm_path), state_dir=states)
        got, stats = turn(resumed, follow, im_end(tokenizer))
        resumed.close()
    finally:
        again.stop()
    assert stats.state.startswith(f"none (llama-server could not restore {saved_file.name}: "), stats.state
    assert "Unable to restore slot" in stats.state
    assert stats.prompt_evaluated == len(follow) and got  # evaluated as without a saved slot, and answered
    assert list((states / "llama-server").glob("*/*.json")) != []  # this reply's own save, recorded again


def test_a_branch_writes_over_its_parents_file_and_the_other_branch_reuses_only_what_it_shares(
        smollm_path, tokenizer, tmp_path):
    """One file per branch on the server's disk: a turn that extends the saved ids writes over their file.  A
    sibling branch resumed later restores that file, which holds the other branch's ids: the server compares
    them with the prompt itself and reuses only the shared prefix, and the reply is the one of the server that
    held the same cache in memory."""
    slots, states = tmp_path / "slots", tmp_path / "state"
    slots.mkdir()
    stop = im_end(tokenizer)
    prompt = first_prompt(tokenizer)
    branch = tokenizer.encode(NEXT.replace("And in two words?", "Which flour is best?"), special=True)
    kept = server(smollm_path, tmp_path, slots)
    try:
        first = connect(RemoteSettings(url=kept.url), tokenizer, str(smollm_path), state_dir=states)
        reply, _ = turn(first, prompt, stop)
        first.close()
        (parent,) = slots.iterdir()
        other = connect(RemoteSettings(url=kept.url), tokenizer, str(smollm_path), state_dir=states)
        other_reply, _ = turn(other, prompt + reply + branch, stop)
        other.close()
        follow = prompt + reply + tokenizer.encode(NEXT, special=True)
        oracle = connect(RemoteSettings(url=kept.url), tokenizer, str(smollm_path), state_dir=None)
        expected, in_memory = turn(oracle, follow, stop)  # from the other branch's cache, held in memory
        oracle.close()
    finally:
        kept.stop()
    assert list(slots.iterdir()) == [parent]  # written over, not beside
    (entry,) = (states / "llama-server").glob("*/*.json")
    assert entry.name == f"{parent.name}.json"

    again = server(smollm_path, tmp_path, slots)
    try:
        resumed = connect(RemoteSettings(url=again.url), tokenizer, str(smollm_path), state_dir=states)
        got, stats = turn(resumed, follow, stop)
        resumed.close()
    finally:
        again.stop()
    shared = next(i for i, (a, b) in enumerate(zip(prompt + reply + branch, follow)) if a != b)
    assert stats.state.startswith(f"loaded {shared} ids from disk in "), stats.state
    assert stats.prompt_evaluated == in_memory.prompt_evaluated == len(follow) - shared
    assert got == expected


def test_the_slot_index_names_one_file_per_branch_and_drops_what_it_cannot_read(tmp_path):
    index = SlotIndex(tmp_path, "model\0identity")
    parent = index.record([1, 2, 3], slot=0)
    child = index.record([1, 2, 3, 4, 5], slot=0)
    sibling = index.record([1, 2, 9], slot=1)
    assert child.filename == parent.filename and sibling.filename != parent.filename
    assert sorted(e.ids for e in index.entries()) == [(1, 2, 3, 4, 5), (1, 2, 9)]  # the parent's entry went
    assert index.best([1, 2, 3, 4, 7], limit=4) == (child, 4)
    assert index.best([1, 2, 9, 9], limit=3) == (sibling, 3)
    assert SlotIndex(tmp_path, "another model").best([1, 2, 3, 4, 7], limit=4) == (None, 0)
    child.path.write_text('{"key": "model\\0identity", "ids": [1, 2')  # torn
    assert [e.ids for e in index.entries()] == [(1, 2, 9)] and not child.path.exists()


@pytest.mark.parametrize("adapter, words", [(VLLMAdapter(), "vLLM keeps a prefix cache in memory across requests"),
                                            (SGLangAdapter(), "SGLang keeps a prefix cache in memory across requests")])
def test_vllm_and_sglang_say_what_they_keep_once(adapter, words, tmp_path):
    """No vLLM or SGLang server runs here (no GPU): the state they get at connect, asked as a turn asks it."""
    from backends.remote_protocol import Request

    backend = RemoteBackend(RemoteSettings(url="http://127.0.0.1:9"), adapter)
    try:
        state = server_state(backend, tmp_path / "state")
        first, second = GenerationStats(), GenerationStats()
        request = Request("POST", "/x", {})
        assert state.prepare([1, 2], request, first) is request
        state.prepare([1, 2, 3], request, second)
    finally:
        backend.close()
    assert first.state == f"none on disk ({words}, until it restarts)"
    assert second.state == ""
    off = server_state(RemoteBackend(RemoteSettings(url="http://127.0.0.1:9"), adapter), None)
    quiet = GenerationStats()
    off.prepare([1], Request("POST", "/x", {}), quiet)
    assert quiet.state == ""  # states off (--no-state): nothing said


def test_openvino_says_once_that_it_keeps_nothing_between_runs(smollm_path, tmp_path):
    """In its engine process, as tokchat runs it: the note crosses the wire with the reply."""
    from backends.engine_client import HostedBackend
    from backends.openvino import STATE_NOTE

    backend = HostedBackend("openvino")
    backend.load(smollm_path, LoadOptions(backend="openvino", state_dir=tmp_path / "state",
                                          log_path=tmp_path / "engine.log"))
    try:
        notes = []
        for question in ("Hi", "And again?"):
            generation = backend.generate(load_tokenizer(smollm_path).encode(question), GREEDY, set())
            list(generation)
            notes.append(generation.stats.state)
    finally:
        backend.close()
    assert notes == [STATE_NOTE, ""] and STATE_NOTE == "none (OpenVINO keeps nothing between runs)"
