"""Compaction where the user sees it: the meter says what the next send will do, drop's notice names the
turns, refuse keeps the draft and says why, summarize shows a marked summary that opens, is stored, and
can be undone; /pin keeps a turn.  The scripted backend on SmolLM2's real tokenizer and template."""
from __future__ import annotations

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.widgets.notice import Notice
from backends.base import SamplingParams

pytestmark = pytest.mark.anyio

LONG = "word " * 60
QUESTION = "tell me more " * 5


def options(smollm_path, compact: str) -> ChatOptions:
    return ChatOptions(model=str(smollm_path), theme="textual-dark", compact=compact,
                       sampling=SamplingParams(temperature=0, max_tokens=48))


async def submit(pilot, text: str) -> None:
    """The text in the box, the meter brought up to date (as after typing), then Enter."""
    app = pilot.app
    app.prompt_input.focus()
    app.prompt_input.load_text(text)
    app.update_draft()
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()


def meter(app) -> str:
    return words(drawn(app, app.meter))


async def fill_until(pilot, what: str, limit: int = 8) -> int:
    """Send turns until the meter, with the next question in the box, says ``what``; the turns sent."""
    app = pilot.app
    for n in range(limit):
        app.prompt_input.load_text(f"turn {n}: {QUESTION}")
        app.update_draft()
        await pilot.pause()
        if what in meter(app):
            return n
        await pilot.press("enter")
        await wait_reply(pilot)
    raise AssertionError(f"the meter never said {what!r}: {meter(app)!r}")


async def test_drop_is_said_on_the_meter_before_the_send_and_names_the_turns(scripted_app, smollm_path):
    app = scripted_app([LONG], options=options(smollm_path, "drop"), context_size=320)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await fill_until(pilot, "next send drops turn")
        said = meter(app)
        assert said.startswith("ctx ") and "· next send drops turn" in said, said
        named = said.split("next send drops ")[1]
        await pilot.press("enter")
        await wait_reply(pilot)
        notices = [words(drawn(app, n)) for n in app.query(Notice) if n.kind == "warning"]
        assert any(f"({named} now;" in text for text in notices), (named, notices)
        assert "next send" not in meter(app)  # the box is empty: nothing to forecast


async def test_refuse_keeps_the_draft_and_says_how_much_must_go(scripted_app, smollm_path):
    app = scripted_app([LONG], options=options(smollm_path, "refuse"), context_size=320)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await fill_until(pilot, "next send is refused")
        stored = len(app.history.store.load(app.history.conversation_id).messages)
        text = app.prompt_input.text
        await pilot.press("enter")
        await pilot.pause()
        assert app.prompt_input.text == text  # the draft stays
        assert len(app.history.store.load(app.history.conversation_id).messages) == stored
        shown = words(drawn(app))
        assert "context full (policy refuse): about" in shown and "would have to leave the prompt" in shown


async def test_summarize_shows_a_marked_stored_summary_that_opens_and_undoes(scripted_app, smollm_path, store):
    from app.tui.widgets.summary_message import SummaryMessage

    app = scripted_app([LONG, "Short summary: the user asked for more, several times."],
                       options=options(smollm_path, "summarize"), context_size=320)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await fill_until(pilot, "next send summarizes turn")
        await pilot.press("enter")
        await wait_reply(pilot)
        await wait_for(pilot, lambda: bool(app.query(SummaryMessage)), what="the summary")
        widget = app.query_one(SummaryMessage)
        app.chat_view.scroll_to_widget(widget, animate=False)
        await pilot.pause()
        title = words(drawn(app, widget))
        assert "Summary of the first" in title and "in the prompt in their place" in title, title
        summary = widget.summary
        assert summary.content not in title  # folded until opened
        await pilot.click(widget.query_one("CollapsibleTitle"))
        await pilot.pause()
        assert words(summary.content) in words(drawn(app, widget))
        rows = store.load(app.history.conversation_id).messages
        kept = [m for m in rows if m.role == "summary"]
        assert kept and kept[0].content == summary.content and kept[0].reply_ids
        assert summary.content in app.session.last_prompt.text  # in the prompt in place of its turns
        await submit(pilot, "/compact undo")
        await pilot.pause()
        assert summary.finish_reason == "undone" and not any(summary.content in m.content for m in app.session._system_messages())
        assert "taken out of the prompt" in words(drawn(app, widget))
        assert store.load(app.history.conversation_id).messages[rows.index(kept[0])].finish_reason == "undone"


async def test_pin_keeps_a_turn_in_the_prompt(scripted_app, smollm_path):
    app = scripted_app([LONG], options=options(smollm_path, "drop"), context_size=320)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await submit(pilot, "the code word is PELICAN")
        await wait_reply(pilot)
        await submit(pilot, "/pin 1")
        assert all(m.pinned for m in app.session.messages[:2])
        for n in range(5):
            await submit(pilot, f"turn {n}: {QUESTION}")
            await wait_reply(pilot)
        assert app.session._window > 2 and "PELICAN" in app.session.last_prompt.text


async def test_the_chats_policy_outlives_a_model_switch(scripted_app, smollm_path):
    app = scripted_app([LONG], options=options(smollm_path, "drop"), context_size=320)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await submit(pilot, "/compact refuse")
        assert app.session.compact_policy == "refuse"
        old = app.chat
        await submit(pilot, f"/model {smollm_path}")
        await wait_for(pilot, lambda: app.chat is not old and app.query_one("ModelBar").state == "ready",
                       what="the model loaded again")
        assert app.session.compact_policy == "refuse"
