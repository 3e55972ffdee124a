"""Compaction policies (drop / summarize / refuse), /pin and the meter's forecast, on the session.

The tokenizer and template are SmolLM2's real ones; replies come from the ScriptedBackend (every id
known), which also writes the summaries when the prompt is the summary instruction.  The last test runs
the real model through llama.cpp: a conversation three times the context, drop against summarize.
"""
from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

import pytest

from app.conversation.compaction import INSTRUCTION, next_send
from app.conversation.summary import active_summary, summary_first, summary_start
from app.conversation.session import ChatMessage, ChatSession
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template

FILLER = " ".join(["data"] * 40)
SAMPLING = SamplingParams(temperature=0.0, max_tokens=32)


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


@pytest.fixture
def tok(smollm_path):
    return _tokenizer(smollm_path)


def make_session(tok, policy: str, context_size: int = 400) -> tuple[ChatSession, list]:
    """A session whose replies are ``Reply N: FILLER`` and whose summaries are ``Summary K.``; the prompts the
    backend saw are kept."""
    template, _ = resolve_template("auto", tok)
    end = tok.special_tokens["<|im_end|>"]
    seen: list[list[int]] = []
    count = {"reply": 0, "summary": 0}

    def script(prompt):
        seen.append(list(prompt))
        if INSTRUCTION[:40] in tok.decode(prompt):
            count["summary"] += 1
            return tok.encode(f"Summary {count['summary']}: the user asked questions.") + [end]
        count["reply"] += 1
        return tok.encode(f"Reply {count['reply']}: {FILLER}") + [end]

    backend = ScriptedBackend(script, context_size=context_size)
    session = ChatSession(tok, template, backend=backend, system_prompt="Be brief.", sampling=SAMPLING,
                          context_size=context_size)
    session.compact_policy = policy
    return session, seen


def send(session, text):
    events = list(session.send(text))
    assert events[-1].kind == "done"
    return events


def test_drop_names_the_turns_in_the_meter_before_the_send_and_in_the_notice(tok):
    session, _ = make_session(tok, "drop")
    forecasts = []
    for n in range(5):
        forecast = next_send(session, f"Question {n}: {FILLER}")
        forecasts.append(forecast.describe())
        events = send(session, f"Question {n}: {FILLER}")
        notices = [e.text for e in events if e.kind == "notice"]
        if forecast.action == "drop":
            named = re.search(r"\((turns? [\d, -]+) now;", notices[0]).group(1)
            assert forecast.describe() == f"next send drops {named}"
        else:
            assert not notices
    assert any(f.startswith("next send drops turn") for f in forecasts), forecasts


def test_refuse_sends_nothing_and_says_how_much_must_go(tok):
    session, seen = make_session(tok, "refuse")
    n = 0
    while next_send(session, f"Question {n}: {FILLER}").action == "fits":
        send(session, f"Question {n}: {FILLER}")
        n += 1
    before, prompts = list(session.messages), len(seen)
    text = f"Question {n}: {FILLER}"
    assert next_send(session, text).describe().startswith("next send is refused: must drop turn")
    why = session.refusal(text)  # said before the send: the TUI keeps the draft, headless stores nothing
    assert why is not None and why.startswith("context full (policy refuse): about ")
    events = send(session, text)
    assert events[-1].data.refused and events[-2].kind == "error" and "turns 1-2" in events[-2].text
    assert session.messages == before and len(seen) == prompts  # nothing sent, nothing changed
    session.compact_policy = "drop"
    assert not send(session, text)[-1].data.refused


def test_a_pinned_turn_stays_in_the_prompt_whatever_the_policy(tok):
    session, _ = make_session(tok, "drop")
    send(session, "Remember: the code word is PELICAN.")
    for message in session.messages[:2]:
        message.pinned = True
    for n in range(6):
        send(session, f"Question {n}: {FILLER}")
    assert session._window > 2  # turns were dropped
    assert "PELICAN" in session.last_prompt.text and "Question 0" not in session.last_prompt.text


