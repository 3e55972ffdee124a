"""Instant resume in the TUI (issue 45): a conversation reopened from the history loads the engine's saved state.

The real app on SmolLM2 in its own engine process, twice, on one real SQLite history and one
state folder: the first app answers a long message and ends (its engine saves the state); the
second opens the conversation from the history list (Ctrl+B, Enter) and asks again.  The check is
where the user looks: the reply's drawn stats line (and the token inspector's head, F2) says how
many ids came from disk, and the prompt ids it counts as new are only those the state lacked.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.widgets.assistant_message import AssistantMessage
from backends.base import SamplingParams
from backends.state_cache import read_saved

NOTES = "Here are my notes on sourdough. " + " ".join(
    f"Day {d}: fed the starter with {d * 10} g of rye flour; it rose {d % 3 + 1} times." for d in range(1, 13)
) + " What should I change?"

pytestmark = pytest.mark.anyio


def _app(smollm_path: Path, store, state_dir: Path) -> ChatApp:
    options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=2048, state_dir=state_dir,
                          sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1))
    return ChatApp(options, store=store)


async def test_a_conversation_reopened_from_the_history_loads_its_state(smollm_path, store, tmp_path):
    state_dir = tmp_path / "state"
    first = _app(smollm_path, store, state_dir)
    async with first.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        first.prompt_input.text = NOTES  # the long message as if pasted: typing it key by key proves nothing here
        first.prompt_input.focus()
        await pilot.press("enter")
        await wait_reply(pilot, timeout_s=600)
        (widget,) = list(first.query(AssistantMessage))
        assert "state: none (nothing saved for these ids)" in words(drawn(first, widget.query_one(".stats")))
        # the engine writes the state after the reply, on a thread of its own
        await wait_for(pilot, lambda: list(state_dir.rglob("*.kv")), 120, "the state file")
    [saved_path] = state_dir.rglob("*.kv")
    saved = len(read_saved(saved_path).ids)

    second = _app(smollm_path, store, state_dir)
    async with second.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Day 12: fed the starter" in words(drawn(second)), what="the conversation")
        await send(pilot, "And in two words?")
        await wait_reply(pilot, timeout_s=600)
        widget = list(second.query(AssistantMessage))[-1]
        line = words(drawn(second, widget.query_one(".stats")))
        print(line)
        assert re.search(rf"state: loaded {saved} ids from disk in \d+\.\d\d s", line), line
        new, total = map(int, re.search(r"prompt (\d+) new / (\d+) total", line).groups())
        assert new == total - saved  # only what the saved state lacked was evaluated
        await pilot.press("f2")  # the token inspector's head line says it too
        await wait_for(pilot, lambda: "state: loaded" in words(drawn(second)), what="the inspector")
        assert re.search(rf"\({new} new\) · state: loaded {saved} ids from disk in", words(drawn(second)))
