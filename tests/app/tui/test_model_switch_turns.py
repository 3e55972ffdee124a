"""``/model`` and ``/server`` beside a chat's turns (issue 44, T1 and T7): real app, real SmolLM2 and gemma3-270m
on llama.cpp, real SQLite.

T1: a message sent while ``/model`` loaded was answered by the old engine, which the load then closed under
it: the reply ended in "the llama.cpp engine died of SIGKILL", and the history held two chained replies
labelled with the new model.  A message sent during a load is now refused in one line and stays in the box;
a model whose download ends during a reply loads after it.
T7: after ``/server`` to a server that cannot be reached, ``/model`` failed with the same "cannot reach the
server": the failed load's options had become the window's.
"""
from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.loader import load_chat
from app.tui.pull import ModelPull
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.model_bar import ModelBar
from app.tui.widgets.user_message import UserMessage
from backends.base import SamplingParams

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def rows(store) -> list[tuple[str, str | None, str]]:
    """Every stored message of every conversation: (role, finish_reason, conversation's model name)."""
    with sqlite3.connect(store.path) as db:
        return db.execute("SELECT m.role, m.finish_reason, c.model_name FROM messages m "
                          "JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id").fetchall()


class HeldLoader:
    """The real loader, holding every load after the first until :meth:`release`: the test types while
    ``/model`` is still loading, however fast the machine loads the model."""

    def __init__(self) -> None:
        self.loads = 0
        self.gate = threading.Event()

    def __call__(self, options, progress):
        self.loads += 1
        if self.loads > 1:
            assert self.gate.wait(120), "the test never released the load"
        return load_chat(options, progress)

    def release(self) -> None:
        self.gate.set()


def options_for(smollm_path: Path, max_tokens: int) -> ChatOptions:
    return ChatOptions(model=str(smollm_path), backend="cpu", ctx=2048, theme="textual-dark",
                       sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=1))


async def test_a_message_sent_while_model_loads_is_refused_and_stays_in_the_box(smollm_path, gemma_path, store):
    loader = HeldLoader()
    app = ChatApp(options_for(smollm_path, 24), loader=loader, store=store)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        engine = app.chat.backend.pid
        await send(pilot, f"/model {gemma_path}")
        await wait_for(pilot, lambda: app.query_one(ModelBar).state == "loading", what="the load to start")
        await send(pilot, "/continue")  # a command that starts a turn waits too
        await wait_for(pilot, lambda: "gemma3-270m.gguf is still loading: /continue has to wait until it is ready"
                       in toasts(app), what="the command's refusal")
        await send(pilot, "Write a poem about the sea.")
        await wait_for(pilot, lambda: "gemma3-270m.gguf is still loading: send when it is ready (the message stays "
                       "in the box)" in toasts(app), what="the refusal")
        assert not app.generating and not app.query(UserMessage)
        assert app.prompt_input.text == "Write a poem about the sea."  # nothing typed is lost
        assert engine is not None and app.chat.backend.pid == engine
        os.kill(engine, 0)  # SmolLM2's engine still runs: nothing was answering, nothing was closed

        loader.release()
        await wait_for(pilot, lambda: app.query_one(ModelBar).state == "ready" and app.chat.model_path == gemma_path,
                       what="gemma to load")
        app.prompt_input.focus()
        await pilot.press("enter")  # the message still in the box, now sent to gemma
        await wait_reply(pilot)
        reply = app.query(AssistantMessage).last()
        shown = words(drawn(app, reply))
        assert "prompt" in shown and "died" not in shown and "error" not in shown.lower()
        conv = store.load(app.history.conversation_id)
        assert [(m.role, m.content) for m in conv.messages] == [
            ("user", "Write a poem about the sea."), ("assistant", app.session.messages[-1].content)]
        gemma = app.chat.info.model_name
        assert "gemma" in gemma.lower()
        assert rows(store) == [("user", None, gemma), ("assistant", conv.messages[-1].finish_reason, gemma)]
        assert conv.messages[-1].finish_reason in ("stop", "length")


async def test_a_download_that_ends_mid_reply_loads_its_model_after_the_reply(smollm_path, gemma_path, store):
    """A ``/model hf:…`` download may end while a reply streams (it runs beside the chat): the engine
    writing the reply must not be closed under it, and the reply is stored once, as SmolLM2's."""
    app = ChatApp(options_for(smollm_path, 400), store=store)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        smollm_name, engine = app.chat.info.model_name, app.chat.backend.pid
        await send(pilot, "Write a long poem about the sea.")
        await wait_for(pilot, lambda: app.reply is not None and len(app.reply.content) > 5,
                       what="the reply to start")
        app.post_message(ModelPull.Open(str(gemma_path)))  # what a download that just ended posts
        await wait_for(pilot, lambda: "gemma3-270m.gguf loads when this reply has finished (Esc stops it)"
                       in toasts(app), what="the notice")
        assert app.generating and app.query_one(ModelBar).state == "ready" and app.chat.backend.pid == engine
        os.kill(engine, 0)  # SmolLM2's engine still writes the reply
        await pilot.press("escape")
        await wait_reply(pilot)
        reply = app.query(AssistantMessage).first()
        shown = words(drawn(app, reply))
        assert "died" not in shown and "stopped" in shown
        stored_reply = store.load(app.history.conversation_id).messages[-1]
        assert stored_reply.finish_reason == "cancelled" and stored_reply.content == reply.content
        assert rows(store) == [("user", None, smollm_name), ("assistant", "cancelled", smollm_name)]
        await wait_for(pilot, lambda: app.query_one(ModelBar).state == "ready" and app.chat.model_path == gemma_path,
                       what="gemma to load after the reply")
        assert "gemma" in words(drawn(app, app.query_one(ModelBar))).lower()
        assert len(rows(store)) == 2  # the reply stays one row


async def test_a_server_that_cannot_be_reached_does_not_stick(smollm_path, store):
    app = ChatApp(options_for(smollm_path, 8), store=store)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/server http://127.0.0.1:9")
        await wait_for(pilot, lambda: "cannot reach" in words(drawn(app, app.chat_view)), 120, "the failure")
        assert app.query_one(ModelBar).state == "ready"  # still chatting with SmolLM2 here
        before = app.chat
        await send(pilot, f"/model {smollm_path}")

        def failures() -> int:
            return words(drawn(app, app.chat_view)).count("Could not load the model")

        def ended() -> bool:  # a new chat, or a second failure
            return app.query_one(ModelBar).state == "ready" and (app.chat is not before or failures() > 1)

        await wait_for(pilot, ended, 120, "the /model load to end")
        await pilot.pause()
        view = words(drawn(app, app.chat_view))
        assert view.count("Could not load the model") == 1  # the /server one alone
        bar = words(drawn(app, app.query_one(ModelBar)))
        assert "llama.cpp" in bar and "remote" not in bar
        await send(pilot, "Hi")
        await wait_reply(pilot)
        assert "completion" in words(drawn(app, app.query(AssistantMessage).last()))
