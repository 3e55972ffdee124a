"""The app's behaviour on a scripted backend: input keys, commands, thinking, errors, history.

The real tokenizer and template run; only the backend replays fixed ids.
The real-model checks are in test_real_model.py.
"""
from __future__ import annotations

import json

import pytest
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.tui.format import stats_line
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.notice import Notice
from app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio

CODE_REPLY = "Here is code:\n\n```python\nprint('hi')\n```\n\nand more:\n\n```sh\necho ok\n```\n"


async def test_enter_sends_ctrl_j_newlines_and_up_recalls(scripted_app):
    app = scripted_app(["first reply", "second reply"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await pilot.press("a", "ctrl+j", "b")
        assert app.prompt_input.text == "a\nb"
        await pilot.press("enter")
        await wait_reply(pilot)
        assert [w.text for w in app.query(UserMessage)] == ["a\nb"]
        assert app.prompt_input.text == ""
        assert app.session.messages[-1].content == "first reply"
        assert app.query(AssistantMessage).last().content == "first reply"
        await pilot.press("up")
        assert app.prompt_input.text == "a\nb"
        await pilot.press("down")
        assert app.prompt_input.text == ""


async def test_stats_line_and_meter_follow_the_session(scripted_app):
    app = scripted_app(["Four."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        before = app.meter.used
        await pilot.press(*"hello")
        await wait_for(pilot, lambda: app.meter.draft > 0, what="the draft count")
        assert app.meter.draft == app.session.draft_tokens("hello")
        await pilot.press("enter")
        await wait_reply(pilot)
        stats = app.session.messages[-1].stats
        shown = str(app.query_one(AssistantMessage).query_one(".stats").render())
        assert shown == stats_line(app.stats_filter(stats))
        assert stats.completion_tokens == len(app.chat.tokenizer.encode("Four.")) + 1  # + the stop id
        # the meter: the conversation as rendered (`tokchat render --ids`), so the engine's count (prompt and
        # reply ids, the stop id <|im_end|> included) plus the "\n" the template puts after it
        assert app.meter.used == app.session.context_used == stats.context_used + 1 > before


async def test_thinking_streams_into_a_block_that_closes_when_the_answer_starts(scripted_app):
    app = scripted_app(["<think>Two and two.</think>The answer is **4**."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "2+2?")
        await wait_reply(pilot)
        reply = app.query_one(AssistantMessage)
        assert reply.reasoning == app.session.messages[-1].reasoning == "Two and two."
        assert reply.content == "The answer is **4**."
        assert reply.thinking.collapsed
        assert f"({app.session.messages[-1].stats.reasoning_tokens} tokens)" in reply.thinking.title
        await pilot.press("ctrl+t")
        assert not reply.thinking.collapsed


async def test_regenerate_and_edit_replace_the_last_turn(scripted_app, store):
    app = scripted_app(["one", "two", "three"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        await pilot.press("ctrl+r")
        await wait_reply(pilot)
        assert [r.content for r in app.query(AssistantMessage)] == ["two"]
        await pilot.press("ctrl+g")
        assert app.prompt_input.text == "hi"
        await pilot.press("!", "enter")
        await wait_reply(pilot)
        assert [u.text for u in app.query(UserMessage)] == ["hi!"]
        assert [(m.role, m.content) for m in app.session.messages] == [("user", "hi!"), ("assistant", "three")]
        stored = store.load(app.history.recorder.conversation_id).messages
        assert [(m.role, m.content) for m in stored] == [("user", "hi!"), ("assistant", "three")]


async def test_slash_commands_change_the_session(scripted_app, tmp_path):
    app = scripted_app([CODE_REPLY])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        for command in ("/temp 0.3", "/top_k 7", "/max_tokens 50", "/system Be brief."):
            app.prompt_input.load_text(command)
            await pilot.press("enter")
        assert (app.session.sampling.temperature, app.session.sampling.top_k,
                app.session.sampling.max_tokens) == (0.3, 7, 50)
        assert app.session.system_prompt == "Be brief."
        app.prompt_input.load_text("/temp hot")
        await pilot.press("enter")
        assert app.session.sampling.temperature == 0.3
        await send(pilot, "code please")
        await wait_reply(pilot)
        app.prompt_input.load_text("/copy code 1")
        await pilot.press("enter")
        assert app.clipboard == "print('hi')\n"
        await pilot.press("ctrl+o")
        assert app.clipboard == CODE_REPLY
        target = tmp_path / "chat.json"
        app.prompt_input.load_text(f"/export {target}")
        await pilot.press("enter")
        exported = json.loads(target.read_text())
        assert [m["content"] for m in exported["messages"]] == ["code please", CODE_REPLY]
        app.prompt_input.load_text("/stats")
        await pilot.press("enter")
        await pilot.pause()
        assert "completion tokens" in app.query(Notice).last().text
        app.prompt_input.load_text("/clear")
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.messages == [] and not app.query(AssistantMessage)
        assert app.session.system_prompt == "Be brief."


async def test_backend_failure_is_shown_and_the_partial_reply_kept(scripted_app):
    app = scripted_app(["one two three four five six"], fail_after=2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "go")
        await wait_reply(pilot)
        reply = app.query_one(AssistantMessage)
        message = app.session.messages[-1]
        assert message.finish_reason == "error"
        assert reply.content == message.content and reply.has_class("-error")
        assert "scripted fault" in str(reply.query_one(".stats").render())
        await send(pilot, "again")  # the app is still usable
        await wait_reply(pilot)
        assert len(app.query(AssistantMessage)) == 2


async def test_load_failure_keeps_the_app_usable(scripted_app, tmp_path):
    from app.settings.options import ChatOptions
    from app.tui.app import ChatApp

    app = ChatApp(ChatOptions(model=str(tmp_path / "missing.gguf")), store=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert app.chat is None
        assert "Could not load the model" in app.query(Notice).last().text
        assert "missing.gguf" in app.query(Notice).last().text
        await send(pilot, "hello")
        assert not app.query(AssistantMessage)
        app.prompt_input.load_text("/help")
        await pilot.press("enter")
        await pilot.pause()
        assert "/model [PATH" in app.query(Notice).last().text


async def test_history_sidebar_resume_rename_delete(scripted_app, store):
    app = scripted_app(["stored answer", "continued"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "remember me")
        await wait_reply(pilot)
        first = app.history.recorder.conversation_id
        app.prompt_input.load_text("/new")
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.messages == []
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert app.history.sidebar.highlighted_id() == first
        await pilot.press("enter")  # resume
        await pilot.pause()
        assert [m.content for m in app.session.messages] == ["remember me", "stored answer"]
        assert app.query_one(AssistantMessage).content == "stored answer"
        await send(pilot, "and then?")
        await wait_reply(pilot)
        assert len(store.load(first).messages) == 4
        await pilot.press("ctrl+b")  # opening closed the list; open it again: the search box has the focus
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("ctrl+u", *"Renamed", "enter")
        await pilot.pause()
        assert store.list_conversations()[0].title == "Renamed"
        await pilot.press("ctrl+d")
        await pilot.pause()
        await pilot.press("escape")  # cancel: nothing deleted
        await pilot.pause()
        assert len(store.list_conversations()) == 1
        await pilot.press("ctrl+d")
        await pilot.pause()
        await pilot.press("ctrl+d")
        await pilot.pause()
        assert store.list_conversations() == []


async def test_a_long_stored_conversation_opens_a_page_at_a_time(scripted_app, store):
    from app.conversation.session import ChatMessage, TurnStats
    from app.tui.widgets.chat_view import PAGE
    from app.tui.widgets.earlier_messages import EarlierMessages

    conv = store.new_conversation("smollm2.gguf", "chatml", "", {})
    for n in range(15):
        store.add_message(conv, ChatMessage("user", f"question {n}"))
        store.add_message(conv, ChatMessage("assistant", f"answer {n}", stats=TurnStats(completion_tokens=3),
                                            finish_reason="stop"))
    app = scripted_app(["next"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await app.history.resume_conversation(conv)
        await pilot.pause()
        assert len(app.session.messages) == 30  # the session has everything ...
        assert len(app.query(UserMessage)) + len(app.query(AssistantMessage)) == PAGE  # ... the view a page
        assert app.query_one(EarlierMessages).hidden == 30 - PAGE
        app.chat_view.scroll_home(animate=False, immediate=True)  # the row is at the top
        await pilot.pause()
        await pilot.click(EarlierMessages)
        await pilot.pause()
        assert len(app.query(UserMessage)) + len(app.query(AssistantMessage)) == 2 * PAGE
        app.query_one(EarlierMessages).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert [u.text for u in app.query(UserMessage)] == [f"question {n}" for n in range(15)]
        assert not app.query(EarlierMessages)
        await send(pilot, "one more")
        await wait_reply(pilot)
        assert app.query(AssistantMessage).last().content == "next"
        assert len(store.load(conv).messages) == 32


async def test_old_turns_dropped_to_fit_are_announced(scripted_app, smollm_path):
    from app.settings.options import ChatOptions
    from backends.base import SamplingParams

    long_reply = "word " * 60
    options = ChatOptions(model=str(smollm_path), sampling=SamplingParams(temperature=0, max_tokens=80))
    app = scripted_app([long_reply], options=options, context_size=256)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        for n in range(3):
            await send(pilot, f"turn {n}: " + "tell me more " * 5)
            await wait_reply(pilot)
        notices = [n.text for n in app.query(Notice) if n.kind == "warning"]
        assert any(text.startswith("context full: left the") for text in notices), notices
        stats = app.session.messages[-1].stats
        assert stats.dropped_turns >= 1
        shown = str(app.query(AssistantMessage).last().query_one(".stats").render())
        assert f"dropped {stats.dropped_turns} old turn(s)" in shown
        assert app.meter.used == app.session.context_used <= 256


async def test_think_and_template_commands(scripted_app):
    app = scripted_app(["fine"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hello")
        await wait_reply(pilot)
        await send(pilot, "/think on")
        assert app.session.enable_thinking is True
        await send(pilot, "/think off")
        assert app.session.enable_thinking is False
        await send(pilot, "/template chatml")
        assert app.session.template.name == "chatml"
        assert [m.content for m in app.session.messages] == ["hello", "fine"]
        assert "template chatml" in str(app.query_one("ModelBar").render())
        await send(pilot, "/template nosuch")
        assert app.session.template.name == "chatml"
        await send(pilot, "again")
        await wait_reply(pilot)
        assert app.session.messages[-1].content == "fine"


async def test_model_command_failure_keeps_the_loaded_model(scripted_app, tmp_path):
    app = scripted_app(["still here"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        loaded = app.chat
        await send(pilot, f"/model {tmp_path / 'nope.gguf'}")
        await wait_for(pilot, lambda: any("Still chatting" in n.text for n in app.query(Notice)), what="the notice")
        assert app.chat is loaded and app.query_one("ModelBar").state == "ready"
        await send(pilot, "hello")
        await wait_reply(pilot)
        assert app.query(AssistantMessage).last().content == "still here"


async def test_command_palette_runs_and_prefills_commands(scripted_app):
    app = scripted_app(["ok"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"/help")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("Commands:" in n.text for n in app.query(Notice)), what="the help")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"/top_k")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.prompt_input.text == "/top_k ", what="the prefilled command")
        await pilot.press("3", "enter")
        assert app.session.sampling.top_k == 3


async def test_sampling_set_in_the_session_goes_on_with_the_next_model(scripted_app, smollm_path, tmp_path):
    """``/temp`` then ``/model``: the new model keeps the user's temperature (issue 36's left-out item);
    read back the way a user does, ``/temp`` alone, from the drawn notice."""
    import shutil

    from support.screen_text import toasts

    other = tmp_path / "other.gguf"
    shutil.copyfile(smollm_path, other)
    app = scripted_app(["hello"])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        for command in ("/temp 0.35", "/top_k 9"):
            await send(pilot, command)
        first = app.chat
        await send(pilot, f"/model {other}")
        await wait_for(pilot, lambda: app.chat is not first and app.query_one("ModelBar").state == "ready",
                       what="the other model")
        app.clear_notifications()
        await send(pilot, "/temp")
        await send(pilot, "/top_k")
        await pilot.pause()
        shown = " | ".join(toasts(app))
        assert "temperature = 0.35" in shown and "top_k = 9" in shown, shown
        assert "other" in str(app.query_one("ModelBar").render())
