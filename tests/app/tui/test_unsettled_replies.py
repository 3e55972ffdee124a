"""A conversation opened from the history while its last turn is not settled (issue 44, T2, T10, T11).

Window A is a real process writing into the same SQLite file through the real
recorder, as a chat window does: it commits the user's message, saves the reply's
first words, and then either finishes, waits (still writing), or is killed with a real
SIGKILL.  Window B is the real app under Pilot.  Every check reads what B draws and what
SQLite holds.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.history.store import ChatStore
from app.tui.widgets.history_sidebar import HistorySidebar

pytestmark = pytest.mark.anyio

STORY = "Tell me a story"

#: window A: resumes conversation argv[2] of database argv[1]; argv[3] says how far it gets before it
#: says "ready" (a user message only, as when killed while the prompt is read; or the reply's first words),
#: then on "finish" on stdin it ends the reply as a finished one
WRITER = r"""
import sys
from app.conversation.messages import ChatMessage, ReplyEvent
from app.history.recorder import HistoryRecorder

db, conv, upto = sys.argv[1], int(sys.argv[2]), sys.argv[3]
recorder = HistoryRecorder(store_path=db)
recorder.resume(conv)
recorder.on_user(ChatMessage(role="user", content="Tell me a story", reasoning="", stats=None,
                                 finish_reason=None))
if upto == "reply":
    recorder.on_event(ReplyEvent(kind="content", text="Once upon"))
print("ready", flush=True)
if sys.stdin.readline().strip() == "finish":
    recorder.on_event(ReplyEvent(kind="content", text=" a time."))
    recorder.on_reply(ChatMessage(role="assistant", content="Once upon a time.", reasoning="", stats=None,
                                      finish_reason="stop"))
    recorder.close()
    print("done", flush=True)
"""


def start_writer(tmp_path: Path, db: Path, conv: int, upto: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(conv), upto], text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(tmp_path))
    assert process.stdout.readline().strip() == "ready"
    return process


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert process.returncode == -signal.SIGKILL


def shown_path(store: ChatStore, conv: int) -> list[tuple[str, str, str | None]]:
    return [(m.role, m.content, m.finish_reason) for m in store.load(conv).messages]


async def first_turn(pilot) -> int:
    await wait_loaded(pilot)
    await send(pilot, "first")
    await wait_reply(pilot)
    return pilot.app.history.recorder.conversation_id


async def open_from_history(pilot) -> str:
    """Ctrl+B, then Enter on the newest conversation (the one window A writes into); the list as drawn."""
    await pilot.press("ctrl+b")
    await pilot.pause()
    listed = words(drawn(pilot.app, pilot.app.query_one(HistorySidebar), inside=True))
    await pilot.press("enter")
    await wait_for(pilot, lambda: STORY in drawn(pilot.app, pilot.app.chat_view), what="the conversation to open")
    await pilot.pause()
    return listed


async def test_a_reply_another_window_is_writing_is_marked_and_never_continued_here(scripted_app, store, tmp_path):
    app = scripted_app(["One.", "Two."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        conv = await first_turn(pilot)
        writer = start_writer(tmp_path, store.path, conv, "reply")
        try:
            listed = await open_from_history(pilot)
            assert "a reply is being written" in listed  # the list says so before it is opened
            screen = words(drawn(app, app.chat_view))
            assert "Once upon" in screen
            assert "being written in another window" in screen  # not shown as a finished reply
            before = shown_path(store, conv)
            assert before[-1] == ("assistant", "Once upon", None)
            await pilot.press("ctrl+l")  # continue: refused, in one line
            await wait_for(pilot, lambda: any("Nothing continued" in t and "another window" in t
                                              for t in toasts(app)), what="the refusal")
            await pilot.press("ctrl+r")  # regenerate would answer the turn before it, unseen: refused too
            await wait_for(pilot, lambda: any("Nothing regenerated" in t for t in toasts(app)), what="the refusal")
            assert not app.generating
            assert shown_path(store, conv) == before
            writer.stdin.write("finish\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "done"
        finally:
            writer.kill()
            writer.wait(30)
        # window A's reply is the one stored, once
        assert shown_path(store, conv) == [("user", "first", None), ("assistant", "One.", "stop"),
                                           ("user", STORY, None), ("assistant", "Once upon a time.", "stop")]
        # a message sent in B now follows what B built on: a branch beside A's turn, never inside it
        await send(pilot, "second")
        await wait_reply(pilot)
        assert "Once upon" not in drawn(app, app.chat_view)
        assert [(role, text) for role, text, _ in shown_path(store, conv)] == [
            ("user", "first"), ("assistant", "One."), ("user", "second"), ("assistant", "Two.")]
        assert [m.content for m in store.load(conv).branches] == [STORY, "Once upon a time."]


async def test_a_reply_cut_by_sigkill_reopens_marked_as_cut(scripted_app, store, tmp_path):
    app = scripted_app(["One."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        conv = await first_turn(pilot)
        kill(start_writer(tmp_path, store.path, conv, "reply"))
        assert "being written" not in await open_from_history(pilot)  # its writer is gone: it was cut
        reply = app.chat_view.last_assistant()
        assert reply.content == "Once upon"
        assert "cut off: tokchat stopped while writing it" in words(drawn(app, reply))
        assert "⏹ stopped" not in drawn(app)  # not the mark of an Esc


async def test_a_message_whose_reply_never_came_is_marked_and_the_next_takes_its_place(scripted_app, store,
                                                                                        tmp_path):
    """Killed while the prompt was read: the stored user message has no reply.  Sending again must not make
    two user turns in a row (a headless --resume would leave the first out)."""
    app = scripted_app(["One.", "Two."])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        conv = await first_turn(pilot)
        kill(start_writer(tmp_path, store.path, conv, "user"))
        await open_from_history(pilot)
        assert "no reply: tokchat stopped before answering this message" in words(drawn(app, app.chat_view))
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: any("Nothing continued" in t and "no reply" in t for t in toasts(app)),
                       what="the refusal")
        await send(pilot, "second")
        await wait_reply(pilot)
        screen = words(drawn(app, app.chat_view))
        assert STORY not in screen and "second" in screen and "Two." in screen
        assert [(role, text) for role, text, _ in shown_path(store, conv)] == [
            ("user", "first"), ("assistant", "One."), ("user", "second"), ("assistant", "Two.")]
        assert [m.content for m in store.load(conv).branches] == [STORY]  # kept, as the new turn's sibling
