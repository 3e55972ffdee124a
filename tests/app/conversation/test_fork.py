"""Fork a conversation (/fork): the kept prefix reuses the engine's cache, measured by the engine itself.

Real SmolLM2 through the real llama.cpp engine: after a fork at an earlier
reply, the next prompt starts with that reply's prompt and ids as generated,
so the engine evaluates only the new message (its own
``stats.prompt_evaluated`` of its generation).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from app.conversation.session import ChatSession
from backends import SamplingParams
from templates import resolve_template


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def session_on(engine, tok, max_tokens=20):
    template, _ = resolve_template("auto", tok)
    return ChatSession(tok, template, backend=engine, system_prompt="Be brief.",
                       sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens), context_size=1024)


def test_a_fork_at_an_earlier_reply_evaluates_only_the_new_message(smollm_path, engine):
    tok = _tokenizer(smollm_path)
    session = session_on(engine, tok)
    list(session.send("Name a fruit."))
    first = session.messages[-1]
    head, first_ids = session.last_record.prompt, first.reply_ids
    list(session.send("Name a colour."))
    list(session.send("Name an animal."))
    held = list(session._builder.held_ids)  # what the engine holds before the fork
    kept = session.fork_at(1)
    assert kept == session.messages and [m.role for m in kept] == ["user", "assistant"] and kept[1] is first
    assert session.branches.forks == {}
    list(session.send("Name a city."))
    prompt = session.last_prompt
    # the new prompt extends the kept reply exactly, and the engine says what it evaluated
    assert prompt.ids[: len(head.ids) + len(first_ids)] == list(head.ids) + list(first_ids)
    # the engine reuses its cache up to where the fork's prompt leaves what it holds (the kept
    # prefix and the start of the next user turn's markup), and evaluates the rest: its own count
    shared = common_prefix(held, prompt.ids)
    assert shared >= len(head.ids) + len(first_ids)
    assert len(prompt.ids) - shared <= session.generation_stats.prompt_evaluated <= len(prompt.ids) - shared + 1
    # the next turn in the fork extends it too
    list(session.send("And a river?"))
    assert session.last_prompt.reused > len(prompt.ids)


def test_a_fork_at_a_user_message_keeps_what_came_before_it(smollm_path, engine):
    tok = _tokenizer(smollm_path)
    session = session_on(engine, tok, max_tokens=8)
    list(session.send("One?"))
    list(session.send("Two?"))
    kept = session.fork_at(2)  # the second user message: its text is the caller's to put back
    assert [m.content for m in kept] == ["One?", session.messages[1].content] and len(kept) == 2


def test_forking_outside_the_conversation_is_an_error(smollm_path, engine):
    session = session_on(engine, _tokenizer(smollm_path))
    with pytest.raises(IndexError, match="no message 1"):
        session.fork_at(0)
