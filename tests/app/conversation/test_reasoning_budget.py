"""The reasoning budget and the cache cut where a template drops earlier reasoning, on the real engine.

No small thinking model ships in a registry package (see README), so real
think blocks go through the real engine this way: SmolLM2 with the real
DeepSeek-R1-Distill template from llama.cpp's ``models/templates``, whose
generation prompt opens ``<think>\\n``.  The reply then starts inside the
think block; the budget closes it after N ids.  Oracles: the same prompt
generated without a budget (the first N ids), and the engine generating
from the prompt plus those ids plus the closing ids (the answer after it).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from app.conversation.session import ChatSession
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template

R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


def r1_session(tok, backend, llamacpp_models_dir, budget=None):
    template, _ = resolve_template("auto", tok, llamacpp_models_dir / "templates" / R1)
    session = ChatSession(tok, template, backend=backend, sampling=GREEDY, context_size=1024,
                          enable_thinking=True)
    session.reasoning_budget = budget
    return session


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_the_budget_closes_the_think_block_after_n_ids(smollm_path, engine, llamacpp_models_dir):
    tok = _tokenizer(smollm_path)
    free = r1_session(tok, engine, llamacpp_models_dir)
    list(free.send("Why is the sky blue?"))
    unlimited = free.messages[-1]
    assert free.last_prompt.text.endswith("<think>\n") and unlimited.stats.reasoning_tokens > 5

    session = r1_session(tok, engine, llamacpp_models_dir, budget=5)
    events = list(session.send("Why is the sky blue?"))
    reply, stats = session.messages[-1], events[-1].stats
    close = session.think_close_ids()
    assert tok.decode(close) == "\n</think>\n\n"
    ids = list(reply.reply_ids)
    # the first 5 ids are the model's own (as without a budget), then tokchat's closing ids
    assert ids[:5] == list(unlimited.reply_ids[:5]) and ids[5:5 + len(close)] == close
    # after them the model answers: what the engine gives for the prompt plus those ids
    after = list(engine.generate(session.last_prompt.ids + ids[:5 + len(close)],
                                 replace(GREEDY, max_tokens=len(ids) - 5 - len(close)), session.stop_ids))
    assert ids[5 + len(close):] == after
    # the model's 5 reasoning ids, and tokchat's closing ids apart (issue 34 item 9: 5, not 5 + the close)
    assert stats.reasoning_cut and (stats.reasoning_tokens, stats.forced_close_tokens) == (5, len(close))
    assert stats.completion_tokens == len(ids)
    assert reply.reasoning == tok.decode(ids[:5]).strip()
    assert [e.kind for e in events if e.kind in ("reasoning", "content")][-1] == "content"
    assert reply.content == "".join(e.text for e in events if e.kind == "content")


def test_a_budget_of_zero_answers_at_once(smollm_path, engine, llamacpp_models_dir):
    tok = _tokenizer(smollm_path)
    session = r1_session(tok, engine, llamacpp_models_dir, budget=0)
    list(session.send("Hi"))
    reply = session.messages[-1]
    close = session.think_close_ids()
    assert list(reply.reply_ids[: len(close)]) == close and reply.reasoning == ""
    assert reply.stats.reasoning_cut and (reply.stats.reasoning_tokens, reply.stats.forced_close_tokens) == \
        (0, len(close))


def test_dropped_reasoning_cuts_the_cache_where_it_began(smollm_path, engine, llamacpp_models_dir):
    tok = _tokenizer(smollm_path)
    session = r1_session(tok, engine, llamacpp_models_dir, budget=4)
    list(session.send("Why is the sky blue?"))
    first = session.last_prompt
    held = list(first.ids) + list(session.messages[-1].reply_ids)
    events = list(session.send("Thanks. And the sea?"))
    stats, prompt = events[-1].stats, session.last_prompt
    # the template left the first reply's reasoning (and the <think> that opened it) out
    assert not prompt.text.startswith(first.text) and "The reason" not in prompt.text
    kept = common_prefix(held, prompt.ids)
    # the cut is in the first prompt's last ids, the ones that opened the think block (in this
    # vocabulary "<think>" is text, and its "<" merges with the ">" before it: one id earlier)
    assert kept < len(first.ids) and tok.decode(first.ids[kept:]).endswith("<think>\n")
    assert len(tok.decode(first.ids[kept:])) <= len("｜><think>\n")
    assert stats.cache_cut_tokens == len(held) - kept > len(session.messages[1].reply_ids) - 1
    # the engine evaluated at most what follows the cut (its own count; it may move cached chunks
    # after the cut into place instead of evaluating them again)
    assert 0 < session.generation_stats.prompt_evaluated <= len(prompt.ids) - kept + 1


def test_cache_cut_is_counted_with_the_built_in_thinking_template(smollm_path):
    tok = _tokenizer(smollm_path)
    end = tok.special_tokens["<|im_end|>"]
    replies = [tok.encode("<think>\nLet me see.\n</think>\n\nFour.") + [end], tok.encode("Six.") + [end]]
    template, _ = resolve_template("chatml-think", tok)
    session = ChatSession(tok, template, backend=ScriptedBackend(lambda p: replies.pop(0), context_size=2048),
                          sampling=GREEDY, context_size=2048)
    list(session.send("2+2?"))
    first, reply_ids = session.last_prompt, session.messages[-1].reply_ids
    stats = list(session.send("3+3?"))[-1].stats
    # everything after the first prompt was reasoning, then the answer re-encoded: all of it is cut
    assert session.last_prompt.ids[: len(first.ids)] == first.ids
    kept = common_prefix(list(first.ids) + list(reply_ids), session.last_prompt.ids)
    assert stats.cache_cut_tokens == len(first.ids) + len(reply_ids) - kept
    assert kept == len(first.ids)
    assert session.generation_stats.prompt_evaluated == len(session.last_prompt.ids) - kept


def test_the_cut_keeps_earlier_replies_ids_as_generated(smollm_path):
    """Turn 1's reply was generated as ids a fresh encode would not give; turn 2 reasoned.  Turn 3's
    prompt keeps turn 1's ids as generated and turn 2's prompt, and cuts exactly turn 2's reply."""
    tok = _tokenizer(smollm_path)
    end = tok.special_tokens["<|im_end|>"]
    odd = [i for ch in "Hello there" for i in tok.encode(ch)]  # one id per character: not canonical
    assert odd != tok.encode("Hello there")
    thought = tok.encode("<think>\nHm.\n</think>\n\nSix.") + [end]
    replies = [odd + [end], thought, tok.encode("Ten.") + [end]]
    template, _ = resolve_template("chatml-think", tok)
    backend = ScriptedBackend(lambda p: replies.pop(0), context_size=2048)
    session = ChatSession(tok, template, backend=backend, sampling=GREEDY, context_size=2048)
    list(session.send("Hi"))
    list(session.send("3+3?"))
    second = session.last_prompt
    assert odd + [end] == second.ids[second.ids.index(odd[0]):][: len(odd) + 1]  # turn 1's ids as generated
    stats = list(session.send("5+5?"))[-1].stats
    third = session.last_prompt
    assert third.ids[: len(second.ids)] == second.ids  # turn 1's odd ids and turn 2's prompt, as sent
    assert third.reused == len(second.ids)
    assert stats.cache_cut_tokens == len(thought)  # exactly the reply that held the reasoning
    assert session.generation_stats.prompt_evaluated == len(third.ids) - len(second.ids)
