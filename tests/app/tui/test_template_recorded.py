"""``/template`` is recorded with the conversation (issue 44, T6): real app, real SmolLM2, real SQLite.

Before: after ``/template chatml`` mid-conversation the row still said ``model``; ``/export`` wrote
"Template: model", ``/fork`` inherited it, and a reopened chat rendered the turns with the model's template
(the meter read 912 where it had read 891): the stored counts match only when rendered with chatml.
"""
from __future__ import annotations

import re
import sqlite3

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.history.store import ChatStore
from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.widgets.model_bar import ModelBar
from backends.base import SamplingParams

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def meter_shown(app) -> int:
    found = re.search(r"ctx (\d+) / \d+", drawn(app, app.meter))
    assert found, drawn(app, app.meter)
    return int(found.group(1))


def templates(store) -> dict[int, str]:
    with sqlite3.connect(store.path) as db:
        return dict(db.execute("SELECT id, template FROM conversations ORDER BY id"))


async def test_template_is_stored_exported_forked_and_used_again_on_reopen(smollm_path, store, tmp_path):
    options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=2048, theme="textual-dark",
                          sampling=SamplingParams(temperature=0.0, max_tokens=8, seed=1))
    app = ChatApp(options, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert app.chat.template.name == "model"
        await send(pilot, "Hi")
        await wait_reply(pilot)
        conv = app.history.conversation_id
        assert templates(store) == {conv: "model"}
        await send(pilot, "/template chatml")
        await wait_for(pilot, lambda: "chatml" in words(drawn(app, app.query_one(ModelBar))), what="the new template")
        assert templates(store) == {conv: "chatml"}  # recorded at once, before the next turn
        await send(pilot, "And again?")
        await wait_reply(pilot)
        live_meter = meter_shown(app)
        export = tmp_path / "chat.md"
        await send(pilot, f"/export {export}")
        await wait_for(pilot, export.exists, what="the export")
        assert "Template: chatml" in export.read_text(encoding="utf-8")
        await send(pilot, "/fork")
        await wait_for(pilot, lambda: len(templates(store)) == 2, what="the fork")
        assert set(templates(store).values()) == {"chatml"}

    again = ChatApp(options, store=ChatStore(store.path))  # a new window: the model's own template first
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert again.chat.template.name == "model"
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("enter")  # the newest: the fork (the original is stored the same)
        await wait_for(pilot, lambda: "And again?" in words(drawn(again, again.chat_view)), what="the reopen")
        await pilot.pause()
        assert again.chat.template.name == "chatml"
        assert "chatml" in words(drawn(again, again.query_one(ModelBar)))
        assert meter_shown(again) == live_meter
