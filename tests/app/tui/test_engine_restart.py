"""An engine that died while idle costs nothing (issue 33, item 6).

The real app on the real SmolLM2 in its engine process; the death is a real SIGSEGV sent
between two messages.  The next message must start a fresh engine and be answered, with
one line saying so; nothing empty is stored.
"""
from __future__ import annotations

import os
import signal

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.notice import Notice

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def dead(pid: int) -> bool:
    """The process has ended (a zombie its parent has not reaped yet, or gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_an_engine_dead_while_idle_answers_the_next_message(real_app, store):
    app = real_app(max_tokens=12)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "Say hi.")
        await wait_reply(pilot)
        pid = app.chat.backend.pid
        os.kill(pid, signal.SIGSEGV)
        await wait_for(pilot, lambda: dead(pid), what="the engine to die")
        await send(pilot, "Say bye.")
        await wait_reply(pilot)
        reply = app.query(AssistantMessage).last()
        message = app.session.messages[-1]
        assert message.role == "assistant" and message.content.strip() and message.finish_reason != "error"
        assert app.chat.backend.pid not in (None, pid)
        shown = words(drawn(app))
        assert words(message.content)[:20] in shown and "error" not in words(drawn(app, reply))
        notices = [words(drawn(app, n)) for n in app.query(Notice)]
        assert any("died of SIGSEGV" in n and "started again" in n for n in notices), notices
        stored = store.load(app.history.recorder.conversation_id).messages
        assert [(m.role, bool(m.content.strip()), m.finish_reason not in ("error", None))
                for m in stored] == [("user", True, False), ("assistant", True, True)] * 2
