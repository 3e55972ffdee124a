"""The history list (Ctrl+B) as a user types into it, and two windows on one history (issue 33, 1 and 2).

Typed words must search, never act: "dragon f" once opened a delete dialog, two rename
dialogs and made a fork.  A deletion needs a key no word contains and can be undone.
A conversation deleted in another window must not stop this one from saving.
Every check reads what is drawn (tests/support/screen_text.py) and what SQLite holds.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.history.store import ChatStore
from app.tui.widgets.history_sidebar import HistorySidebar

pytestmark = pytest.mark.anyio


def keys(text: str) -> list[str]:
    return ["space" if ch == " " else ch for ch in text]


def stored(store: ChatStore) -> list[tuple[int, str, list[str]]]:
    """Every conversation as (id, title, shown messages)."""
    return [(c.id, c.title, [m.content for m in store.load(c.id).messages]) for c in store.list_conversations()]


def asking_to_delete(app) -> bool:
    """A dialog asking to delete a conversation is drawn."""
    return app.screen.is_modal and "Delete “" in drawn(app)


async def two_conversations(pilot, app) -> None:
    await wait_loaded(pilot)
    await send(pilot, "tell me about dragon fire")
    await wait_reply(pilot)
    await pilot.press("ctrl+n")
    await send(pilot, "something else")
    await wait_reply(pilot)


async def test_typed_words_in_the_history_go_to_its_search_box(scripted_app, store):
    app = scripted_app(["Dragons breathe fire.", "Other."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await two_conversations(pilot, app)
        before = stored(store)
        await pilot.press("ctrl+b")
        await pilot.pause()
        sidebar = app.query_one(HistorySidebar)
        # d delete, r rename, n new, f fork, y yes: letters of words, typed quickly, must only search
        await pilot.press(*keys("dragon"))
        await wait_for(pilot, lambda: "something else" not in drawn(app, sidebar), what="the search to filter")
        shown = drawn(app, sidebar)
        assert "dragon" in shown.splitlines()[1]  # the search box, inside its border
        assert "tell me about dragon fire" in shown
        await pilot.press("tab")  # the list has the focus now: what is typed there still goes to the search box
        await pilot.press(*keys(" fdyrn"))
        await pilot.pause()
        assert not app.screen.is_modal  # no delete, rename or any dialog opened
        assert "dragon fdyrn" in drawn(app, sidebar).splitlines()[1]  # the search box, inside its border
        assert stored(store) == before  # nothing deleted, renamed or forked


async def test_the_history_hint_names_every_key_the_list_takes(scripted_app):
    app = scripted_app(["One."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hello")
        await wait_reply(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        hint = words(drawn(app, app.query_one(HistorySidebar).query_one(".hint-here")))
        for key in ["type to search", "↑↓", "Enter", "ctrl+r", "ctrl+d", "ctrl+z", "ctrl+f", "ctrl+n", "ctrl+b"]:
            assert key in hint, f"{key!r} is not on the hint line: {hint!r}"
        # and the list takes no key but these (a letter would act on a typed word)
        assert {b.key for b in HistorySidebar.BINDINGS} == {"ctrl+r", "ctrl+d", "ctrl+z", "ctrl+f", "up", "down"}


async def test_deleting_needs_a_deliberate_key_and_ctrl_z_undoes_it(scripted_app, store):
    app = scripted_app(["Dragons breathe fire.", "Other."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await two_conversations(pilot, app)
        before = stored(store)
        newest = before[0][0]
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: asking_to_delete(app), what="the delete dialog")
        await pilot.pause()
        dialog = words(drawn(app))
        assert "Delete “something else”?" in dialog and "ctrl+z" in dialog
        await pilot.press(*keys("yes y"))  # letters answer nothing
        await pilot.pause()
        assert asking_to_delete(app) and stored(store) == before
        await pilot.press("enter")  # Cancel has the focus: Enter keeps it
        await pilot.pause()
        assert not app.screen.is_modal and stored(store) == before
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: asking_to_delete(app), what="the delete dialog")
        await pilot.press("ctrl+d")  # the same deliberate key again: deleted
        await wait_for(pilot, lambda: len(store.list_conversations()) == 1, what="the deletion")
        await wait_for(pilot, lambda: any("Deleted “something else”" in t and "ctrl+z" in t for t in toasts(app)),
                       what="the undo notice")
        sidebar = app.query_one(HistorySidebar)
        assert "something else" not in drawn(app, sidebar).split("\n", 1)[1]
        await pilot.press("ctrl+z")
        await wait_for(pilot, lambda: stored(store) == before, what="the conversation to come back")
        assert store.load(newest).info.title == "something else"  # the same id, the same messages
        await wait_for(pilot, lambda: "something else" in drawn(app, sidebar).split("\n", 1)[1],
                       what="the restored row")
        await pilot.press("ctrl+z")  # nothing more to undo: said, and nothing changes
        await wait_for(pilot, lambda: any("Nothing to undo" in t for t in toasts(app)), what="the notice")
        assert stored(store) == before


async def test_undo_of_the_conversation_on_screen_goes_on_recording_into_it(scripted_app, store):
    app = scripted_app(["One.", "Two."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "first")
        await wait_reply(pilot)
        conv = app.history.recorder.conversation_id
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: asking_to_delete(app), what="the delete dialog")
        await pilot.press("tab", "enter")  # Tab to the Delete button, Enter presses it
        await wait_for(pilot, lambda: store.list_conversations() == [], what="the deletion")
        await pilot.press("ctrl+z")
        await wait_for(pilot, lambda: len(store.list_conversations()) == 1, what="the undo")
        await pilot.press("ctrl+b")
        await send(pilot, "second")
        await wait_reply(pilot)
        assert stored(store) == [(conv, "first", ["first", "One.", "second", "Two."])]


async def test_a_deletion_in_another_window_never_stops_saving_in_this_one(scripted_app, store):
    """Window A deletes the conversation window B shows; B goes on saving (a new conversation holding what
    it shows, said in a notice).  A is another connection to the same file, as another process is."""
    app = scripted_app(["One.", "Two.", "Three."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "first")
        await wait_reply(pilot)
        gone = app.history.recorder.conversation_id
        with ChatStore(store.path) as window_a:
            window_a.delete(gone)
        await send(pilot, "second")
        await wait_reply(pilot)
        await wait_for(pilot, lambda: any(f"#{gone} was deleted in another window" in t for t in toasts(app)),
                       what="the notice")
        assert [(title, messages) for _, title, messages in stored(store)] == [
            ("first", ["first", "One.", "second", "Two."])]
        assert not any("history is off" in t.lower() for t in toasts(app))
        await pilot.press("ctrl+n")
        await send(pilot, "third")
        await wait_reply(pilot)
        assert [messages for _, _, messages in stored(store)] == [
            ["third", "Three."], ["first", "One.", "second", "Two."]]
        await pilot.press("ctrl+b")  # the history opens: it was never off
        await pilot.pause()
        sidebar = app.query_one(HistorySidebar)
        assert sidebar.region.width > 0 and "third" in drawn(app, sidebar)


async def test_a_deletion_in_another_window_during_a_reply_keeps_the_reply(scripted_app, store):
    second = "A longer second answer, with enough words that it is still streaming when A deletes."
    app = scripted_app(["One.", second], delay_s=0.1)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "first")
        await wait_reply(pilot)
        gone = app.history.recorder.conversation_id
        app.prompt_input.focus()
        await pilot.press(*keys("second"), "enter")
        await wait_for(pilot, lambda: app.generating, what="the reply to start")
        with ChatStore(store.path) as window_a:
            window_a.delete(gone)
        assert app.generating  # deleted while the reply streams
        await wait_reply(pilot)
        assert [messages for _, _, messages in stored(store)] == [["first", "One.", "second", second]]
        await wait_for(pilot, lambda: any("deleted in another window" in t for t in toasts(app)), what="the notice")


async def test_a_fork_row_is_drawn_whole_in_the_history_list(scripted_app, store):
    """Issue 33, item 5: at 38 columns "(fork)" and "fork of #N" were cut off; a row wraps instead."""
    app = scripted_app(["It learns slowly.", "More."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "tell me about the dragon who learns to cook")
        await wait_reply(pilot)
        source = app.history.recorder.conversation_id
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: app.history.recorder.conversation_id != source, what="the fork")
        await pilot.press("ctrl+b")  # the fork opened, and the list closed: open it again
        await pilot.pause()
        shown = words(drawn(app, app.query_one(HistorySidebar), inside=True))
        assert "tell me about the dragon who learns to cook (fork)" in shown
        assert f"fork of #{source}" in shown
