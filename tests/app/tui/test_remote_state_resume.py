"""Instant resume through llama-server in the TUI (issue 45, item 5): a conversation reopened from the history
on a restarted server restores the slot the first window saved.

The real app twice, on one real SQLite history and one state folder, chatting through real ``llama-server``
processes on SmolLM2 started with ``--slot-save-path`` on one folder: the first window answers a long
message and closes (its reply's slot is saved on the server's disk); the server is stopped and another
started on the same folder; the second window opens the conversation from the history list (Ctrl+B,
Enter) and asks again.  The check is where the user looks: the reply's drawn stats line and the token
inspector's head (F2) say how many ids came from disk, and the prompt ids counted as new are the server's
own count of what it evaluated.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from support.remote_servers import LlamaServer  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.tui.app import ChatApp  # noqa: E402
from app.tui.widgets.assistant_message import AssistantMessage  # noqa: E402
from backends.base import SamplingParams  # noqa: E402
from backends.remote import RemoteSettings  # noqa: E402

NOTES = "Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour; it rose {d % 3 + 1} times." for d in range(1, 10)
) + " What should I change?"

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _app(smollm_path: Path, url: str, store, state_dir: Path) -> ChatApp:
    options = ChatOptions(model=str(smollm_path), server=RemoteSettings(url=url), ctx=1024, state_dir=state_dir,
                          sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1))
    return ChatApp(options, store=store)


async def test_a_conversation_reopened_on_a_restarted_server_restores_its_slot(smollm_path, store, tmp_path):
    slots, state_dir = tmp_path / "slots", tmp_path / "state"
    slots.mkdir()
    server = LlamaServer(smollm_path, tmp_path, ctx=1024, extra=("--slot-save-path", str(slots))).start()
    try:
        first = _app(smollm_path, server.url, store, state_dir)
        async with first.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            first.prompt_input.text = NOTES  # as if pasted
            first.prompt_input.focus()
            await pilot.press("enter")
            await wait_reply(pilot, timeout_s=600)
            (widget,) = list(first.query(AssistantMessage))
            assert "state: none (nothing saved for these ids)" in words(drawn(first, widget.query_one(".stats")))
            stats = first.session.messages[-1].stats
            saved = stats.prompt_tokens + stats.completion_tokens - 1  # the reply's last id is never evaluated
            await wait_for(pilot, lambda: list(slots.iterdir()), 120, "the slot file")
        server.slots()  # queued behind the save: the file is whole when this answers
    finally:
        server.stop()

    again = LlamaServer(smollm_path, tmp_path, ctx=1024, extra=("--slot-save-path", str(slots))).start()
    try:
        second = _app(smollm_path, again.url, store, state_dir)
        async with second.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            await pilot.press("ctrl+b")
            await pilot.pause()
            await pilot.press("enter")
            await wait_for(pilot, lambda: "Day 9: fed the starter" in words(drawn(second)), what="the conversation")
            await send(pilot, "And in two words?")
            await wait_reply(pilot, timeout_s=600)
            widget = list(second.query(AssistantMessage))[-1]
            line = words(drawn(second, widget.query_one(".stats")))
            assert re.search(rf"state: loaded {saved} ids from disk in \d+\.\d\d s", line), line
            new, total = map(int, re.search(r"prompt (\d+) new / (\d+) total", line).groups())
            assert new == total - saved  # the server evaluated only what the saved slot lacked
            await pilot.press("f2")  # the token inspector's head line says it too
            await wait_for(pilot, lambda: "state: loaded" in words(drawn(second)), what="the inspector")
            assert re.search(rf"\({new} new\) · state: loaded {saved} ids from disk in", words(drawn(second)))
    finally:
        again.stop()
