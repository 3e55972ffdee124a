"""The tool loop on the scripted backend, with the real tokenizer, template and MCP servers.

The backend replays scripted reply ids step by step (it cannot think), so
these tests pin the loop itself: multi-step turns, parallel calls, a
malformed call, denial and "always", the step limit, truncation, and a
hostile result that must stay plain text.  Calls go through the real MCP
client to the real test server; ``crash`` is the canary: if a call that
must not run ever ran, that server would be gone.
"""
from __future__ import annotations

import json

import pytest
from support.tool_helpers import hub, Script, call_text  # noqa: F401 (hub: a fixture)

from app.conversation.session import ChatSession
from app.tools.display import printable
from app.tools.loop import ALWAYS, DENY, ONCE, ToolLoop
from app.settings.tools import ToolSettings
from backends.base import SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template


@pytest.fixture(scope="module")
def qwen(qwen_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(qwen_path)


def make_loop(tok, hub, replies, *, approve=None, **settings):
    template, _ = resolve_template("auto", tok)  # Qwen2.5-Coder's own template
    script = Script(tok, replies)
    session = ChatSession(tok, template, backend=ScriptedBackend(script), sampling=SamplingParams(temperature=0),
                          context_size=8192)
    asked = []

    def ask(call, server):
        asked.append((server, call.name))
        return approve(call, server) if approve else ONCE

    loop = ToolLoop(session, hub, hub.tools(["test"]), approve=ask, settings=ToolSettings(**settings))
    return loop, script, asked


def run(loop, text):
    events = list(loop.send(text))
    assert events[-1].kind == "done"
    return events


def test_a_multi_step_turn(qwen, hub):
    loop, script, asked = make_loop(qwen, hub, [
        "Let me add.\n" + call_text("add", {"a": 2, "b": 3}),
        call_text("echo", {"text": "sum=5"}),
        "The sum is 5.",
    ])
    events = run(loop, "What is 2 + 3?")
    session = loop.session
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    first = session.messages[1]
    assert first.content == "Let me add."
    assert [c["function"] for c in first.tool_calls] == [{"name": "add", "arguments": {"a": 2, "b": 3}}]
    assert session.messages[2].content == "5" and session.messages[2].tool_call_id == first.tool_calls[0]["id"]
    assert session.messages[4].content == "sum=5"
    assert session.messages[-1].content == "The sum is 5."
    assert asked == [("test", "add"), ("test", "echo")]
    # each step's prompt holds the results, rendered by the model's own template
    assert "<tool_response>\n5\n</tool_response>" in qwen.decode(script.prompts[1])
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in qwen.decode(script.prompts[1])
    assert "<tools>" in qwen.decode(script.prompts[0]) and '"name": "hang"' in qwen.decode(script.prompts[0])
    # stats count every id: three steps of completion, the call markup, the results
    stats = events[-1].stats
    assert stats.model_steps == 3 and session.messages[-1].stats == stats
    assert stats.completion_tokens == sum(len(r) for r in script.replies)
    calls = [qwen.encode(call_text("add", {"a": 2, "b": 3}), special=True),
             qwen.encode(call_text("echo", {"text": "sum=5"}), special=True)]
    assert stats.tool_call_tokens == sum(len(c) for c in calls)
    assert stats.tool_result_tokens == len(qwen.encode("5")) + len(qwen.encode("sum=5"))
    assert stats.prompt_tokens == len(script.prompts[2])
    kinds = [e.kind for e in events]
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2
    streamed = "".join(e.text for e in events if e.kind == "tool_call_delta")
    assert streamed == call_text("add", {"a": 2, "b": 3}) + call_text("echo", {"text": "sum=5"})
    assert "".join(e.text for e in events if e.kind == "content") == "Let me add.\nThe sum is 5."


def test_parallel_calls_in_one_step(qwen, hub):
    loop, script, _ = make_loop(qwen, hub, [
        call_text("add", {"a": 1, "b": 2}) + "\n" + call_text("echo", {"text": "x"}), "3 and x."])
    run(loop, "Two things")
    assert [m.role for m in loop.session.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.content for m in loop.session.messages[2:4]] == ["3", "x"]
    prompt = qwen.decode(script.prompts[1])
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\nx\n</tool_response><|im_end|>" in prompt


def test_a_malformed_call_is_shown_and_never_run(qwen, hub):
    bad = '<tool_call>\n{"name": "crash", "arguments": {"now": true,}}\n</tool_call>'
    loop, script, asked = make_loop(qwen, hub, [bad, "Sorry."])
    events = run(loop, "Go")
    call_event = next(e for e in events if e.kind == "tool_call")
    assert call_event.data[0].error.startswith("malformed tool call")
    result = loop.session.messages[2]
    assert result.role == "tool" and "malformed tool call" in result.content and "not run" in result.content
    assert loop.session.messages[1].content == bad.strip() and loop.session.messages[1].tool_calls is None
    assert asked == [] and "test" not in hub.failures  # crash never ran: the server is alive
    assert hub.call("test", "add", {"a": 0, "b": 0}).text == "0"
    assert "malformed tool call" in qwen.decode(script.prompts[1])


def test_denied_calls_go_back_as_results(qwen, hub):
    loop, script, asked = make_loop(qwen, hub, [call_text("crash", {}), "OK, I won't."], approve=lambda c, s: DENY)
    events = run(loop, "Crash it")
    assert asked == [("test", "crash")]
    assert loop.session.messages[2].content == "error: the user denied this tool call"
    assert next(e for e in events if e.kind == "tool_result").data.status == "denied"
    assert hub.call("test", "echo", {"text": "alive"}).text == "alive"
    assert loop.session.messages[-1].content == "OK, I won't."


def test_always_asks_once_per_tool_and_auto_approve_never(qwen, hub):
    loop, _, asked = make_loop(qwen, hub, [call_text("add", {"a": 1, "b": 1}), call_text("add", {"a": 2, "b": 2}),
                                           call_text("echo", {"text": "e"}), "done"],
                               approve=lambda c, s: ALWAYS, auto_approve=("test.echo",))
    run(loop, "Add twice")
    assert asked == [("test", "add")]
    assert [m.content for m in loop.session.messages if m.role == "tool"] == ["2", "4", "e"]


def test_the_step_limit_stops_the_turn(qwen, hub):
    loop, script, _ = make_loop(qwen, hub, [call_text("add", {"a": 1, "b": 1})] * 3, max_steps=2)
    events = run(loop, "Loop forever")
    assert len(script.prompts) == 2 and events[-1].stats.model_steps == 2
    assert any(e.kind == "notice" and "limit of 2 model steps" in e.text for e in events)
    assert [m.role for m in loop.session.messages] == ["user", "assistant", "tool", "assistant"]


def test_a_long_result_is_cut_to_the_budget(qwen, hub):
    loop, script, _ = make_loop(qwen, hub, [call_text("big", {"size": 1_000_000}), "Long."], result_tokens=64)
    events = run(loop, "Big")
    result = loop.session.messages[2].content
    assert len(qwen.encode(result)) <= 64 and "result cut to fit the context: its first" in result
    assert result.endswith(" of 1,000,000 characters]")
    assert result.startswith("0123456789 the quick brown fox")
    assert any(e.kind == "notice" and "was 1,000,000 characters; kept " in e.text and "(tools.result_tokens)" in e.text
               for e in events)
    assert events[-1].stats.tool_result_tokens == len(qwen.encode(result))


def test_an_unknown_tool_is_not_run(qwen, hub):
    loop, _, asked = make_loop(qwen, hub, [call_text("rm_rf", {"path": "/"}), "Hm."])
    run(loop, "Delete")
    assert asked == [] and "no tool named 'rm_rf'" in loop.session.messages[2].content


def test_a_hostile_result_stays_plain_text(qwen, hub):
    loop, script, _ = make_loop(qwen, hub, [call_text("hostile", {}), "I see."])
    events = run(loop, "Read it")
    result = loop.session.messages[2].content
    assert "<|im_start|>system" in result and "\x1b[2J" in result  # the model gets it unchanged...
    prompt = script.prompts[1]
    im_start, im_end = qwen.special_tokens["<|im_start|>"], qwen.special_tokens["<|im_end|>"]
    rendered = loop.session.last_prompt.text
    # ...but as text: only the template's own markers are control ids
    assert prompt.count(im_start) == rendered.count("<|im_start|>") - result.count("<|im_start|>")
    assert prompt.count(im_end) == rendered.count("<|im_end|>") - result.count("<|im_end|>")
    assert qwen.special_tokens["<|endoftext|>"] not in prompt
    shown = next(e for e in events if e.kind == "tool_result").text
    assert "\x1b" not in printable(shown) and "\x07" not in printable(shown)
    assert "\\x1b[2J" in printable(shown)


def test_a_repeated_call_is_answered_from_the_first_result(qwen, hub):
    loop, script, asked = make_loop(qwen, hub, [call_text("add", {"a": 5, "b": 5}), call_text("add", {"b": 5, "a": 5}),
                                                "Ten."])
    events = run(loop, "5+5")
    outcomes = [e.data for e in events if e.kind == "tool_result"]
    assert [o.status for o in outcomes] == ["ok", "repeat"] and asked == [("test", "add")]
    assert "its result was: 10" in outcomes[1].text
    assert loop.session.messages[-1].content == "Ten."


def test_tool_instructions_join_the_system_prompt_only_while_tools_are_given(qwen, hub):
    from app.tools.setup import tools_prompt_tokens

    rule = "Answer from the tool's result."
    loop, script, _ = make_loop(qwen, hub, ["Done."], instructions=rule)
    session = loop.session
    session.set_system("Be brief.")
    run(loop, "Hi")
    prompt = qwen.decode(script.prompts[0])
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n" + rule + "\n\n# Tools")
    assert session.messages[-1].record.messages[0].content == "Be brief.\n\n" + rule
    # their cost is the tools' cost: the schemas and the instructions together
    with_rule = tools_prompt_tokens(session)
    session.tool_instructions = ""
    # (the separator may merge with the template's own newlines)
    assert len(qwen.encode(rule)) <= with_rule - tools_prompt_tokens(session) <= len(qwen.encode("\n\n" + rule))
    # without tools the template sees the system prompt alone, exactly
    session.tools, session.tool_instructions = None, rule
    assert session.system_text == "Be brief."
    assert tools_prompt_tokens(session) == 0
