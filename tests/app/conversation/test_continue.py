"""Continue a reply (/continue, --continue) and write its start (/reply): exact ids, stats, refusals.

The exactness tests run the real SmolLM2 model through the real llama.cpp
backend: greedy, a reply cut at 16 ids and continued to 48 must be, id for
id, the reply of 48 ids generated in one go (the oracle: a run without the
feature).  The rest uses the real tokenizer and template with the
ScriptedBackend, so every id is known.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from app.conversation.session import ChatSession, TurnStats, merge_stats
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, repeat_penalty=1.1)
QUESTION = "Write a long story about a dragon who learns to bake bread."


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


@pytest.fixture
def tok(smollm_path):
    return _tokenizer(smollm_path)


def real_session(tok, backend, max_tokens):
    template, _ = resolve_template("auto", tok)
    return ChatSession(tok, template, backend=backend, system_prompt="You are a storyteller.",
                       sampling=replace(GREEDY, max_tokens=max_tokens), context_size=1024)


def run(events):
    events = list(events)
    assert events[-1].kind == "done" and isinstance(events[-1].stats, TurnStats)
    return events


def test_greedy_continuation_equals_one_long_generation(tok, engine):
    one_go = real_session(tok, engine, 48)
    run(one_go.send(QUESTION))
    expected = one_go.messages[-1].reply_ids
    assert len(expected) == 48 and one_go.messages[-1].finish_reason == "length"

    session = real_session(tok, engine, 16)
    first = run(session.send(QUESTION))[-1].stats
    assert first.finish_reason == "length" and first.completion_tokens == 16
    reply = session.messages[-1]
    first_text = reply.content
    session.sampling = replace(session.sampling, max_tokens=32)
    events = run(session.continue_reply())
    stats = events[-1].stats
    # the same message, grown: ids as in one go, text as in one go
    assert session.messages[-1] is reply and len(session.messages) == 2
    assert reply.reply_ids == expected
    assert reply.content == one_go.messages[-1].content
    assert first_text + "".join(e.text for e in events if e.kind == "content") == reply.content
    # the engine's own count: only the cut reply's last id (sampled, never fed back) was evaluated
    assert session.generation_stats.prompt_evaluated <= 1
    assert stats.parts is not None and [p["completion_tokens"] for p in stats.parts] == [16, 32]
    assert stats.completion_tokens == 48 and stats.prompt_tokens == first.prompt_tokens
    # "new" is of the prompt the reply answered (never more than its total); a part's own work stays in it
    assert stats.new_prompt_tokens == first.new_prompt_tokens <= stats.prompt_tokens
    assert stats.parts[1]["prompt_tokens"] == first.prompt_tokens + 16
    assert stats.context_used == first.prompt_tokens + 48


def test_a_cancelled_reply_continues_from_its_ids_and_the_next_turn_extends_it(tok, engine):
    session = real_session(tok, engine, 48)
    events = session.send(QUESTION)
    seen = 0
    for event in events:
        if event.kind == "content":
            seen += 1
            if seen == 5:
                session.cancel()
    reply = session.messages[-1]
    assert reply.finish_reason == "cancelled"
    cut = len(reply.reply_ids)
    run(session.continue_reply())
    assert reply.finish_reason in ("length", "stop") and len(reply.reply_ids) > cut
    head = session._tail[1]
    run(session.send("Thanks!"))
    # the next prompt starts with the first prompt and every id of the continued reply, as generated
    assert session.last_prompt.ids[: len(head.ids) + len(reply.reply_ids)] == list(head.ids) + list(reply.reply_ids)


def scripted(tok, replies, max_tokens=64):
    template, _ = resolve_template("auto", tok)
    queue = list(replies)
    backend = ScriptedBackend(lambda prompt: queue.pop(0), context_size=2048)
    return ChatSession(tok, template, backend=backend, system_prompt="Be brief.",
                       sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens), context_size=2048)


def test_a_reply_that_stopped_is_not_continued(tok):
    end = tok.special_tokens["<|im_end|>"]
    session = scripted(tok, [tok.encode("Done.") + [end]])
    run(session.send("Hi"))
    events = run(session.continue_reply())
    assert events[0].kind == "error" and "ended on its own" in events[0].text
    assert [m.content for m in session.messages] == ["Hi", "Done."]


def test_nothing_to_continue_is_an_error_that_changes_nothing(tok):
    session = scripted(tok, [])
    events = run(session.continue_reply())
    assert events[0].kind == "error" and session.messages == []


def test_reply_with_an_opening_counts_it_as_prompt_and_keeps_the_old_reply(tok):
    end = tok.special_tokens["<|im_end|>"]
    prompts = []
    replies = [tok.encode("First.") + [end], tok.encode(" a cat.") + [end]]
    template, _ = resolve_template("auto", tok)
    backend = ScriptedBackend(lambda prompt: (prompts.append(list(prompt)), replies.pop(0))[1], context_size=2048)
    session = ChatSession(tok, template, backend=backend, sampling=SamplingParams(temperature=0.0),
                          context_size=2048)
    run(session.send("What is it?"))
    first_prompt = list(prompts[0])
    events = run(session.reply_with("It is"))
    stats = events[-1].stats
    opening_ids = tok.encode("It is")
    # the prompt is the same prompt plus the opening's ids, as they encode alone
    assert prompts[1] == first_prompt + opening_ids
    assert stats.opening_tokens == len(opening_ids)
    assert stats.prompt_tokens == len(first_prompt) + len(opening_ids)
    assert stats.completion_tokens == len(tok.encode(" a cat.")) + 1
    reply = session.messages[-1]
    assert (reply.content, reply.opening) == ("It is a cat.", "It is")
    assert reply.reply_ids == tuple(opening_ids + tok.encode(" a cat.") + [end])
    # only the new text is streamed; the opening is the caller's to show
    assert "".join(e.text for e in events if e.kind == "content") == " a cat."
    # the old reply is a sibling: switching back shows it
    assert session.branches.position(1) == (2, 2)
    session.switch_branch(1, 0)
    assert session.messages[-1].content == "First."


def test_an_opening_alone_can_be_continued(tok):
    end = tok.special_tokens["<|im_end|>"]
    session = scripted(tok, [tok.encode("Hello") + [end], [], tok.encode(" world") + [end]])
    run(session.send("Greet"))
    # an opening the model added nothing to: continue picks it up from its ids
    run(session.reply_with("Well,"))
    reply = session.messages[-1]
    assert reply.opening == "Well," and reply.content == "Well,"
    run(session.continue_reply())
    assert session.messages[-1] is reply and reply.content == "Well, world"
    assert reply.stats.parts is not None and reply.stats.opening_tokens == len(tok.encode("Well,"))


def test_a_regenerate_is_not_counted_as_a_cache_cut(tok):
    end = tok.special_tokens["<|im_end|>"]
    session = scripted(tok, [tok.encode("One.") + [end], tok.encode("Two.") + [end]])
    run(session.send("Hi"))
    stats = run(session.regenerate())[-1].stats
    assert stats.cache_cut_tokens == 0 and session.messages[-1].content == "Two."


def test_merge_stats_adds_counts_and_keeps_parts():
    a = TurnStats(new_prompt_tokens=30, prompt_tokens=30, completion_tokens=11, reasoning_tokens=4,
                  ttft_s=0.5, tokens_per_s=10.0, finish_reason="length", model="m")
    b = TurnStats(new_prompt_tokens=1, prompt_tokens=41, completion_tokens=21, reasoning_tokens=0,
                  ttft_s=0.1, tokens_per_s=20.0, finish_reason="stop", context_used=62, model="m")
    c = merge_stats(a, b)
    assert (c.completion_tokens, c.reasoning_tokens, c.new_prompt_tokens) == (32, 4, 30)
    assert (c.prompt_tokens, c.ttft_s, c.finish_reason, c.context_used) == (30, 0.5, "stop", 62)
    # 10 steps in 1 s and 20 steps in 1 s: 15 per second overall
    assert c.tokens_per_s == pytest.approx(15.0)
    d = merge_stats(c, b)
    assert [p["completion_tokens"] for p in d.parts] == [11, 21, 21] and d.completion_tokens == 53
