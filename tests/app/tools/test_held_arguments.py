"""``[tools] constrain_arguments`` (issue 46 item 5): a call's arguments held to its tool's input schema.

The tools are the real MCP test server's (tests/support/mcp_test_server.py); the grammar is compiled
against Qwen2.5-Coder's real vocabulary as tokchat reads it, and the reply comes from the real llama.cpp
engine through the real tool loop, whose own parser judges the calls.  The control is the same prompt with
the arguments free: there the model's call breaks the ``add`` tool's schema (2.5 is not an integer).
"""
from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator
from support.tool_helpers import hub  # noqa: F401 (a fixture)

from app.conversation.session import ChatSession
from app.settings.tools import ToolSettings
from app.tools.calls import HERMES, arguments_constraint, hold_arguments, parse_reply
from app.tools.loop import ONCE, ToolLoop
from backends import LoadOptions, open_backend
from backends.base import SamplingParams
from backends.constraint import GrammarVocabulary
from templates import resolve_template

ASK = "Use the add tool to add 2.5 and 3."


@pytest.fixture(scope="module")
def qwen(qwen_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(qwen_path)


def test_the_grammar_takes_a_call_that_matches_and_cuts_one_that_does_not(qwen, hub):
    tools = hub.tools(["test"])
    constraint = arguments_constraint(qwen, HERMES, tools)
    vocab = GrammarVocabulary(qwen, [qwen.special_tokens["<|im_end|>"]])
    end = qwen.special_tokens["<|im_end|>"]

    def accepted(text: str) -> str:
        reply = vocab.start(constraint)
        ids = qwen.encode(text, special=True) + [end]
        return qwen.decode(ids[: len(reply.cut_draft(ids))])

    good = 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    assert accepted(good) == good + "<|im_end|>"
    assert accepted("It is 5.") == "It is 5.<|im_end|>"  # an answer in words stays free
    assert accepted('<tool_call>\n{"name": "add", "arguments": {"a": 2.5').endswith('"a": 2')  # no float
    assert accepted('<tool_call>\n{"name": "nosuch"').endswith('"name": "')  # only the tools given
    assert accepted('{"name": "add", "arguments": {"a": "2"}}').endswith('"arguments": {"a":')  # a bare call too


@pytest.fixture(scope="module")
def engine(qwen_path):
    backend = open_backend(qwen_path, LoadOptions(backend="cpu", n_ctx=4096))
    yield backend
    backend.close()


def _first_step(qwen, hub, engine, held: bool):
    """One model step of the real tool loop (max_steps 1: the calls are parsed, not run), and its calls as
    the loop's own parser reads them."""
    template, _ = resolve_template("auto", qwen)
    session = ChatSession(qwen, template, backend=engine, context_size=4096,
                          sampling=SamplingParams(temperature=0.0, max_tokens=80))
    tools = hub.tools(["test"])
    loop = ToolLoop(session, hub, tools, approve=lambda call, server: ONCE,
                    settings=ToolSettings(constrain_arguments=held, max_steps=1))
    list(loop.send(ASK))
    reply = session.messages[-1]
    return loop, parse_reply(qwen, loop.syntax, reply.reply_ids, reply.content, {t.name: t for t in tools}).calls


def test_held_arguments_make_the_real_models_call_valid_where_the_free_one_is_not(qwen, hub, engine):
    add = {t.name: t for t in hub.tools(["test"])}["add"]
    schema = Draft202012Validator(add.input_schema)

    _, free_calls = _first_step(qwen, hub, engine, held=False)
    assert free_calls and any(c.error is not None or list(schema.iter_errors(c.arguments)) for c in free_calls)

    loop, held_calls = _first_step(qwen, hub, engine, held=True)
    assert loop.session.sampling.constraint.kind == "tool_calls"
    assert held_calls and all(c.error is None and c.name == "add" for c in held_calls)
    assert all(not list(schema.iter_errors(c.arguments)) for c in held_calls), [c.arguments for c in held_calls]


def test_arguments_stay_free_in_one_line_while_a_reply_format_is_on(qwen, hub):
    from backends.constraint import parse_constraint
    from backends.scripted import ScriptedBackend

    template, _ = resolve_template("auto", qwen)
    session = ChatSession(qwen, template, backend=ScriptedBackend(lambda ids: []), context_size=4096,
                          sampling=SamplingParams(constraint=parse_constraint("json")))
    said = hold_arguments(session, HERMES, hub.tools(["test"]))
    assert said == "tool arguments are not held while a reply format is on (/format off holds them)"
    assert session.sampling.constraint.kind == "json"
