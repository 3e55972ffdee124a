"""A long prompt shows its exact progress while it is evaluated, and Esc stops it (real app, real engine)."""
from __future__ import annotations

import re

import pytest
from tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

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
            line = str(replies.last().query_one(".stats").render())
            if line.startswith("prompt "):
                seen.append(line)
            return bool(re.match(r"prompt [\d,]+ / [\d,]+ ids · [\d,]+ ids/s · [\d,]+ s left", line))

        await wait_for(pilot, shown, timeout_s=120, what="the prompt's progress line")
        done, total = (int(x.replace(",", "")) for x in re.match(r"prompt ([\d,]+) / ([\d,]+)", seen[-1]).groups())
        backend_total = app.session.backend.prompt_progress.total
        assert total == backend_total and 0 < done < total
        assert total >= n_ids  # the whole prompt is new: template ids around the message too
        await pilot.press("escape")
        await wait_reply(pilot, timeout_s=30)
        reply = app.session.messages[-1]
        assert reply.role == "assistant" and reply.finish_reason == "cancelled" and reply.content == ""
