"""The real app on the real SmolLM2 (llama.cpp, CPU, greedy): what a person sees is what was counted.

Every number on screen is compared with the session's own accounting
(TurnStats and ``context_used``); the reply text on screen with the text
the session kept.
"""
from __future__ import annotations

import pytest
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.tui.format import stats_line
from app.tui.widgets.assistant_message import AssistantMessage

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def shown_stats(reply: AssistantMessage) -> str:
    return str(reply.query_one(".stats").render())



def rendered_ids(session) -> int:
    """The conversation rendered by its template (no generation prompt) and encoded."""
    from templates import prompt_ids

    messages = [{"role": "system", "content": session.system_prompt}] if session.system_prompt else []
    messages += [{"role": m.role, "content": m.content} for m in session.messages]
    return len(prompt_ids(session.tokenizer, session.template.render(messages, add_generation_prompt=False)))

async def test_send_reply_counts_match_the_session(real_app):
    app = real_app(max_tokens=16)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert app.chat is not None, app.query_one("ModelBar").text
        bar = str(app.query_one("ModelBar").render())
        assert "llama.cpp" in bar and "ctx 2048" in bar and app.session.template.name in bar
        start = app.meter.used

        app.prompt_input.focus()
        await pilot.press(*"What", "space", *"is", "space", *"2+2?")
        await wait_for(pilot, lambda: app.meter.draft > 0, what="the draft count")
        assert app.meter.draft == app.session.draft_tokens("What is 2+2?")
        await pilot.press("enter")
        await wait_reply(pilot)

        reply = app.query(AssistantMessage).last()
        message = app.session.messages[-1]
        assert message.role == "assistant" and message.content.strip()
        assert reply.content == message.content
        assert shown_stats(reply) == stats_line(message.stats)
        assert message.stats.completion_tokens > 0 and message.stats.new_prompt_tokens > 0
        # the meter: the conversation as rendered (`tokchat render --ids`), the reply's closing markup included,
        # which the engine's count (prompt + reply ids) lacks when the reply was cut
        assert app.meter.used == app.session.context_used == rendered_ids(app.session) > start
        assert message.stats.context_used <= app.meter.used <= message.stats.context_used + 2
        assert app.meter.draft == 0

        # a second message: the view grows, the cache is reused, the counts still match
        await send(pilot, "And 3+3?")
        await wait_reply(pilot)
        replies = list(app.query(AssistantMessage))
        second = app.session.messages[-1]
        assert len(replies) == 2 and len(app.session.messages) == 4
        assert replies[-1].content == second.content
        assert shown_stats(replies[-1]) == stats_line(second.stats)
        assert second.stats.new_prompt_tokens < second.stats.prompt_tokens
        assert app.meter.used == app.session.context_used > message.stats.context_used


async def test_escape_mid_reply_stops_and_keeps_the_partial_text(real_app, store):
    app = real_app(max_tokens=400)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "Write a very long story about a dragon who learns to cook.")
        await wait_for(pilot, lambda: app.reply is not None and len(app.reply.content) > 10,
                       what="the first words of the reply")
        used_while_streaming = app.meter.used
        await pilot.press("escape")
        await wait_reply(pilot)

        reply = app.query(AssistantMessage).last()
        message = app.session.messages[-1]
        assert message.finish_reason == "cancelled"
        assert message.stats.completion_tokens < 400
        assert reply.content == message.content and len(reply.content) > 10
        assert reply.has_class("-stopped") and shown_stats(reply).startswith("⏹ stopped · ")
        assert shown_stats(reply).endswith(stats_line(message.stats))
        assert used_while_streaming > message.stats.prompt_tokens  # the meter moved while streaming
        stored = store.load(app.history.recorder.conversation_id).messages[-1]
        assert (stored.content, stored.finish_reason) == (message.content, "cancelled")

        # the chat goes on after a stop (short reply: /max_tokens on the live session)
        await send(pilot, "/max_tokens 8")
        assert app.session.sampling.max_tokens == 8
        await send(pilot, "Thanks!")
        await wait_reply(pilot)
        assert app.session.messages[-1].finish_reason in ("stop", "length")
        assert app.query(AssistantMessage).last().content == app.session.messages[-1].content
