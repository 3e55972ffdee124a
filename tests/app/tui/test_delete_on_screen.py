"""Deleting the conversation on screen, then sending (issue 44, T5): real app, real SmolLM2, real SQLite.

Before: the next message started a new conversation holding only itself and its reply, while the model
answered from every message still on screen ("prompt 18 new / 78 total" where the stored messages render
to 36).  Now the rule of a deletion in another window holds here too: the next write saves everything the
window shows as a new conversation, so the stored conversation renders to the prompt the model answered.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.cli import main as tokchat
from app.tui.widgets.assistant_message import AssistantMessage

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def render_ids(model, tmp_path, messages) -> int:
    """How many ids ``tokchat render --ids`` gives for ``messages`` with the generation prompt (the CLI, here)."""
    path = tmp_path / "messages.json"
    path.write_text(json.dumps([{"role": m.role, "content": m.content} for m in messages]), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the app under Pilot holds sys.stdout: capsys would not see it
        assert tokchat(["render", "--model", str(model), "--messages", str(path), "--ids"]) == 0
    return len(json.loads(out.getvalue()))


async def test_a_message_after_deleting_the_conversation_on_screen_stores_everything_shown(
        real_app, store, smollm_path, tmp_path):
    app = real_app(max_tokens=8)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        for text in ("first", "second"):
            await send(pilot, text)
            await wait_reply(pilot)
        gone = app.history.conversation_id
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: app.screen.is_modal and "Delete “" in drawn(app), what="the delete dialog")
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: store.list_conversations() == [], what="the deletion")
        await pilot.press("ctrl+b")  # the list closes; the conversation is still on screen
        await pilot.pause()
        assert "second" in words(drawn(app, app.chat_view))

        await send(pilot, "third")
        notice = f"Conversation #{gone} was deleted: what this window shows is saved as a new conversation (#"
        await wait_for(pilot, lambda: any(notice in t for t in toasts(app)), what="the notice")
        await wait_reply(pilot)
        (conversation,) = store.list_conversations()
        stored = store.load(conversation.id).messages
        assert [(m.role, m.content) for m in stored] == [(m.role, m.content) for m in app.session.messages]
        assert [m.content for m in stored if m.role == "user"] == ["first", "second", "third"]
        line = words(drawn(app, app.query(AssistantMessage).last()))
        total = int(re.search(r"prompt \d+ new / (\d+) total", line).group(1))
        assert total == render_ids(smollm_path, tmp_path, stored[:-1])  # what the model answered is stored
