"""Tools in the TUI (Pilot): the approval dialog, tool-call blocks, /tools, a hostile result.

The real Qwen2.5-Coder tokenizer and chat template and the real MCP test
server run; only the backend replays scripted replies (one per model step).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tools.mcp_client import ServerConfig
from app.settings.tools import ToolSettings
from app.tui.app import ChatApp
from app.tui.loader import scripted_loader
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.notice import Notice
from app.tui.widgets.tool_approval import ToolApprovalScreen
from app.tui.widgets.tool_call_block import ToolCallBlock
from support.tui_helpers import stable_timings

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parents[2] / "support" / "mcp_test_server.py"


def call(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture
def tools_app(qwen_path, store):
    def make(replies, **settings) -> ChatApp:
        tools = ToolSettings(enabled="test", servers={"test": ServerConfig("test", sys.executable, (str(SERVER),))},
                             **settings)
        options = ChatOptions(model=str(qwen_path), theme="textual-dark", tools=tools)
        return ChatApp(options, loader=scripted_loader(qwen_path, replies), stats_filter=stable_timings, store=store)

    return make


async def ready(pilot) -> None:
    await wait_loaded(pilot)
    await wait_for(pilot, lambda: pilot.app.tools.infos, 60, "the MCP server's tools")


async def approve_next(pilot, key: str) -> ToolApprovalScreen:
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), 60, "the approval dialog")
    screen = app.screen
    await pilot.press(key)
    return screen


async def test_approve_once_runs_the_call_and_the_block_shows_it(tools_app, store):
    app = tools_app([call("add", {"a": 40, "b": 2}), "It is 42."])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "What is 40 + 2?")
        screen = await approve_next(pilot, "y")
        assert (screen.server, screen.tool, screen.arguments) == ("test", "add", {"a": 40, "b": 2})
        await wait_reply(pilot)
        block = app.query_one(ToolCallBlock)
        assert block.status == "ok" and str(block.title).startswith("🔧 test.add · ok · ")
        assert str(block.result_text.render()) == "42"
        reply = app.query_one(AssistantMessage)
        assert reply.content == "It is 42."
        stats = app.session.messages[-1].stats
        assert stats.model_steps == 2 and stats.tool_result_tokens == len(app.chat.tokenizer.encode("42"))
        assert "2 steps · tool calls" in str(reply.query_one(".stats").render())
        stored = store.load(app.history.recorder.conversation_id).messages
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[1].tool["tool_calls"][0]["function"]["name"] == "add" and stored[2].content == "42"


async def test_deny_sends_the_denial_back_and_always_asks_once(tools_app):
    app = tools_app([call("crash", {}), call("add", {"a": 1, "b": 1}), call("add", {"a": 2, "b": 2}), "Done."])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Go")
        await approve_next(pilot, "n")  # crash: denied
        await approve_next(pilot, "a")  # add: always
        await wait_reply(pilot)
        assert not isinstance(app.screen, ToolApprovalScreen)  # the second add was not asked about
        statuses = [b.status for b in app.query(ToolCallBlock)]
        assert statuses == ["denied", "ok", "ok"]
        assert [m.content for m in app.session.messages if m.role == "tool"] == [
            "error: the user denied this tool call", "2", "4"]
        assert app.tools.hub.call("test", "echo", {"text": "alive"}).text == "alive"  # crash never ran


async def test_esc_during_the_dialog_stops_the_turn(tools_app):
    app = tools_app([call("crash", {}), "never"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Go")
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), 60, "the dialog")
        app.action_stop()
        await wait_reply(pilot)
        assert not isinstance(app.screen, ToolApprovalScreen)
        assert app.session.messages[-1].role == "tool" and "denied" in app.session.messages[-1].content
        assert app.tools.hub.call("test", "echo", {"text": "alive"}).text == "alive"


async def test_a_hostile_result_is_inert_text(tools_app):
    app = tools_app([call("hostile", {}), "Noted."])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Read")
        await approve_next(pilot, "y")
        await wait_reply(pilot)
        shown = str(app.query_one(ToolCallBlock).result_text.render())
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\\x1b[2J" in shown and "<|im_start|>system" in shown
        prompt = app.session.last_prompt.ids
        im_start = app.chat.tokenizer.special_tokens["<|im_start|>"]
        result = app.session.messages[2].content
        # the result's own "<|im_start|>" texts are plain text: only the template's are control ids
        assert prompt.count(im_start) == app.session.last_prompt.text.count("<|im_start|>") - result.count("<|im_start|>")


async def test_slash_tools_lists_tools_and_their_cost(tools_app):
    app = tools_app(["hi"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "/tools")
        text = str(app.query(Notice).last().render())
        assert "test (stdio: " in text and ": 8 tools" in text
        from app.tools.setup import schema_tokens

        add = next(t for t in app.tools.infos if t.name == "add")
        assert f"{schema_tokens(app.chat.tokenizer, add.schema())} tokens" in text
        assert "In this chat's prompt the tools take" in text


async def test_a_resumed_tool_conversation_shows_its_calls(tools_app, store):
    app = tools_app([call("echo", {"text": "\x1b[31mred"}), "Echoed."])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Echo")
        await approve_next(pilot, "y")
        await wait_reply(pilot)
        conv_id = app.history.recorder.conversation_id
        await send(pilot, "/new")
        assert not app.query(ToolCallBlock)
        await app.history.resume_conversation(conv_id)
        await pilot.pause()
        block = app.query_one(ToolCallBlock)
        assert block.collapsed and str(block.title) == "🔧 echo · result"
        assert str(block.result_text.render()) == "\\x1b[31mred"
        assert json.loads(str(block.call_text.render()).replace("\\x1b", "\\u001b")) == {"text": "\x1b[31mred"}
        assert [m.role for m in app.session.messages] == ["user", "assistant", "tool", "assistant"]
