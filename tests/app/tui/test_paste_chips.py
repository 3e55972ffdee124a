"""Pilot tests: a large paste becomes one attachment chip with its exact token cost, never sent.

The real app with the real tokenizer and template (scripted backend).  The
paste arrives as the terminal driver delivers it, one ``events.Paste``; the
oracle for the chip's cost and the meter is the tokenizer counting the
message as it is sent (the attachment block, and the blocks plus the text).
"""
from __future__ import annotations

import pytest
from textual import events
from support.tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

from app.conversation.attachments import compose, file_block
from app.settings.options import ChatOptions
from app.tui.widgets.attachment_chips import AttachmentChips, AttachmentView
from app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio

BIG = "".join(f"line {n}: some pasted log output\n" for n in range(5000))


async def paste(pilot, text: str) -> None:
    app = pilot.app
    app.prompt_input.focus()
    app.prompt_input.post_message(events.Paste(text))
    await pilot.pause()


async def test_a_5000_line_paste_becomes_one_priced_chip_nothing_sent_the_meter_counts_it(scripted_app):
    app = scripted_app(["Got it."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        before = list(app.session.messages)
        await paste(pilot, BIG)
        await wait_for(pilot, lambda: len(app.attachments.pending) == 1, what="the chip")
        item = app.attachments.pending[0]
        exact = app.session.draft_tokens(file_block("paste-1.txt", len(BIG.encode()), BIG))
        assert (item.name, item.text, item.tokens) == ("paste-1.txt", BIG, exact)
        # nothing typed, nothing sent
        assert app.prompt_input.text == "" and app.session.messages == before and not app.generating
        chips = app.query_one(AttachmentChips)
        labels = [str(label.render()) for label in chips.query(".chip")]
        assert len(labels) == 1 and f"{exact} tokens" in labels[0] and "5000 lines" in labels[0]
        await wait_for(pilot, lambda: app.meter.draft == exact, what="the meter to count the chip")
        # typing adds to it: the meter counts the message as it will be sent
        await pilot.press(*"why?")
        await wait_for(pilot, lambda: app.meter.draft == app.session.draft_tokens(compose("why?", [item])),
                       what="the meter to count chip and text")
        # far more than the context holds: Enter refuses it, and keeps the chip and the text
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.messages == before and app.attachments.pending == [item]
        assert app.prompt_input.text == "why?"


async def test_a_chip_is_sent_with_the_next_message(scripted_app):
    app = scripted_app(["Got it."])
    text = "".join(f"row {n}\n" for n in range(60))
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await paste(pilot, text)
        await wait_for(pilot, lambda: len(app.attachments.pending) == 1, what="the chip")
        item = app.attachments.pending[0]
        await pilot.press(*"sum")
        await pilot.press("enter")
        await wait_reply(pilot)
        assert app.session.messages[0].content == compose("sum", [item]) and app.attachments.pending == []
        assert not app.query_one(AttachmentChips).has_class("-some")
        assert "📎 paste-1.txt" in str(app.query(UserMessage).last().render())


async def test_small_pastes_stay_inline(scripted_app):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await paste(pilot, "one\ntwo\nthree")
        assert app.prompt_input.text == "one\ntwo\nthree" and app.attachments.pending == []


async def test_the_token_threshold_makes_a_chip_of_few_long_lines(scripted_app, smollm_path):
    options = ChatOptions(model=str(smollm_path), theme="textual-dark", paste_chip_tokens=50, paste_chip_lines=40)
    app = scripted_app(["x"], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        short = "word " * 30  # under 50 tokens
        await paste(pilot, short)
        assert app.prompt_input.text == short and app.attachments.pending == []
        app.prompt_input.load_text("")
        long = "word " * 80
        assert app.session.draft_tokens(long) >= 50
        await paste(pilot, long)
        assert app.prompt_input.text == "" and len(app.attachments.pending) == 1


async def test_a_chip_opens_goes_back_into_the_box_or_is_removed(scripted_app):
    app = scripted_app(["x"])
    text = "".join(f"row {n}\n" for n in range(60))
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await paste(pilot, text)
        await wait_for(pilot, lambda: len(app.query("#chip-open-0")) == 1, what="the chip")
        await pilot.click("#chip-open-0")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachmentView), what="the viewer")
        assert app.screen.query_one("#attachment-text").text == text
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, AttachmentView), what="the viewer to close")
        await pilot.click("#chip-edit-0")
        await wait_for(pilot, lambda: app.attachments.pending == [], what="the chip to go")
        assert app.prompt_input.text == text
        await _meter(pilot, app, text)  # the box's text is counted now, as typed text
        app.prompt_input.load_text("")
        await paste(pilot, text)
        await wait_for(pilot, lambda: len(app.query("#chip-remove-0")) == 1, what="the chip")
        await pilot.click("#chip-remove-0")
        await wait_for(pilot, lambda: app.attachments.pending == [], what="the chip to go")
        assert app.prompt_input.text == "" and app.session.messages == []
        await wait_for(pilot, lambda: app.meter.draft == 0, what="the meter to drop it")


async def _meter(pilot, app, text) -> bool:
    await wait_for(pilot, lambda: app.meter.draft == app.session.draft_tokens(text), what="the meter")
    return True
