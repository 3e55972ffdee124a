"""Keys apply in the order typed, however fast they come (issue 33, item 8).

A terminal delivers a burst of keys at once (a fast typist, a paste of keys, keys typed while a
reply streams).  Printable keys were handled in the box's own key handler while Backspace ran as
a binding after the key had bubbled up to the app, so "Backspace x4, 6+6?, Enter" in one burst
sent "What is 5+5?6+6?".  The burst here is what the terminal driver hands the app: every key
event queued before the app handles the first.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn, words
from textual import events
from textual.keys import _character_to_key
from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

from app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio


def burst(app, keys: list[str]) -> None:
    """Queue ``keys`` (names, or single characters) all at once, as the terminal driver does."""
    for key in keys:
        if len(key) == 1:
            event = events.Key(key if key.isalnum() else _character_to_key(key), key)
        else:
            event = events.Key(key, None)
        event.set_sender(app)
        app._driver.send_message(event)


async def test_backspace_in_a_burst_applies_in_the_order_typed(scripted_app, store):
    app = scripted_app(["Ten.", "Twelve."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "What is 5+5?")
        await wait_reply(pilot)
        await pilot.press("ctrl+g")
        burst(app, ["backspace"] * 4 + list("6+6?") + ["enter"])
        await pilot.pause()
        await wait_reply(pilot)
        assert [words(drawn(app, w, inside=True)) for w in app.query(UserMessage)] == ["What is 6+6?"]
        stored = store.load(app.history.recorder.conversation_id).messages
        assert [(m.role, m.content) for m in stored] == [("user", "What is 6+6?"), ("assistant", "Twelve.")]


async def test_cursor_keys_in_a_burst_apply_in_the_order_typed(scripted_app):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.focus()
        burst(app, list("ac") + ["left", "b", "end", "d", "home", ">", "delete", "A"])
        await pilot.pause()
        await pilot.pause()
        assert app.prompt_input.text == ">Abcd"
        assert ">Abcd" in words(drawn(app, app.prompt_input))
