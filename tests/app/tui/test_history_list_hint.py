"""The history list's hint names keys that act, and its dialogs and width fit small terminals (issue 44, T8, T11).

The list's keys (ctrl+r rename, ctrl+d delete ...) act only while the cursor is in it: elsewhere the
same keys act on the chat (ctrl+r regenerates).  Every check reads what is drawn.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.tui.widgets.history_sidebar import HistorySidebar

pytestmark = pytest.mark.anyio


async def two_conversations(pilot) -> None:
    await wait_loaded(pilot)
    await send(pilot, "tell me about dragon fire")
    await wait_reply(pilot)
    await pilot.press("ctrl+n")
    await send(pilot, "something else")
    await wait_reply(pilot)


async def test_opening_a_conversation_closes_the_list_and_its_keys_act_on_the_chat_again(scripted_app, store):
    app = scripted_app(["Dragons breathe fire.", "Other.", "Regenerated."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await two_conversations(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert "ctrl+r rename" in words(drawn(app))
        await pilot.press("down", "enter")  # the older conversation
        await wait_for(pilot, lambda: "tell me about dragon fire" in drawn(app, app.chat_view), what="it to open")
        await pilot.pause()
        screen = words(drawn(app))
        assert "rename" not in screen and "ctrl+d delete" not in screen  # no hint of keys that would not act
        assert app.focused is app.prompt_input
        await pilot.press("ctrl+r")  # what the footer says: regenerate, not a rename dialog
        await pilot.pause()
        assert not app.screen.is_modal
        await wait_reply(pilot)
        assert "Regenerated." in drawn(app, app.chat_view)


async def test_the_hint_says_how_to_get_back_when_the_cursor_leaves_the_list(scripted_app, store):
    app = scripted_app(["Dragons breathe fire.", "Other."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await two_conversations(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        sidebar = app.query_one(HistorySidebar)
        await pilot.click("#prompt")  # the cursor leaves the list, which stays open
        await pilot.pause()
        shown = words(drawn(app, sidebar))
        assert "rename" not in shown and "ctrl+b: back to this list" in shown
        await pilot.press("ctrl+b")  # back to the list, not closed
        await pilot.pause()
        shown = words(drawn(app, sidebar))
        assert "ctrl+r rename" in shown and "back to this list" not in shown
        assert app.focused is sidebar.query_one("#history-search")
        await pilot.press("ctrl+b")  # with the cursor in it: closes
        await pilot.pause()
        assert sidebar.region.width == 0 and app.focused is app.prompt_input


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (60, 20)])
async def test_the_delete_dialog_hint_is_drawn_whole(scripted_app, store, size):
    app = scripted_app(["Dragons breathe fire."])
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "tell me about dragon fire")
        await wait_reply(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: app.screen.is_modal, what="the dialog")
        await pilot.pause()
        dialog = words(drawn(app, app.screen.query_one("Vertical"), inside=True))
        assert ("Enter or Esc keeps it. ctrl+d again deletes it (or Tab to Delete, then Enter); ctrl+z in the "
                "history brings it back until you quit.") in dialog


async def test_the_history_list_leaves_the_chat_room_at_60_columns(scripted_app, store):
    app = scripted_app(["Dragons breathe fire."])
    async with app.run_test(size=(60, 20), notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "tell me about dragon fire")
        await wait_reply(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        sidebar = app.query_one(HistorySidebar)
        assert 0 < sidebar.region.width <= 30 and app.chat_view.region.width >= 25  # it was 13
        shown = words(drawn(app, app.chat_view))
        assert "tell me about" in shown and "Dragons breathe" in shown
