"""Enter with a held paste chip, and a chip too large for the context (issue 44, T11).

Enter in an empty box with a chip held sent nothing and said nothing; a chip too large was refused
with advice to "/attach it (an attachment is cut to its token budget)", though it is one, and is
not cut.  Every check reads the drawn screen, the notices and the stored rows.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn, toasts, words
from support.paste_chips import block, paste
from support.tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

pytestmark = pytest.mark.anyio


async def test_enter_in_an_empty_box_sends_the_held_chip(scripted_app, store):
    app = scripted_app(["Read it."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.focus()
        await paste(pilot, block("A"))
        await wait_for(pilot, lambda: len(app.attachments.pending) == 1, what="the chip")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.generating or "Read it." in drawn(app, app.chat_view),
                       what="the message to be sent")
        await wait_reply(pilot)
        shown = words(drawn(app, app.chat_view))
        assert "📎 paste-1.txt" in shown and "Read it." in shown
        assert app.attachments.pending == []
        (conversation,) = store.list_conversations()
        user, reply = store.load(conversation.id).messages
        assert '<file name="paste-1.txt"' in user.content and "A line 59" in user.content
        assert reply.content == "Read it."
        await pilot.press("up")  # the recall list holds no empty prompt
        assert app.prompt_input.text == ""


async def test_a_chip_too_large_for_the_context_is_refused_with_advice_that_fits_it(scripted_app, store):
    app = scripted_app(["x"])
    huge = "".join(f"line {n} of a pasted log with some words in it\n" for n in range(400))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.focus()
        await paste(pilot, huge)
        await wait_for(pilot, lambda: len(app.attachments.pending) == 1, what="the chip")
        tokens = app.attachments.pending[0].tokens
        assert tokens > 2048  # more than the whole context
        await pilot.press(*"summarize")
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("Not sent" in t for t in toasts(app)), what="the refusal")
        said = next(t for t in toasts(app) if "Not sent" in t)
        assert f"the pasted paste-1.txt alone is {tokens:,} tokens" in said and "drop it" in said
        assert "/attach" not in said and "cut to its token budget" not in said
        assert len(app.attachments.pending) == 1 and app.prompt_input.text == "summarize"  # nothing lost
        assert store.list_conversations() == []
