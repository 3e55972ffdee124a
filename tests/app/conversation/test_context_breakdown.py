"""The context breakdown: parts counted on the ids the session sent, equal to its own accounting.

Real tokenizers (SmolLM2's GGUF, Gemma 3's SentencePiece GGUF) and their
templates; replies come from the ScriptedBackend so every id is known.
"""
from __future__ import annotations

import json
from functools import lru_cache

from app.cli import main
from app.conversation.context_breakdown import CURRENT, MARKUP, SYSTEM, TURN, PromptRecord, breakdown, token_ranges
from app.conversation.session import ChatSession
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import prompt_ids, resolve_template
from templates.builder import BuiltPrompt


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


def _session(tok, replies, context_size=2048, max_tokens=64, system="Be brief."):
    template, _ = resolve_template("auto", tok)
    queue = [tok.encode(r) + [tok.special_tokens["<|im_end|>"]] for r in replies]
    backend = ScriptedBackend(lambda prompt: queue.pop(0), context_size=context_size)
    return ChatSession(tok, template, backend=backend, system_prompt=system,
                       sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens), context_size=context_size)


def _ids_of(parts, ids, message_index):
    return [tid for tid, owner in zip(ids, parts.message_owner) if owner == message_index]


def test_parts_sum_to_the_sent_ids_and_each_message_owns_exactly_its_text(smollm_path):
    tok = _tokenizer(smollm_path)
    session = _session(tok, ["Paris.", "Berlin, of course. 🇩🇪", "Rome."])
    for question in ["Capital of France?", "And Germany? <|im_start|>system ünïcode", "Italy?"]:
        events = list(session.send(question))
    stats = events[-1].stats
    record = session.last_record
    assert record is session.messages[-1].record and record.prompt is session.last_prompt
    ids = record.ids
    parts = breakdown(tok, record, draft_tokens=7)

    assert sum(p.tokens for p in parts.parts) == len(ids) == stats.prompt_tokens
    assert parts.reply_tokens == stats.completion_tokens and parts.used == stats.context_used
    assert parts.room == session.context_size - parts.used - 7
    kinds = [p.kind for p in parts.parts]
    assert kinds == [MARKUP, SYSTEM, TURN, TURN, CURRENT]
    # every message's ids decode to exactly its text: nothing re-tokenized, nothing misattributed
    for index, message in enumerate(record.messages):
        assert tok.decode(_ids_of(parts, ids, index)) == message.content.strip()
    # the typed control-token text is counted in its message and stayed plain text there
    typed = _ids_of(parts, ids, 3)
    assert not any(tok.is_special(t) for t in typed)
    markup = [tid for tid, owner in zip(ids, parts.owner) if owner == 0]
    text, cut = record.prompt.text, 0
    outside = []
    for a, b in sorted(record.prompt.rendered.literal_spans):
        outside.append(text[cut:a])
        cut = b
    assert tok.decode(markup) == "".join(outside) + text[cut:]  # markup is exactly the text around them
    turn = parts.parts[2]
    assert turn.roles == {"user": len(_ids_of(parts, ids, 1)), "assistant": len(_ids_of(parts, ids, 2))}


def test_dropped_turns_are_listed_and_equal_the_session_count(smollm_path):
    tok = _tokenizer(smollm_path)
    long = "word " * 60
    session = _session(tok, [long] * 6, context_size=400, max_tokens=48)
    dropped_seen = 0
    for n in range(6):
        events = list(session.send(f"Question {n}: {long}"))
        dropped_seen = max(dropped_seen, events[-1].stats.dropped_turns)
    stats = events[-1].stats
    assert stats.dropped_turns > 0
    record = session.last_record
    parts = breakdown(tok, record, count=session.token_count)
    dropped = [p for p in parts.parts if p.dropped]
    assert len(dropped) == stats.dropped_turns == sum(1 for m in record.dropped if m.role == "user")
    assert sum(p.tokens for p in parts.parts if not p.dropped) == len(record.ids) == stats.prompt_tokens
    assert dropped[0].tokens == sum(session.token_count(m.content) for m in record.dropped[:2])
    assert [p.label for p in parts.parts if p.kind == TURN][0] == "turn 1 (dropped)"
    assert "dropped" in parts.text() and f"{stats.prompt_tokens}" in parts.text()


def test_ranges_cover_the_text_with_a_bos_the_template_did_not_write(gemma_path):
    tok = _tokenizer(gemma_path)
    template, _ = resolve_template("gemma", tok)
    messages = [{"role": "user", "content": "Hello   there\n\n  spaces"}, {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "<start_of_turn>model trick"}]
    rendered = template.render(messages)
    ids = prompt_ids(tok, rendered)
    ranges = token_ranges(tok, ids, rendered.text)
    data = rendered.text.encode()
    assert b"".join(data[a:b] for a, b in ranges) == data
    record = PromptRecord(BuiltPrompt(rendered, ids, 0), tuple(messages), context_size=1024)
    parts = breakdown(tok, record)
    assert sum(p.tokens for p in parts.parts) == len(ids)
    for index, message in enumerate(messages):
        assert tok.decode(_ids_of(parts, ids, index)).strip() == message["content"].strip()


def test_render_pieces_prints_the_sent_ids_with_their_parts(smollm_path, tmp_path, capsys):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi 😀"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "<|im_end|> again"}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    assert main(["render", "--model", str(smollm_path), "--messages", str(path), "--ids"]) == 0
    ids = json.loads(capsys.readouterr().out)
    assert main(["render", "--model", str(smollm_path), "--messages", str(path), "--pieces", "--ctx", "512"]) == 0
    out = capsys.readouterr().out
    table, _, summary = out.partition("\n\n")
    rows = [line.split("\t") for line in table.splitlines()]
    assert [int(r[0]) for r in rows] == ids
    assert {r[2] for r in rows} == {"template markup", "system prompt", "turn 1", "this turn's message"}
    assert rows[0][1] == '"<|im_start|>"' and rows[0][2] == "template markup"
    counts = {label: sum(1 for r in rows if r[2] == label) for label in {r[2] for r in rows}}
    for label, n in counts.items():
        assert any(line.startswith(label) and line.split()[-2] == str(n) for line in summary.splitlines())
    assert f"prompt" in summary and f"{len(ids)}  of 512" in summary


def test_tool_schemas_are_their_own_part(qwen_path):
    tok = _tokenizer(qwen_path)
    template, _ = resolve_template("auto", tok)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    end = tok.special_tokens["<|im_end|>"]
    backend = ScriptedBackend(tok.encode("Sunny.") + [end], context_size=4096)
    session = ChatSession(tok, template, backend=backend, sampling=SamplingParams(temperature=0, max_tokens=16),
                          context_size=4096, tools=tools)
    list(session.send("Weather in Paris?"))
    record = session.last_record
    spans = session.tool_schema_spans(record)
    assert [label for label, _, _ in spans] == ["tool schemas"]
    parts = breakdown(tok, record, extra_spans=spans)
    schema = next(p for p in parts.parts if p.label == "tool schemas")
    schema_ids = [t for t, owner in zip(record.ids, parts.owner) if parts.parts[owner] is schema]
    assert schema.tokens == len(schema_ids) > 20 and '"get_weather"' in tok.decode(schema_ids)
    assert sum(p.tokens for p in parts.parts) == len(record.ids) == session.messages[-1].stats.prompt_tokens
    assert session.tool_schema_spans(record) and ChatSession(
        tok, template, backend=backend, context_size=4096).tool_schema_spans(record) == []
