"""Paste chips as drawn (issue 33, item 4): their buttons' labels show, two chips never share a
name, and after a chip is dropped the prompt box has the focus again so the next paste lands.

Every check reads the drawn rows (tests/support/screen_text.py), not the widgets' attributes.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded

from app.tui.widgets.attachment_chips import AttachmentChips
from support.paste_chips import block, paste  # noqa: E402

pytestmark = pytest.mark.anyio


async def two_chips(pilot) -> AttachmentChips:
    app = pilot.app
    await wait_loaded(pilot)
    app.prompt_input.focus()
    await paste(pilot, block("A"))
    await paste(pilot, block("B"))
    await wait_for(pilot, lambda: len(app.attachments.pending) == 2, what="two chips")
    return app.query_one(AttachmentChips)


def rows(app, chips: AttachmentChips) -> list[str]:
    return [words(line) for line in drawn(app, chips).splitlines()]


async def test_a_chip_draws_its_buttons_labels(scripted_app):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE) as pilot:
        chips = await two_chips(pilot)
        shown = rows(app, chips)
        assert len(shown) == 2 and all(r.endswith("open edit ×") for r in shown), shown
        assert "paste-1.txt" in shown[0] and "paste-2.txt" in shown[1]


async def test_two_chips_never_share_a_name(scripted_app):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE) as pilot:
        chips = await two_chips(pilot)
        app.attachments.drop(0)  # what × on paste-1 does (the button itself: the next test)
        app.prompt_input.focus()
        await paste(pilot, block("C"))
        await wait_for(pilot, lambda: len(app.attachments.pending) == 2, what="the third chip")
        names = [item.name for item in app.attachments.pending]
        assert len(set(names)) == 2, names
        await pilot.pause()
        assert [r.split()[1] for r in rows(app, chips)] == names


async def test_after_a_chip_is_dropped_the_next_paste_lands_in_the_box(scripted_app):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE) as pilot:
        chips = await two_chips(pilot)
        await pilot.click("#chip-remove-0")  # drop paste-1 with its × button
        await wait_for(pilot, lambda: len(app.attachments.pending) == 1, what="the drop")
        await paste(pilot, "a small paste")  # to whatever has the focus, as a terminal sends it
        assert "a small paste" in words(drawn(app, app.prompt_input))
        assert len(rows(app, chips)) == 1


async def test_a_chip_is_priced_again_by_the_model_switched_to(scripted_app, qwen_path, smollm_path):
    """Issue 33, item 4: a chip counted by Qwen kept Qwen's count after /model switched to SmolLM2."""
    from app.conversation.attachments import file_block
    from app.settings.options import ChatOptions

    app = scripted_app(["x"], options=ChatOptions(model=str(qwen_path), theme="textual-dark"))
    text = "".join(f"def f{n}(x):\n    return x * {n}  # multiply\n" for n in range(40))
    block = file_block("paste-1.txt", len(text.encode()), text)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.focus()
        await paste(pilot, text)
        await wait_for(pilot, lambda: len(app.attachments.pending) == 1, what="the chip")
        chips = app.query_one(AttachmentChips)
        qwen_count = app.session.draft_tokens(block)
        assert f"{qwen_count} tokens" in rows(app, chips)[0]
        old = app.chat
        await send(pilot, f"/model {smollm_path}")
        await wait_for(pilot, lambda: app.chat is not old and app.query_one("ModelBar").state == "ready",
                       what="the switch to SmolLM2")
        await pilot.pause()
        smol_count = app.session.draft_tokens(block)
        assert smol_count != qwen_count  # two tokenizers: the test means something
        assert f"{smol_count} tokens" in rows(app, chips)[0]
        assert f"paste-1.txt {smol_count}" in words(drawn(app, app.prompt_input))  # the box's border
