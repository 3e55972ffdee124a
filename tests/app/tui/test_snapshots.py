"""Pixel snapshots of the main screen states (pytest-textual-snapshot).

A scripted backend replays fixed ids through the real tokenizer and
template, and the two clock readings in TurnStats are pinned
(``stable_timings``), so every frame is the same on every run.  Update the
stored SVGs with ``pytest tests/app/tui/test_snapshots.py --snapshot-update``
after a deliberate change, and look at them.
"""
from __future__ import annotations

from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.app import ChatApp

REPLY = ("Here is a function:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
         "Call it with **two numbers**.")
THINKING = "<think>The user wants 2+2. That is 4.</think>The answer is **4**."


async def ready(pilot) -> None:
    """Loaded."""
    await wait_loaded(pilot)
    await settle(pilot)


async def settle(pilot) -> None:
    """No widget focused, so no text cursor (and no blink phase) is in the frame."""
    pilot.app.set_focus(None)
    await pilot.pause()
    await pilot.pause()


def test_empty_chat(snap_compare, scripted_app):
    assert snap_compare(scripted_app([REPLY]), terminal_size=SIZE, run_before=ready)


def test_finished_reply_with_stats(snap_compare, scripted_app):
    async def run_before(pilot) -> None:
        await ready(pilot)
        await send(pilot, "Write add() in Python")
        await wait_reply(pilot)
        await settle(pilot)

    assert snap_compare(scripted_app([REPLY]), terminal_size=SIZE, run_before=run_before)


def _thinking(expand: bool):
    async def run_before(pilot) -> None:
        await ready(pilot)
        await send(pilot, "What is 2+2?")
        await wait_reply(pilot)
        if expand:
            await pilot.press("ctrl+t")
            await pilot.pause()
        await settle(pilot)

    return run_before


def test_thinking_collapsed(snap_compare, scripted_app):
    assert snap_compare(scripted_app([THINKING]), terminal_size=SIZE, run_before=_thinking(False))


def test_thinking_expanded(snap_compare, scripted_app):
    assert snap_compare(scripted_app([THINKING]), terminal_size=SIZE, run_before=_thinking(True))


def test_generation_error_notice(snap_compare, scripted_app):
    async def run_before(pilot) -> None:
        await ready(pilot)
        await send(pilot, "Tell me a story")
        await wait_reply(pilot)
        await settle(pilot)

    app = scripted_app(["Once upon a time there was a model that stopped."], fail_after=4)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_model_load_failure(snap_compare, tmp_path):
    app = ChatApp(ChatOptions(model="/nonexistent/model.gguf", theme="textual-dark"), store=None)
    assert snap_compare(app, terminal_size=SIZE, run_before=ready)
