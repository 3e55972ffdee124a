"""A long prompt shows its exact progress while it is evaluated, and Esc stops it (real app, real engine)."""
from __future__ import annotations

import re

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

from app.tui.prompt_progress import progress_line
from app.tui.widgets.assistant_message import AssistantMessage
from backends.base import PromptProgress

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def test_the_line_says_done_total_rate_and_time_left():
    line = progress_line(PromptProgress(done=1024, total=5680, started=100.0), now=104.0)
    assert line == "prompt 1,024 / 5,680 ids · 256 ids/s · 18 s left · esc stops"
    assert progress_line(PromptProgress(0, 5680, 100.0), 100.0) == "prompt 0 / 5,680 ids · esc stops"


async def test_a_long_prompt_shows_its_progress_and_esc_stops_it(real_app):
    app = real_app(max_tokens=64, ctx=8192)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        text = "Summarise these notes. " + " ".join(f"Note {i}: the tide was high at dawn." for i in range(300))
        n_ids = app.session.draft_tokens(text)
        assert 2000 < n_ids < 8000
        app.prompt_input.text = text
        app.prompt_input.focus()
        await pilot.press("enter")
        seen: list[str] = []

        def shown() -> bool:
            replies = app.query(AssistantMessage)
            if not replies:
                return False
            found = re.search(r"prompt [\d,]+ / [\d,]+ ids · [\d,]+ ids/s · [\d,]+ s left",
                              words(drawn(app, replies.last())))
            if found:
                seen.append(found.group(0))
            return found is not None

        await wait_for(pilot, shown, timeout_s=120, what="the prompt's progress line")
        done, total = (int(x.replace(",", "")) for x in re.match(r"prompt ([\d,]+) / ([\d,]+)", seen[-1]).groups())
        engine_total = app.session.generation_stats.progress.total
        assert total == engine_total and 0 < done < total
        assert total >= n_ids  # the whole prompt is new: template ids around the message too
        await pilot.press("escape")
        await wait_reply(pilot, timeout_s=30)
        reply = app.session.messages[-1]
        assert reply.role == "assistant" and reply.finish_reason == "cancelled" and reply.content == ""


def _long_message(app, notes: int = 300) -> str:
    """A typed message of ``notes`` notes, about 12 ids each: 300 make a few thousand ids, which SmolLM2 on the
    CPU evaluates in a few seconds (time for Esc mid-prompt); 90 make four prompt chunks of 256 ids or more."""
    text = "Summarise these notes. " + " ".join(f"Note {i}: the tide was high at dawn." for i in range(notes))
    assert 4 * 256 < app.session.draft_tokens(text) < 8000
    return text


async def test_the_progress_line_is_drawn_and_esc_says_how_many_ids_were_evaluated(real_app):
    """Issue 33, item 3: the line was written into the stats row, which is not drawn until the reply
    is done, so the screen showed nothing for the whole wait; after Esc the stats said 0 new."""
    app = real_app(max_tokens=64, ctx=8192)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.text = _long_message(app)
        app.prompt_input.focus()
        await pilot.press("enter")
        seen: list[str] = []

        def line_on_screen() -> bool:
            replies = app.query(AssistantMessage)
            if not replies:
                return False
            shown = re.search(r"prompt ([\d,]+) / ([\d,]+) ids · [\d,]+ ids/s · [\d,]+ s left · esc stops",
                              words(drawn(app, replies.last())))
            if shown:
                seen.append(shown.group(0))
            return shown is not None

        await wait_for(pilot, line_on_screen, timeout_s=120, what="the prompt's progress line on the screen")
        await pilot.press("escape")
        await wait_reply(pilot, timeout_s=30)
        reply = app.query(AssistantMessage).last()
        stats = app.session.messages[-1].stats
        assert stats.finish_reason == "cancelled" and app.session.messages[-1].content == ""
        shown = words(drawn(app, reply))
        assert "esc stops" not in shown  # the progress line is gone once the turn is over
        counts = re.search(r"⏹ stopped · prompt (\d+) new / (\d+) total", shown)
        assert counts, shown
        new, total = int(counts.group(1)), int(counts.group(2))
        assert (new, total) == (stats.new_prompt_tokens, stats.prompt_tokens)
        last_done = int(re.match(r"prompt ([\d,]+)", seen[-1]).group(1).replace(",", ""))
        assert 0 < last_done <= new < total  # what the line last said was evaluated, at least


async def test_the_reply_replaces_the_progress_line(real_app):
    """Once the reply streams, its text is drawn where the progress line was, and no progress line stays."""
    app = real_app(max_tokens=8, ctx=8192)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.text = _long_message(app, notes=90)
        app.prompt_input.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(app.query(AssistantMessage))
                       and "esc stops" in words(drawn(app, app.query(AssistantMessage).last())),
                       timeout_s=120, what="the prompt's progress line on the screen")
        await wait_reply(pilot)
        reply = app.query(AssistantMessage).last()
        shown = words(drawn(app, reply))
        assert "esc stops" not in shown and reply.content.split()[0] in shown
        assert re.search(r"prompt \d+ new / \d+ total · completion 8 ", shown), shown
