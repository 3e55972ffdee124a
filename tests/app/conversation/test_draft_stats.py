"""Speculative decoding's counts reach every turn's stats, and add up across a continued reply.

The backend is the scripted one with the draft counts a speculating engine puts in
its generation's stats (backends.base.GenerationStats.draft); the real engine's
counts are tested in tests/backends/test_speculative.py.
"""
from __future__ import annotations

from app.conversation.session import ChatSession
from backends.base import DraftCounts, SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template


class DraftingBackend(ScriptedBackend):
    """Reports fixed draft counts for every reply, as a speculating engine would."""

    def __init__(self, script, counts: DraftCounts | None) -> None:
        super().__init__(script)
        self.counts = counts

    def generate(self, prompt_ids, sampling, stop_ids, on_progress=None):
        # the counts are current whenever an id is yielded: the session stops reading at the stop id,
        # so counts sent only after the last id would never be seen
        generation = super().generate(prompt_ids, sampling, stop_ids, on_progress)
        generation.stats.draft = self.counts
        return generation


def _session(smollm_path, backend, max_tokens=64):
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(smollm_path)
    template, _ = resolve_template("auto", tokenizer)
    return tokenizer, ChatSession(tokenizer, template, backend=backend, context_size=2048,
                                  sampling=SamplingParams(temperature=0, max_tokens=max_tokens))


def test_a_turn_carries_the_engines_draft_counts(smollm_path):
    from tokenizer import load_tokenizer

    reply = load_tokenizer(smollm_path).encode("Paris is the capital.") + [2]
    _, session = _session(smollm_path, DraftingBackend(reply, DraftCounts(drafted=9, accepted=6)))
    stats = [e for e in session.send("Capital of France?") if e.kind == "done"][-1].stats
    assert (stats.drafted_tokens, stats.accepted_tokens) == (9, 6)
    assert stats.completion_tokens == len(reply)  # drafts change nothing in the counts


def test_no_speculation_is_zero_and_zero(smollm_path):
    from tokenizer import load_tokenizer

    reply = load_tokenizer(smollm_path).encode("Paris.") + [2]
    _, session = _session(smollm_path, DraftingBackend(reply, None))
    stats = [e for e in session.send("Capital of France?") if e.kind == "done"][-1].stats
    assert (stats.drafted_tokens, stats.accepted_tokens) == (0, 0)


def test_a_continued_reply_adds_both_parts_counts(smollm_path):
    from tokenizer import load_tokenizer

    words = load_tokenizer(smollm_path).encode(" one two three four five six seven eight nine ten" * 3)
    backend = DraftingBackend(words, DraftCounts(drafted=5, accepted=4))
    _, session = _session(smollm_path, backend, max_tokens=8)
    list(session.send("Count."))
    assert session.messages[-1].finish_reason == "length"
    backend.counts = DraftCounts(drafted=7, accepted=2)
    events = list(session.continue_reply())
    stats = [e for e in events if e.kind == "done"][-1].stats
    assert (stats.drafted_tokens, stats.accepted_tokens) == (12, 6)
    assert [(p["drafted_tokens"], p["accepted_tokens"]) for p in stats.parts] == [(5, 4), (7, 2)]


def test_a_real_engines_counts_reach_a_reply_that_ends_at_its_stop_id(qwen_path, tmp_path):
    """The session stops reading at the stop id: counts sent only after the last id would be lost."""
    from backends.base import LoadOptions
    from backends.engine_client import HostedBackend
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(qwen_path)
    template, _ = resolve_template("auto", tokenizer)
    backend = HostedBackend("llama.cpp")
    backend.load(qwen_path, LoadOptions(n_ctx=2048, speculative="ngram", log_path=tmp_path / "engine.log"))
    try:
        session = ChatSession(tokenizer, template, backend=backend, context_size=2048,
                              sampling=SamplingParams(temperature=0, max_tokens=200))
        stats = [e for e in session.send("Repeat this list exactly, one item a line: apple, pear, plum, fig, "
                                         "kiwi, lime, date, grape, mango, peach.") if e.kind == "done"][-1].stats
        assert stats.finish_reason == "stop"
        assert 0 < stats.accepted_tokens <= stats.drafted_tokens
        assert stats.accepted_tokens < stats.completion_tokens
    finally:
        backend.close()
