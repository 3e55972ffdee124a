"""Branches in the real app: regenerate twice, move between siblings with Alt+arrows, continue from
the first, quit, and find the same tree after a restart (real SQLite history, scripted backend).
"""
from __future__ import annotations

import pytest
from support.tui_helpers import send, stable_timings, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.history.store import ChatStore
from app.tui.app import ChatApp
from app.tui.loader import scripted_loader
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.branch_label import BranchLabel

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


def label(app) -> str:
    labels = list(app.query(BranchLabel))
    return f"{labels[-1].shown}/{labels[-1].count}" if labels else ""


def shown(app) -> list[str]:
    return [w.content for w in app.query(AssistantMessage)]


async def test_regenerate_twice_switch_continue_and_resume_after_restart(scripted_app, store, smollm_path):
    app = scripted_app(["First answer.", "Second answer.", "Third answer.", "Follow-up answer.", "Later."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "Question?")
        await wait_reply(pilot)
        for _ in range(2):
            await pilot.press("ctrl+r")
            await wait_reply(pilot)
        await pilot.pause()
        assert shown(app) == ["Third answer."] and label(app) == "3/3"
        await pilot.press("alt+left", "alt+left")
        await pilot.pause()
        assert shown(app) == ["First answer."] and label(app) == "1/3"
        first = app.session.messages[-1].record
        await send(pilot, "Tell me more")
        await wait_reply(pilot)
        sent = app.session.last_prompt.ids
        assert sent[:len(first.prompt.ids) + len(first.reply_ids)] == list(first.prompt.ids) + list(first.reply_ids)
        assert shown(app) == ["First answer.", "Follow-up answer."]
        conv_id = app.history.recorder.conversation_id

    # a new app on the same history file, opened anew, resumed
    fresh = ChatStore(store.path)
    again = ChatApp(ChatOptions(model=str(smollm_path), theme="textual-dark"),
                    loader=scripted_loader(smollm_path, ["Later."]), stats_filter=stable_timings, store=fresh)
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv_id)
        await pilot.pause()
        assert shown(again) == ["First answer.", "Follow-up answer."]
        assert again.session.branches.position(1) == (1, 3) and label(again) == "1/3"
        again.prompt_input.blur()
        await pilot.press("alt+right")
        await pilot.pause()
        assert shown(again) == ["Second answer."] and label(again) == "2/3"
        assert store.load(conv_id).messages[-1].content == "Second answer."  # the choice is stored
        await send(pilot, "/branch 1")
        await pilot.pause()
        assert shown(again) == ["First answer.", "Follow-up answer."]
        await send(pilot, "Go on")  # continues the first branch; its ids are re-encoded from text here
        await wait_reply(pilot)
        assert [m.content for m in store.load(conv_id).messages] == [
            "Question?", "First answer.", "Tell me more", "Follow-up answer.", "Go on", "Later."]
        assert sorted(m.content for m in store.load(conv_id).branches) == ["Second answer.", "Third answer."]
    fresh.close()


async def test_an_edited_prompt_keeps_the_old_one_as_a_sibling(scripted_app, store):
    from app.tui.widgets.user_message import UserMessage

    app = scripted_app(["Old reply.", "New reply."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "Old prompt")
        await wait_reply(pilot)
        await pilot.press("ctrl+g")
        app.prompt_input.load_text("New prompt")
        await pilot.press("enter")
        await wait_reply(pilot)
        await pilot.pause()
        assert [w.text for w in app.query(UserMessage)] == ["New prompt"] and label(app) == "2/2"
        app.prompt_input.blur()
        await pilot.press("alt+left")
        await pilot.pause()
        assert [w.text for w in app.query(UserMessage)] == ["Old prompt"] and shown(app) == ["Old reply."]
        stored = store.load(app.history.recorder.conversation_id)
        assert [m.content for m in stored.messages] == ["Old prompt", "Old reply."]
        assert [m.content for m in stored.branches] == ["New prompt", "New reply."]
