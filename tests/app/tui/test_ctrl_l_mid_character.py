"""Ctrl+L after a reply cut inside a character draws and stores the reply generated in one go (issue 44 T3).

SmolLM2 writes an emoji as three byte-level ids, so ``max_tokens`` can cut a
reply between the bytes of one character.  The cut reply must not draw or
store U+FFFD for the bytes still arriving, and Ctrl+L must complete the
character: the reply widget's drawn rows and the stored row then hold the
one-go text (before the fix: ``…🔥📚�💬…`` where one go gives ``…🔥📚💬…``).

The real app on the real SmolLM2 through llama.cpp; the oracle is the same
app's reply to the same prompt generated in one go, and the cut is chosen
from its ids (the first length that ends inside a character).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from support.screen_text import drawn
from support.tui_helpers import SIZE, wait_loaded, wait_reply

from app.tui.widgets.assistant_message import AssistantMessage

pytestmark = pytest.mark.anyio

PROMPT = "Say hi 👋 to 世界"
ONE_GO = 30


def _cut_inside_a_character(tokenizer, ids) -> int:
    for n in range(1, len(ids)):
        try:
            b"".join(tokenizer.token_bytes(t) for t in ids[:n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":
                return n
    raise AssertionError("the one-go reply has no multi-byte character to cut inside")


async def _ask(pilot, text: str) -> None:
    pilot.app.prompt_input.load_text(text)  # typed as keys, an emoji is not one key
    pilot.app.prompt_input.focus()
    await pilot.press("enter")
    await wait_reply(pilot)


async def test_ctrl_l_after_a_cut_inside_an_emoji_draws_and_stores_the_one_go_text(real_app, store):
    app = real_app(max_tokens=ONE_GO)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await _ask(pilot, PROMPT)
        whole = app.session.messages[-1]
        one_go_ids, one_go_text = list(whole.reply_ids), whole.content
        cut = _cut_inside_a_character(app.session.tokenizer, one_go_ids)
        # the character the cut falls inside, as the one-go reply shows it
        shown_before = app.session.tokenizer.decode(one_go_ids[:cut]).rstrip("\ufffd")
        completed = one_go_text[len(shown_before)]

        app.session.sampling = replace(app.session.sampling, max_tokens=cut)
        await pilot.press("ctrl+r")
        await wait_reply(pilot)
        part = app.session.messages[-1]
        assert part is not whole and list(part.reply_ids) == one_go_ids[:cut] and part.finish_reason == "length"
        widget = list(app.query(AssistantMessage))[-1]
        assert "\ufffd" not in drawn(app, widget) and "\ufffd" not in part.content

        app.session.sampling = replace(app.session.sampling, max_tokens=ONE_GO - cut)
        await pilot.press("ctrl+l")
        await wait_reply(pilot)
        assert app.session.messages[-1] is part and list(part.reply_ids) == one_go_ids
        assert part.content == one_go_text
        screen = drawn(app, list(app.query(AssistantMessage))[-1])
        assert "\ufffd" not in screen and completed in screen
        stored = store.load(app.history.recorder.conversation_id).messages[-1]
        assert stored.content == one_go_text and list(stored.reply_ids) == one_go_ids
