"""A JSON reply is drawn as a code block (issue 46 item 1), checked on the drawn screen of the real app.

The scripted backend replays the reply's ids through the real tokenizer and template; what is checked is
what Textual drew: a JSON answer sits in a code block (Textual's ``MarkdownFence``) with its indentation
kept, and ``*``/``_`` inside its strings are not read as emphasis; a prose reply gets no code block.
"""
from __future__ import annotations

import pytest
from support.screen_text import drawn
from textual.widgets._markdown import MarkdownFence
from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

from app.tui.widgets.assistant_message import AssistantMessage

pytestmark = pytest.mark.anyio

JSON_REPLY = '{\n  "name": "snake_case_name",\n  "note": "*not* emphasis"\n}'


async def test_a_json_reply_is_drawn_as_a_code_block_and_prose_is_not(scripted_app):
    app = scripted_app([JSON_REPLY, "Just *prose* here."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "A name as JSON")
        await wait_reply(pilot)
        message = app.query(AssistantMessage).last()
        fences = list(message.query(MarkdownFence))
        assert len(fences) == 1 and fences[0].code.strip() == JSON_REPLY
        shown = drawn(app, message)
        assert '  "name": "snake_case_name",' in shown  # indentation kept, underscores as written
        assert '"*not* emphasis"' in shown  # the asterisks drawn, not read as emphasis
        assert message.code_blocks() == [JSON_REPLY + "\n"]
        assert app.session.messages[-1].content == JSON_REPLY  # the stored reply is the model's text

        await send(pilot, "And in words?")
        await wait_reply(pilot)
        prose = app.query(AssistantMessage).last()
        assert not list(prose.query(MarkdownFence)) and "*prose*" not in drawn(app, prose)


async def test_a_format_from_the_config_is_in_the_model_bar_from_the_start(scripted_app, smollm_path):
    from app.settings.options import ChatOptions
    from app.tui.widgets.model_bar import ModelBar
    from backends.base import SamplingParams
    from backends.constraint import parse_constraint

    held = SamplingParams(constraint=parse_constraint("json"))  # what [chat] format = "json" gives the options
    app = scripted_app(["{}"], options=ChatOptions(model=str(smollm_path), theme="textual-dark", sampling=held))
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert "format: json" in drawn(app, app.query_one(ModelBar))
        assert app.session.sampling.constraint == held.constraint
