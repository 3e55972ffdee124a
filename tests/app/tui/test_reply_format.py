"""``/format`` in the TUI (issue 46): the real app on SmolLM2 (llama.cpp, greedy), checked where the user looks.

The model bar's drawn row says which format holds the replies while one is on and nothing once it is
off; the reply drawn on screen is the JSON the session kept, and it validates with ``jsonschema``; a bad
schema is one notice line and changes nothing.
"""
from __future__ import annotations

import json

import jsonschema
import pytest
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.model_bar import ModelBar

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COLOUR = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]},
                                           "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}},
          "required": ["colour", "hex"], "additionalProperties": False}


async def test_format_schema_holds_the_reply_and_the_model_bar_says_so(real_app, tmp_path):
    schema = tmp_path / "colour.json"
    schema.write_text(json.dumps(COLOUR))
    app = real_app(max_tokens=48)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        bar = app.query_one(ModelBar)
        assert "format:" not in drawn(app, bar)
        await send(pilot, f"/format schema {schema}")
        await wait_for(pilot, lambda: "format: json schema" in drawn(app, bar), what="the format in the model bar")

        await send(pilot, "What is your favourite colour?")
        await wait_reply(pilot, timeout_s=600)  # a shared 2-core machine: the vocabulary is built on first use
        message = app.session.messages[-1]
        assert message.stats.finish_reason == "stop" and message.stats.constraint == "json schema"
        jsonschema.validate(json.loads(message.content), COLOUR)
        shown = words(drawn(app, app.query(AssistantMessage).last()))
        value = json.loads(message.content)
        assert value["colour"] in shown and value["hex"] in shown  # the drawn reply is the JSON kept

        await send(pilot, "/format off")
        await wait_for(pilot, lambda: "format:" not in drawn(app, bar), what="the model bar without the format")
        assert app.session.sampling.constraint is None


async def test_a_bad_format_is_one_notice_and_changes_nothing(real_app):
    app = real_app(max_tokens=8)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, '/format schema {"type": "nope"}')
        await wait_for(pilot, lambda: any("JSON Schema is not valid" in t for t in toasts(app)),
                       what="the notice")
        assert [t for t in toasts(app) if "JSON Schema" in t] == [
            "the JSON Schema is not valid at type: 'nope' is not valid under any of the given schemas"]
        await send(pilot, "/format regex")
        await wait_for(pilot, lambda: any(t.startswith("usage: /format") for t in toasts(app)), what="the usage")
        assert app.session.sampling.constraint is None
        assert "format:" not in drawn(app, app.query_one(ModelBar))
