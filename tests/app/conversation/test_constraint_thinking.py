"""A held reply format on a thinking model, and /continue with a format on (issue 46 items 4 and the guard).

No small thinking model ships in the test assets, so real think blocks go through the real engine as in
test_reasoning_budget.py: SmolLM2 with DeepSeek-R1-Distill's real template, whose generation prompt
opens ``<think>\\n``.  The think block must stay free (its ids are the ones the free reply starts with:
the oracle is the same prompt generated without a format) and the answer after it must match the
schema (checked by the ``jsonschema`` package, which knows nothing of the engine).
"""
from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache

from app.conversation.session import ChatSession
from backends import SamplingParams
from backends.constraint import check_reply, parse_constraint
from templates import resolve_template

R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
COLOUR = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}},
          "required": ["colour"], "additionalProperties": False}
HELD = parse_constraint("json_schema", json.dumps(COLOUR))
GREEDY = SamplingParams(temperature=0.0, max_tokens=40)


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


def session_for(tok, backend, template, sampling, budget=None):
    session = ChatSession(tok, template, backend=backend, sampling=sampling, context_size=1024,
                          enable_thinking=True)
    session.reasoning_budget = budget
    return session


def r1(tok, llamacpp_models_dir):
    return resolve_template("auto", tok, llamacpp_models_dir / "templates" / R1)[0]


def test_the_think_block_is_free_and_the_answer_after_the_budget_is_held(smollm_path, engine, llamacpp_models_dir):
    tok = _tokenizer(smollm_path)
    template = r1(tok, llamacpp_models_dir)
    free = session_for(tok, engine, template, GREEDY)
    list(free.send("What colour is the sky?"))
    assert free.last_prompt.text.endswith("<think>\n")
    free_ids = list(free.messages[-1].reply_ids)

    held = session_for(tok, engine, template, replace(GREEDY, constraint=HELD), budget=6)
    events = list(held.send("What colour is the sky?"))
    reply, stats = held.messages[-1], events[-1].stats
    ids = list(reply.reply_ids)
    close = held.think_close_ids()
    # the think block is the model's own, as without a format (a held think block would start with "{")
    assert ids[:6] == free_ids[:6] and reply.reasoning == tok.decode(free_ids[:6]).strip()
    assert ids[6:6 + len(close)] == close and stats.reasoning_cut
    # the answer after it is held to the schema, and complete
    assert reply.finish_reason == "stop", (reply.finish_reason, tok.decode(ids))
    assert check_reply(HELD, reply.content) is None, reply.content
    assert json.loads(reply.content)["colour"] in ("red", "green", "blue")
    assert stats.constraint == "json schema"


def test_a_held_reply_continued_keeps_the_format_and_is_the_one_go_reply(smollm_path, engine, llamacpp_models_dir):
    tok = _tokenizer(smollm_path)
    template = r1(tok, llamacpp_models_dir)
    sampling = replace(GREEDY, constraint=HELD, max_tokens=60)
    one_go = session_for(tok, engine, template, sampling, budget=4)
    list(one_go.send("Name a colour."))
    whole = one_go.messages[-1]
    assert whole.finish_reason == "stop" and check_reply(HELD, whole.content) is None, whole.content

    cut = session_for(tok, engine, template, replace(sampling, max_tokens=len(whole.reply_ids) - 3), budget=4)
    list(cut.send("Name a colour."))
    part = cut.messages[-1]
    assert part.finish_reason == "length" and check_reply(HELD, part.content) is not None  # cut inside the value
    cut.sampling = sampling
    events = list(cut.continue_reply())
    assert not [e for e in events if e.kind == "error"], [e.text for e in events if e.kind == "error"]
    reply = cut.messages[-1]
    assert reply is part and reply.finish_reason == "stop"
    assert list(reply.reply_ids) == list(whole.reply_ids) and reply.content == whole.content
    assert check_reply(HELD, reply.content) is None


def test_continuing_a_free_reply_with_a_format_on_is_refused_in_one_line(smollm_path, engine):
    from templates import resolve_template as resolve

    tok = _tokenizer(smollm_path)
    template = resolve("auto", tok)[0]
    session = session_for(tok, engine, template, replace(GREEDY, max_tokens=8))
    list(session.send("Tell me about the sea."))
    reply = session.messages[-1]
    assert reply.finish_reason == "length" and not reply.content.lstrip().startswith("{")
    content, ids = reply.content, list(reply.reply_ids)
    session.sampling = replace(GREEDY, constraint=HELD)
    events = list(session.continue_reply())
    errors = [e.text for e in events if e.kind == "error"]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert errors[0].startswith("the reply being continued already breaks the json schema"), errors[0]
    assert "turn the format off" in errors[0]
    # nothing generated, the reply kept as it was
    assert session.messages[-1].content == content and list(session.messages[-1].reply_ids) == ids


def test_continuing_a_held_reply_on_a_server_is_refused_in_one_line(smollm_path, tmp_path):
    """llama-server starts its grammar afresh on a continuation (the prompt ends mid-value), so tokchat
    refuses before sending anything; the real server, SmolLM2."""
    import sys
    from pathlib import Path

    from support.remote_servers import LlamaServer

    from backends.remote import RemoteSettings
    from backends.remote_connect import connect
    from templates import resolve_template as resolve

    tok = _tokenizer(smollm_path)
    server = LlamaServer(smollm_path, tmp_path, ctx=1024).start()
    try:
        backend = connect(RemoteSettings(url=server.url), tok, str(smollm_path))
        session = session_for(tok, backend, resolve("auto", tok)[0], replace(GREEDY, constraint=HELD, max_tokens=4))
        list(session.send("Name a colour."))
        reply = session.messages[-1]
        assert reply.finish_reason == "length"
        content, ids = reply.content, list(reply.reply_ids)
        events = list(session.continue_reply())
        errors = [e.text for e in events if e.kind == "error"]
        assert errors == ["a server holds a reply format from the start of a reply only, so continuing this one "
                          "would break it: /format off continues it as free text, or ask again"]
        assert session.messages[-1].content == content and list(session.messages[-1].reply_ids) == ids
        backend.close()
    finally:
        server.stop()
