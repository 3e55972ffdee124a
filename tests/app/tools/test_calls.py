"""Tool calls found in real token ids (Qwen2.5 and Llama 3 vocabularies) and parsed strictly."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.tools.calls import (HERMES, LLAMA3, MISTRAL, CallStreamSplitter, parse_reply, syntax_for)


@pytest.fixture(scope="module")
def qwen(qwen_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(qwen_path)


@pytest.fixture(scope="module")
def llama(llamacpp_models_dir):
    from tokenizer import load_tokenizer

    return load_tokenizer(llamacpp_models_dir / "ggml-vocab-llama-bpe.gguf")


def _reply(tok, text):
    """Ids as a model generates them: markup as its tokens, then the end-of-turn id."""
    return tok.encode(text, special=True) + [tok.special_tokens["<|im_end|>"]]


def test_syntax_comes_from_the_template(llamacpp_models_dir):
    templates_dir = llamacpp_models_dir / "templates"
    def of(name):
        return syntax_for((templates_dir / name).read_text(encoding="utf-8"))

    assert of("Qwen-Qwen2.5-7B-Instruct.jinja") is HERMES
    assert of("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja") is HERMES
    assert of("meta-llama-Llama-3.1-8B-Instruct.jinja") is LLAMA3
    assert of("mistralai-Mistral-Nemo-Instruct-2407.jinja") is MISTRAL
    assert of("google-gemma-2-2b-it.jinja") is None


def test_parallel_calls_with_text_around(qwen):
    text = ('Let me check.\n<tool_call>\n{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    ids = _reply(qwen, text)
    parsed = parse_reply(qwen, HERMES, ids, text)
    assert [(c.name, c.arguments, c.error) for c in parsed.calls] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"}, None), ("add", {"a": 1, "b": 2}, None)]
    assert parsed.content == "Let me check."
    assert len({c.id for c in parsed.calls}) == 2 and all(len(c.id) == 9 and c.id.isalnum() for c in parsed.calls)
    # every id from <tool_call> to </tool_call>, both markers included, is a call token
    open_id, close_id = qwen.special_tokens["<tool_call>"], qwen.special_tokens["</tool_call>"]
    first, last = ids.index(open_id), len(ids) - 1 - ids[::-1].index(close_id)
    newline_between = len(qwen.encode("\n"))
    assert parsed.call_tokens == last - first + 1 - newline_between


@pytest.mark.parametrize("body,why", [
    ('{"name": "add", "arguments": {"a": 1,}}', "not valid JSON"),
    ('{"arguments": {"a": 1}}', 'no "name"'),
    ('{"name": "add", "arguments": [1, 2]}', "must be a JSON object"),
    ('["add"]', "JSON object"),
])
def test_malformed_calls_are_kept_with_the_reason(qwen, body, why):
    text = f"<tool_call>\n{body}\n</tool_call>"
    parsed = parse_reply(qwen, HERMES, _reply(qwen, text), text)
    assert len(parsed.calls) == 1 and parsed.valid_calls == []
    assert why in parsed.calls[0].error and parsed.calls[0].raw == text


def test_an_unclosed_call_is_malformed(qwen):
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 1'
    parsed = parse_reply(qwen, HERMES, qwen.encode(text, special=True), text)
    assert "not closed" in parsed.calls[0].error


def test_arguments_as_a_json_string_are_accepted(qwen):
    text = '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert parse_reply(qwen, HERMES, _reply(qwen, text), text).calls[0].arguments == {"a": 1}


def test_a_spelled_out_marker_is_plain_text(qwen):
    """Where the vocabulary has <tool_call> as a token, only that id opens a call."""
    text = '<tool_call>{"name": "add", "arguments": {}}</tool_call>'
    spelled = qwen.encode("<") + qwen.encode(text[1:])  # the same characters as plain-text pieces
    assert qwen.special_tokens["<tool_call>"] not in spelled
    parsed = parse_reply(qwen, HERMES, spelled, text)
    assert parsed.calls == [] and parsed.content == text


def test_llama3_json_calls(llama):
    text = '{"name": "get_current_time", "parameters": {"timezone": "UTC"}}; {"name": "add", "parameters": {"a": 2}}'
    ids = llama.encode(text) + [llama.special_tokens["<|eot_id|>"]]
    parsed = parse_reply(llama, LLAMA3, ids, text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("get_current_time", {"timezone": "UTC"}), ("add", {"a": 2})]
    assert parsed.content == "" and parsed.call_tokens == len(ids) - 1
    prose = "It is noon."
    assert parse_reply(llama, LLAMA3, llama.encode(prose), prose).calls == []


def test_mistral_both_forms(llama):
    old = 'Sure. [TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]'
    new = '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}[TOOL_CALLS]echo[ARGS]{"text": "hi"}'
    p_old = parse_reply(llama, MISTRAL, llama.encode(old), old)
    p_new = parse_reply(llama, MISTRAL, llama.encode(new), new)
    assert [(c.name, c.arguments) for c in p_old.calls] == [("add", {"a": 1, "b": 2})] and p_old.content == "Sure."
    assert [(c.name, c.arguments) for c in p_new.calls] == [("add", {"a": 1, "b": 2}), ("echo", {"text": "hi"})]
    bad = '[TOOL_CALLS][{"name": "add", "arguments": {]'
    assert "not valid JSON" in parse_reply(llama, MISTRAL, llama.encode(bad), bad).calls[0].error


SPLIT_TEXT = ('I will look. <tool_call>\n{"name": "x", "arguments": {"q": "</tool"}}\n</tool_call> and then '
              '<tool_c text <tool_call>{"name": "y", "arguments": {}}</tool_call>')


def _joined(pieces):
    out = []
    for kind, text in pieces:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def _split(syntax, chunks):
    splitter = CallStreamSplitter(syntax)
    pieces = [p for chunk in chunks for p in splitter.feed(chunk)] + splitter.finish()
    return _joined(pieces)


def test_splitter_separates_calls_from_answer_text():
    assert _split(HERMES, [SPLIT_TEXT]) == [
        ("content", "I will look. "),
        ("call", '<tool_call>\n{"name": "x", "arguments": {"q": "</tool"}}\n</tool_call>'),
        ("content", " and then <tool_c text "),
        ("call", '<tool_call>{"name": "y", "arguments": {}}</tool_call>'),
    ]
    assert _split(LLAMA3, ['  {"name": "a", ', '"parameters": {}}']) == [("call", '  {"name": "a", "parameters": {}}')]
    assert _split(LLAMA3, ["  ", "The answer {is} 4"]) == [("content", "  The answer {is} 4")]
    assert _split(MISTRAL, ["ok [TOOL_", "CALLS][{}]"]) == [("content", "ok "), ("call", "[TOOL_CALLS][{}]")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(SPLIT_TEXT)), max_size=12))
def test_any_chunking_splits_the_same(cuts):
    cuts = sorted(set(cuts))
    chunks = [SPLIT_TEXT[a:b] for a, b in zip([0] + cuts, cuts + [len(SPLIT_TEXT)])]
    assert _split(HERMES, chunks) == _split(HERMES, [SPLIT_TEXT])


@pytest.mark.parametrize("text", [
    '{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}',
    '```json\n{\n  "name": "get_current_time",\n  "arguments": {"timezone": "Asia/Tokyo"}\n}\n```',
])
def test_a_bare_json_call_to_an_offered_tool(qwen, text):
    """Qwen2.5-Coder-0.5B writes its calls like this (seen in the real-model test)."""
    ids = _reply(qwen, text)
    parsed = parse_reply(qwen, HERMES, ids, text, {"get_current_time"})
    assert [(c.name, c.arguments) for c in parsed.calls] == [("get_current_time", {"timezone": "Asia/Tokyo"})]
    assert parsed.content == "" and parsed.call_tokens == len(ids) - 1
    # not an offered tool, or JSON among prose: an answer, not a call
    assert parse_reply(qwen, HERMES, ids, text, {"other"}).calls == []
    prose = "Here is an example:\n" + text
    assert parse_reply(qwen, HERMES, _reply(qwen, prose), prose, {"get_current_time"}).calls == []


def test_bare_parallel_calls_and_a_bare_opening_in_the_stream(qwen):
    text = ('{"name": "convert_time", "arguments": {"time": "21:00"}}\n'
            '{"name": "get_current_time", "arguments": {"timezone": "UTC"}}')
    parsed = parse_reply(qwen, HERMES, _reply(qwen, text), text, {"convert_time", "get_current_time"})
    assert [c.name for c in parsed.calls] == ["convert_time", "get_current_time"] and not parsed.calls[0].error
    splitter = CallStreamSplitter(HERMES)
    assert _joined(splitter.feed(" ``") + splitter.feed('`json\n{"name"') + splitter.finish()) == [
        ("call", ' ```json\n{"name"')]
    assert splitter.bare
    assert _split(HERMES, ["```py", "thon\nprint(1)\n```"]) == [("content", "```python\nprint(1)\n```")]


def test_enabled_names_servers_and_single_tools():
    from app.tools.mcp_client import ToolInfo
    from app.settings.tools import ToolSettings

    tools = [ToolInfo("time", "get_current_time", "", {}), ToolInfo("time", "convert_time", "", {}),
             ToolInfo("test", "add", "", {}), ToolInfo("test", "echo", "", {})]
    narrow = ToolSettings(enabled="time.get_current_time, test", servers={})
    assert narrow.selected() == ["time", "test"]
    assert [t.name for t in narrow.chosen(tools)] == ["get_current_time", "add", "echo"]
    assert ToolSettings(enabled="all").chosen(tools) == tools