def test_summarize_keeps_a_stored_summary_in_the_prompt_in_place_of_the_turns(tok):
    session, seen = make_session(tok, "summarize")
    reevaluated = []
    for n in range(10):  # about three times the context
        events = send(session, f"Question {n}: {FILLER}")
        assert events[-1].data.kind == "answered"
        stats = events[-1].stats
        summaries = [e.data for e in events if e.kind == "summary"]
        if summaries:
            summary = summaries[0]
            assert summary.role == "summary" and summary.reply_ids and summary.stats.prompt_tokens > 0
            assert stats.compacted_turns >= 1 and stats.summary_tokens == len(summary.reply_ids)
            assert not any(e.kind == "notice" and e.text.startswith("context full: left") for e in events)
        reevaluated.append((bool(summaries), stats.new_prompt_tokens, stats.prompt_tokens))
    made = [m for m in session.messages if m.role == "summary"]
    assert len(made) >= 2  # every compaction is a message of its own, kept on the path
    prompt = session.last_prompt.text
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nSummary of the earlier conversation")
    assert made[-1].content in prompt and made[0].content not in prompt  # the newest folds in the older
    assert "Question 0" not in prompt
    # after a compaction the next turn extends the prompt: only its own new ids are evaluated
    for (compacted, new, total), (_, new_next, total_next) in zip(reevaluated, reevaluated[1:]):
        if compacted:
            assert new > total * 0.9  # the prompt's start changed: evaluated once, nearly in full
            assert new_next < total_next // 2


def test_a_reloaded_conversation_starts_after_its_summary(tok):
    session, _ = make_session(tok, "summarize")
    for n in range(6):
        send(session, f"Question {n}: {FILLER}")
    window, prompt = session._window, session.last_prompt.text
    summary = active_summary(session.messages)
    assert summary is not None
    # as stored: the summary after the user message whose send made it
    at = session.messages.index(summary)
    stored = [*session.messages[:at], session.messages[at + 1], summary, *session.messages[at + 2:]]
    assert summary_first(stored) == session.messages
    fresh, _ = make_session(tok, "summarize")
    fresh.load_messages(stored)
    assert fresh._window == window == summary_start(session.messages)
    assert fresh.context_used == session.context_used


def test_summary_stats_and_pins_survive_the_message_dataclass(tok):
    message = ChatMessage("user", "x")
    assert message.pinned is False and replace(message, pinned=True).pinned


@pytest.mark.slow
def test_real_model_three_contexts_summarize_against_drop(smollm_path, tok):
    """SmolLM2 through llama.cpp, ctx 512: a conversation of about three contexts goes on without an error
    under summarize, every summary is a message of its own and in the prompt, and the turn after a
    compaction evaluates only its new ids (the engine's cache holds the rest), where drop evaluates the
    whole prompt again on every turn once it drops (measured by the engine: ``new_prompt_tokens``)."""
    from backends import LoadOptions, open_backend

    backend = open_backend(smollm_path, LoadOptions(backend="cpu", n_ctx=512, speculative="off"))
    template, _ = resolve_template("auto", tok)

    def note(n: int) -> str:
        return (f"Note {n}: my friend number {n} is called Name{n}; she lives in city {n}, works as a baker, "
                f"keeps {n} cats and a garden with {n + 2} apple trees and a small pond full of fish. " * 2).strip()

    try:
        measured = {}
        for policy in ("summarize", "drop"):
            session = ChatSession(tok, template, backend=backend, system_prompt="Be brief.", context_size=512,
                                  sampling=SamplingParams(temperature=0.0, max_tokens=32))
            session.compact_policy = policy
            turns = []  # per turn: (compacted, ids evaluated, prompt ids, turns out of the prompt)
            for n in range(11):
                events = send(session, note(n))
                assert events[-1].data.kind == "answered", events[-1].data
                stats = events[-1].stats
                summaries = [e.data for e in events if e.kind == "summary"]
                assert bool(summaries) == (stats.compacted_turns > 0)
                turns.append((stats.compacted_turns > 0, stats.new_prompt_tokens, stats.prompt_tokens,
                              stats.dropped_turns))
                if summaries:
                    assert summaries[0] is active_summary(session.messages)
                    assert summaries[0].content in session.last_prompt.text
            measured[policy] = turns
            if policy == "summarize":
                made = [m for m in session.messages if m.role == "summary"]
                assert len(made) >= 2 and all(m.reply_ids and m.stats.prompt_tokens for m in made)
                written = sum(len(tok.encode(m.content)) for m in session.messages if m.role in ("user", "assistant"))
                assert written >= 2.5 * 512  # the conversation outgrew the context between two and three times
        # after each compaction, the next turn that compacts nothing extends the cached prefix
        summarize = measured["summarize"]
        after = [new for (compacted, *_), (c2, new, total, _) in zip(summarize, summarize[1:]) if compacted and not c2]
        assert after and all(new < 130 for new in after), summarize  # the new message (~105 ids) only
        # drop, once it drops, evaluates nearly the whole prompt every turn
        dropping = [new for _, new, total, dropped in measured["drop"] if dropped]
        assert dropping and min(dropping) > 250, measured["drop"]
    finally:
        backend.close()
