"""A huge tool result costs its budget, not its size, and is cut to the room the context has (issue 44, C8).

Before: an MCP tool returning 5 MiB of one character was tokenized whole (655,360 ids, 75 s, 1.5 GB)
before the cut to ``result_tokens = 2048``, and a cut of 2,048 could not fit a 2,048-id context, so the
turn failed.  Here the real test server (``repeated``, over stdio through the real MCP client) returns
1 MiB of one character; the tokenizer is the real Qwen one, counted on the way in.
"""
from __future__ import annotations

import io
import json

import pytest
from support.tool_helpers import Script, call_text, hub, sdk_server_config  # noqa: F401 (hub: a fixture)

from app.chat.headless import run_headless
from app.conversation.session import ChatSession
from app.settings.options import ChatOptions
from app.settings.tools import ToolSettings
from app.tools.loop import MAX_CHARS_PER_TOKEN, ONCE, ToolLoop
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template

SIZE = 1024 * 1024


class CountingTokenizer:
    """The real tokenizer, noting the longest text it was asked to encode."""

    def __init__(self, tok) -> None:
        self._tok = tok
        self.longest = 0

    def encode(self, text, *args, **kwargs):
        self.longest = max(self.longest, len(text))
        return self._tok.encode(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tok, name)


@pytest.fixture(scope="module")
def qwen(qwen_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(qwen_path)


def test_a_huge_result_is_tokenized_only_as_far_as_its_budget(qwen, hub):
    tok = CountingTokenizer(qwen)
    template, _ = resolve_template("auto", qwen)
    script = Script(qwen, [call_text("repeated", {"size": SIZE}), "Done."])
    session = ChatSession(tok, template, backend=ScriptedBackend(script), sampling=SamplingParams(temperature=0),
                          context_size=8192)
    loop = ToolLoop(session, hub, hub.tools(["test"]), approve=lambda call, server: ONCE,
                    settings=ToolSettings(result_tokens=2048))
    events = list(loop.send("Repeat"))
    assert [e.kind for e in events if e.kind == "error"] == []
    assert events[-1].kind == "done" and events[-1].stats.model_steps == 2
    result = session.messages[2]
    assert result.role == "tool" and result.content.startswith("a" * 1000)
    assert result.content.endswith(f" of {SIZE:,} characters]")
    assert len(qwen.encode(result.content)) <= 2048
    # the longest text tokenized: the second step's prompt, which holds the kept start; never the result
    assert tok.longest < 2048 * MAX_CHARS_PER_TOKEN + 4096 < SIZE
    assert any(e.kind == "notice" and f"was {SIZE:,} characters" in e.text for e in events)


def test_the_cut_fits_the_room_a_small_context_has_left(qwen_path, qwen):
    """``--ctx 2048`` with ``result_tokens = 2048``: the turn succeeds, the result cut to what is left."""
    script = Script(qwen, [call_text("repeated", {"size": SIZE, "char": "7"}), "Done."])
    tools = ToolSettings(enabled="test", servers={"test": sdk_server_config()}, approve_all=True,
                         result_tokens=2048)
    options = ChatOptions(model=str(qwen_path), prompt="Repeat", sampling=SamplingParams(temperature=0, max_tokens=256),
                          stats=True, history=False, tools=tools, ctx=2048)
    out, err = io.StringIO(), io.StringIO()
    status = run_headless(options, backend=ScriptedBackend(script), out=out, err=err)
    assert (status, out.getvalue()) == (0, "Done.\n"), err.getvalue()
    lines = err.getvalue().splitlines()
    stats = json.loads(lines[-1])
    assert stats["model_steps"] == 2 and stats["finish_reason"] == "stop"
    assert any(f"was {SIZE:,} characters; kept" in line and "the room left in the context of 2048" in line
               for line in lines), lines
    # the second step's prompt and the reply's room fit the context
    assert len(script.prompts[1]) + 256 <= 2048
    assert 1000 < stats["tool_result_tokens"] < 2048 - 256
