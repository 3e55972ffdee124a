"""Issue 33, item 9: every count the screen shows has one definition, the same live and reopened,
and equal to ``tokchat render --ids`` on the stored messages (real app, real SmolLM2, real SQLite).

Before: a reply cut by max-tokens left the meter at the engine's count (prompt + reply ids, no closing
``<|im_end|>\\n``) and a reopen showed the rendered one, 2 more; a continued reply's line said
"prompt 39 new / 38 total" (new summed every part); F2 said "(N cached)" from the prompt builder's guess.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.cli import main as tokchat
from app.history.store import ChatStore
from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.screens.token_inspector import TokenInspector
from app.tui.widgets.assistant_message import AssistantMessage
from backends.base import SamplingParams

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def render_ids(model, tmp_path, messages, *, generation_prompt: bool) -> int:
    """How many ids ``tokchat render --ids`` gives for ``messages`` (the CLI itself, in this process)."""
    path = tmp_path / "messages.json"
    path.write_text(json.dumps([{"role": m.role, "content": m.content} for m in messages]), encoding="utf-8")
    args = ["render", "--model", str(model), "--messages", str(path), "--ids"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the app under Pilot holds sys.stdout: capsys would not see it
        assert tokchat(args + ([] if generation_prompt else ["--no-generation-prompt"])) == 0
    return len(json.loads(out.getvalue()))


def meter_shown(app) -> int:
    found = re.search(r"ctx (\d+) / \d+", drawn(app, app.meter))
    assert found, drawn(app, app.meter)
    return int(found.group(1))


def prompt_counts_shown(app) -> tuple[int, int]:
    line = words(drawn(app, app.query(AssistantMessage).last()))
    found = re.search(r"prompt (\d+) new / (\d+) total", line)
    assert found, line
    return int(found.group(1)), int(found.group(2))


async def test_counts_after_a_cut_and_a_continue_equal_render_ids_live_and_reopened(
        smollm_path, store, tmp_path):
    options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=2048, theme="textual-dark",
                          sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1))
    app = ChatApp(options, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "Tell me a long story about the sea.")
        await wait_reply(pilot)
        assert app.session.messages[-1].finish_reason == "length"
        conv_id = app.history.conversation_id
        stored = store.load(conv_id).messages
        live_meter = meter_shown(app)
        assert live_meter == render_ids(smollm_path, tmp_path, stored, generation_prompt=False)

        await send(pilot, "/continue")
        await wait_reply(pilot)
        reply = app.session.messages[-1]
        assert reply.stats.parts is not None and len(reply.stats.parts) == 2
        stored = store.load(conv_id).messages
        new, total = prompt_counts_shown(app)
        assert total == render_ids(smollm_path, tmp_path, stored[:-1], generation_prompt=True)
        assert 0 < new <= total
        live_meter = meter_shown(app)
        assert live_meter == render_ids(smollm_path, tmp_path, stored, generation_prompt=False)

        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, TokenInspector), what="the token inspector")
        await pilot.pause()
        assert f"prompt {total} ids ({new} new)" in words(drawn(app))
        await pilot.press("escape")
        await pilot.pause()

    again = ChatApp(options, store=ChatStore(store.path))
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv_id)
        await pilot.pause()
        assert meter_shown(again) == live_meter
        assert prompt_counts_shown(again) == (new, total)
