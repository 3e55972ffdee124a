"""Helpers shared by the TUI tests (and tests/app/tui/make_screenshot.py): waiting on the app, typing.

Kept out of conftest.py so that test modules import them by a name no
other conftest shadows.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Callable

#: terminal size for every Pilot and snapshot run
SIZE = (100, 30)


def stable_timings(stats):
    """Fixed TTFT and speed so a snapshot frame never holds a clock reading."""
    return replace(stats, ttft_s=0.25, tokens_per_s=123.4)


async def wait_for(pilot, condition: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    """Let the app run until ``condition()`` holds (fails with ``what`` after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await pilot.pause(0.02)


async def wait_loaded(pilot) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.query_one("ModelBar").state in ("ready", "failed"),
                   what="the model to load")
    await pilot.pause()


async def wait_reply(pilot, timeout_s: float = 120.0) -> None:
    """Until the current reply has finished and the UI has drained it."""
    app = pilot.app
    await asyncio.sleep(0)
    await wait_for(pilot, lambda: not app.generating, timeout_s, what="the reply to finish")
    await pilot.pause()


async def send(pilot, text: str) -> None:
    """Type ``text`` into the prompt box (as keys) and press Enter."""
    pilot.app.prompt_input.focus()
    await pilot.press(*[("space" if ch == " " else ch) for ch in text])
    await pilot.press("enter")
    await pilot.pause()
