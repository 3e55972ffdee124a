"""Issue 33, item 11: the small ones, each checked where the user sees it (drawn notices, rows, stats)
or where it is kept (config.toml, the stored reply).  Real app under Pilot, real SQLite, scripted backend.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.history.store import ChatStore
from app.settings.options import ChatOptions
from app.tui.widgets.assistant_message import AssistantMessage

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{n}" for n in range(300))


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    path = tmp_path / "config"
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(path))
    return path


async def test_think_budget_below_minus_one_says_what_minus_one_means(scripted_app, config_dir):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/think budget -5")
        await wait_for(pilot, lambda: toasts(app), what="the refusal")
        assert any("-1" in t and "no limit" in t for t in toasts(app)), toasts(app)
        assert app.session.reasoning_budget is None and not (config_dir / "config.toml").exists()


async def test_think_on_with_no_thinking_switch_is_not_remembered(scripted_app, smollm_path, config_dir):
    options = ChatOptions(model=str(smollm_path), template="chatml", theme="textual-dark")
    app = scripted_app(["x"], options=options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        assert not app.session.template.supports_thinking
        await send(pilot, "/think on")
        await wait_for(pilot, lambda: toasts(app), what="the warning")
        assert any("no thinking switch" in t and "not remembered" in t for t in toasts(app)), toasts(app)
        assert not any(t == "Thinking on" for t in toasts(app))
    assert not (config_dir / "config.toml").exists()


async def test_ctrl_r_and_alt_arrows_while_a_reply_streams_say_why_nothing_happens(scripted_app):
    app = scripted_app(["One.", LONG], delay_s=0.05)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "a")
        await wait_reply(pilot)
        await pilot.press("ctrl+r")  # the second, long reply: a sibling of the first
        await wait_for(pilot, lambda: app.generating and bool(app.query(AssistantMessage).last().content),
                       what="the long reply to stream")
        app.clear_notifications()
        await pilot.press("alt+left")
        await wait_for(pilot, lambda: toasts(app), what="a notice for Alt+Left")
        assert any("streaming" in t for t in toasts(app)), toasts(app)
        app.clear_notifications()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: toasts(app), what="a notice for Ctrl+R")
        assert any("streaming" in t for t in toasts(app)), toasts(app)
        assert app.generating
        await pilot.press("escape")
        await wait_reply(pilot)


async def test_a_fork_of_a_deleted_conversation_says_so_in_the_history(scripted_app, store):
    app = scripted_app(["One.", "Two."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "a")
        await wait_reply(pilot)
        source = app.history.conversation_id
        await send(pilot, "/fork")
        await wait_for(pilot, lambda: app.history.conversation_id != source, what="the fork")
        with ChatStore(store.path) as other:  # another window deletes the source
            other.delete(source)
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: len(app.query("ConversationItem")) == 1, what="the history list")
        await pilot.pause()
        row = words(drawn(app, app.query("ConversationItem").first()))
        assert "fork of a deleted conversation" in row and f"#{source}" not in row, row


async def test_reply_alone_keeps_the_replys_whitespace(scripted_app):
    app = scripted_app(["Hello there.", "x"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        reply = app.session.messages[-1]
        reply.content = "  Hello there.\n\n"  # as a model may write it: indented, then blank lines
        await send(pilot, "/reply")
        assert app.prompt_input.text == "/reply   Hello there.\n\n"
        await pilot.press("enter")
        await wait_reply(pilot)
        assert app.session.messages[-1].opening == "  Hello there.\n\n"


async def test_reply_over_a_reply_is_not_a_cache_cut(scripted_app):
    app = scripted_app(["One two three four.", " and more."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        await send(pilot, "/reply Well")
        await wait_reply(pilot)
        assert app.session.messages[-1].opening == "Well"
        shown = words(drawn(app, app.query(AssistantMessage).last()))
        assert "prompt " in shown and "cache cut" not in shown, shown
        assert app.session.messages[-1].stats.cache_cut_tokens == 0
