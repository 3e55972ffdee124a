"""Issue 27: the TUI's state, one owner each, driven through the real app as a user would.

Real SmolLM2 tokenizer and template, scripted backend (the replies are
fixed), the real history store in ``tmp_path``.  Each test is one defect of
the issue: what is sent, what is stored and what a resume sends agree, the
keys do what the footer says, and what the user typed is never lost.
"""
from __future__ import annotations

import io

import pytest
from textual import events
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio


async def press_text(pilot, text: str) -> None:
    pilot.app.prompt_input.focus()
    await pilot.press(*[("space" if ch == " " else ch) for ch in text])


async def run_slash(pilot, command: str) -> None:
    pilot.app.prompt_input.load_text(command)
    await pilot.press("enter")
    await pilot.pause()


def stored_path(store, conv_id):
    return [(m.role, m.content) for m in store.load(conv_id).messages]


def shown_binding(app, key: str):
    """The description the footer shows for ``key``, or None when the key is not shown."""
    app.screen.refresh_bindings()
    active = app.screen.active_bindings.get(key)
    return active.binding.description if active is not None and active.enabled else None


# 1 ---------------------------------------------------------------------------------------------

async def test_ctrl_g_then_ctrl_n_then_enter_sends_into_the_new_chat(scripted_app, store):
    app = scripted_app(["first", "second"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        old = app.history.recorder.conversation_id
        await pilot.press("ctrl+g")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.prompt_input.text == "hi"  # the edit ended, its text stays
        await pilot.press("enter")
        await wait_reply(pilot)
        assert [(m.role, m.content) for m in app.session.messages] == [("user", "hi"), ("assistant", "second")]
        assert app.history.recorder.conversation_id != old
        assert stored_path(store, old) == [("user", "hi"), ("assistant", "first")]
        assert stored_path(store, app.history.recorder.conversation_id) == [("user", "hi"), ("assistant", "second")]


async def test_ctrl_g_then_clear_then_a_new_message_is_sent_plainly(scripted_app, store):
    app = scripted_app(["first", "second"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        await pilot.press("ctrl+g")
        await run_slash(pilot, "/clear")
        await send(pilot, "fresh")
        await wait_reply(pilot)
        assert [(m.role, m.content) for m in app.session.messages] == [("user", "fresh"), ("assistant", "second")]
        assert stored_path(store, app.history.recorder.conversation_id) == [("user", "fresh"), ("assistant", "second")]


async def test_an_unhandled_exception_exits_non_zero_and_keeps_the_message(scripted_app, monkeypatch):
    from app.tui import exit_status

    app = scripted_app(["never"])

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in recording")

    with pytest.raises(RuntimeError, match="a bug in recording"):
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            monkeypatch.setattr(app.history, "record_user", broken)
            await send(pilot, "my carefully written question")
            await pilot.pause()
    err = io.StringIO()
    assert exit_status(app, err) == 1
    assert "my carefully written question" in err.getvalue()


# 2 ---------------------------------------------------------------------------------------------

async def test_an_edit_pending_in_one_chat_never_rewrites_another(scripted_app, store):
    app = scripted_app(["red fruit", "yellow fruit", "more"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "apple")
        await wait_reply(pilot)
        apple = app.history.recorder.conversation_id
        await pilot.press("ctrl+n")
        await send(pilot, "banana")
        await wait_reply(pilot)
        await pilot.press("ctrl+g")
        assert app.prompt_input.editing and "editing the last prompt" in app.prompt_input.border_title
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("down", "enter")  # the list is newest first: "apple" is second
        await pilot.pause()
        assert app.history.recorder.conversation_id == apple
        assert not app.prompt_input.editing and app.prompt_input.border_title == ""
        assert app.focused is app.prompt_input  # opening closed the list: the cursor is back in the box
        await pilot.press("enter")
        await wait_reply(pilot)
        conversation = store.load(apple)
        assert [(m.role, m.content) for m in conversation.messages] == [
            ("user", "apple"), ("assistant", "red fruit"), ("user", "banana"), ("assistant", "more")]
        assert conversation.branches == []  # nothing of "apple" was replaced


# 3 ---------------------------------------------------------------------------------------------

async def test_a_system_prompt_set_mid_chat_is_sent_stored_and_resumed(scripted_app, store):
    french = "Always answer in French."
    app = scripted_app(["hello", "bonjour"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        await run_slash(pilot, f"/system {french}")
        await send(pilot, "again")
        await wait_reply(pilot)
        conv = app.history.recorder.conversation_id
        assert french in app.session.last_prompt.text
    assert store.load(conv).info.system_prompt == french
    again = scripted_app(["oui"])
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv)
        await send(pilot, "more")
        await wait_reply(pilot)
        assert french in again.session.last_prompt.text


async def test_a_system_prompt_cleared_before_the_first_message_is_not_stored(scripted_app, store):
    app = scripted_app(["plain"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await run_slash(pilot, "/system Speak like a pirate.")
        await run_slash(pilot, "/clear")
        await run_slash(pilot, "/system")
        await send(pilot, "hello")
        await wait_reply(pilot)
        sent = app.session.last_prompt.text
        conv = app.history.recorder.conversation_id
    assert "pirate" not in sent
    assert store.load(conv).info.system_prompt == ""
    again = scripted_app(["again"])
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv)
        await send(pilot, "more")
        await wait_reply(pilot)
        assert "pirate" not in again.session.last_prompt.text


# 5 ---------------------------------------------------------------------------------------------

async def test_the_meter_counts_the_conversation_after_a_resume_a_new_model_and_a_system_prompt(
        scripted_app, store, smollm_path):
    app = scripted_app(["one answer", "two answer", "three"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        for text in ("first question", "second question"):
            await send(pilot, text)
            await wait_reply(pilot)
        conv = app.history.recorder.conversation_id
    again = scripted_app(["next"])
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv)
        await pilot.pause()
        resumed = again.meter.used
        assert resumed > 20  # two turns, not 0
        await run_slash(pilot, f"/model {smollm_path}")
        await wait_for(pilot, lambda: again.query_one("ModelBar").state == "ready" and again.meter.used,
                       what="the model to load again")
        assert again.meter.used == resumed  # the same conversation, the same tokenizer
        await run_slash(pilot, "/system " + "Answer with care and in detail. " * 30)
        assert again.meter.used > resumed + 150  # counted now, not after the next reply
        used = again.meter.used
        await send(pilot, "third")
        await wait_reply(pilot)
        # the prompt sent started with exactly what the meter counted
        prompt = again.session.messages[-1].stats.prompt_tokens
        assert used < prompt <= used + 20


# 6 ---------------------------------------------------------------------------------------------

async def test_model_switch_takes_the_new_presets_sampling_and_each_reply_names_its_model(
        scripted_app, store, smollm_path, gemma_path, tmp_path, monkeypatch):
    import argparse
    from dataclasses import replace

    from app.models.preset_match import chat_options

    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))  # no user config.toml
    options = replace(chat_options(argparse.Namespace(model=str(smollm_path), max_tokens=16)), theme="textual-dark")
    assert (options.sampling.temperature, options.sampling.top_k) == (0.2, 40)  # SmolLM2's preset
    app = scripted_app(["small answer", "gemma answer"], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        smollm_template = app.session.template.name
        await run_slash(pilot, f"/model {gemma_path}")
        await wait_for(pilot, lambda: app.chat.model_path == gemma_path
                       and app.query_one("ModelBar").state == "ready", what="Gemma to load")
        sampling = app.session.sampling
        assert (sampling.temperature, sampling.top_k, sampling.max_tokens) == (1.0, 64, 16)  # the flag stays
        await send(pilot, "hi again")
        await wait_reply(pilot)
        conv = app.history.recorder.conversation_id
    conversation = store.load(conv)
    replies = [m.stats for m in conversation.messages if m.role == "assistant"]
    assert [(r["model"], r["template"], r["sampling"]["temperature"]) for r in replies] == [
        (smollm_path.stem, smollm_template, 0.2), (gemma_path.stem, "gemma", 1.0)]
    assert (conversation.info.model_name, conversation.info.template) == (gemma_path.stem, "gemma")


# 7 ---------------------------------------------------------------------------------------------

async def test_quit_mid_reply_is_stored_as_stopped_with_its_counts(scripted_app, store):
    app = scripted_app([" ".join(f"word{n}" for n in range(400))], delay_s=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "talk")
        await wait_for(pilot, lambda: app.reply is not None and len(app.reply.content) > 20, what="some text")
        conv = app.history.recorder.conversation_id
        await pilot.press("ctrl+q")
    reply = store.load(conv).messages[-1]
    assert reply.role == "assistant" and reply.finish_reason == "cancelled"
    assert reply.completion_tokens and reply.completion_tokens > 3 and reply.prompt_tokens
    assert reply.content.startswith("word0 word1")
    again = scripted_app(["next"])
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv)
        await pilot.pause()
        line = str(again.query(AssistantMessage).last().query_one(".stats").render())
        assert "cancelled" in line and f"completion {reply.completion_tokens}" in line


# 8 ---------------------------------------------------------------------------------------------

async def test_a_paste_with_escape_sequences_is_inert_text_in_order_and_never_sent(scripted_app):
    app = scripted_app(["never"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        box = app.prompt_input
        box.focus()
        box.post_message(events.Paste("abc \x1b[31mred\x1b[0m xyz\r"))
        await pilot.pause()
        assert box.text == "abc \\x1b[31mred\\x1b[0m xyz\n"
        box.post_message(events.Paste("start \x1b]0;TITLE\x07 end"))
        await pilot.pause()
        assert box.text.endswith("start \\x1b]0;TITLE\\x07 end")
        assert not box.editing and app.session.messages == []


# 9 ---------------------------------------------------------------------------------------------

async def test_whitespace_alone_is_not_kept_for_the_next_message(scripted_app, store):
    app = scripted_app(["fine"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await pilot.press("space", "space", "space", "enter")
        await pilot.pause()
        assert app.prompt_input.text == "" and app.session.messages == []
        await send(pilot, "hello")
        await wait_reply(pilot)
        assert app.session.messages[0].content == "hello"
        assert stored_path(store, app.history.recorder.conversation_id)[0] == ("user", "hello")


# 11 --------------------------------------------------------------------------------------------

async def test_while_editing_the_meter_counts_the_replaced_prompt_once(scripted_app):
    app = scripted_app(["a reply of several words"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await pilot.pause(0.3)
        empty_chat = app.meter.used
        await send(pilot, "hello there")
        await wait_reply(pilot)
        assert app.meter.used > empty_chat
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: app.meter.draft > 0, what="the draft count")
        await pilot.pause(0.3)
        # what the next prompt keeps (the chat before the edited prompt) plus the draft
        assert app.meter.used == empty_chat
        assert app.meter.draft == app.session.draft_tokens("hello there")
        await pilot.press("escape")
        await pilot.pause(0.3)
        assert app.meter.used == app.session.context_used and app.meter.draft == 0


# 12 --------------------------------------------------------------------------------------------

async def test_the_footer_offers_stop_only_while_a_reply_streams(scripted_app):
    app = scripted_app([" ".join(["word"] * 300), "short"], delay_s=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert shown_binding(app, "escape") is None
        await send(pilot, "talk")
        await wait_for(pilot, lambda: app.reply is not None and app.reply.content, what="streaming")
        assert shown_binding(app, "escape") == "Stop"
        await pilot.press("escape")
        await wait_reply(pilot)
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert shown_binding(app, "escape") == "Cancel edit"
        await pilot.press("escape")
        await pilot.pause()
        assert not app.prompt_input.editing and app.prompt_input.text == ""
        assert shown_binding(app, "escape") is None


# 13 --------------------------------------------------------------------------------------------

async def test_emoji_joined_by_zwj_are_drawn_as_emoji(scripted_app):
    family, rainbow = "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈"
    app = scripted_app(["nice"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.load_text(f"{family} and {rainbow} \u202eflip")
        await pilot.press("enter")
        await wait_reply(pilot)
        shown = str(app.query_one(UserMessage).render())
        assert family in shown and rainbow in shown and "\\u200d" not in shown
        assert "\\u202e" in shown  # a bidi override is still drawn inert


# 14 --------------------------------------------------------------------------------------------

async def test_a_conversation_is_titled_from_the_users_words_not_the_attachment(scripted_app, store, tmp_path):
    file = tmp_path / "README.md"
    file.write_text("# hello\n", encoding="utf-8")
    app = scripted_app(["ok"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, f"/attach {file}")
        await send(pilot, "what does this say")
        await wait_reply(pilot)
        conv = app.history.recorder.conversation_id
    assert store.load(conv).info.title == "what does this say"


# 15 --------------------------------------------------------------------------------------------

async def test_ctrl_c_stops_a_streaming_reply(scripted_app):
    app = scripted_app([" ".join(f"word{n}" for n in range(400))], delay_s=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "talk")
        await wait_for(pilot, lambda: app.reply is not None and app.reply.content, what="streaming")
        await pilot.press("ctrl+c")
        await wait_reply(pilot, timeout_s=20)
        reply = app.session.messages[-1]
        assert reply.finish_reason == "cancelled" and reply.stats.completion_tokens < 400
        assert app.is_running


# 16 --------------------------------------------------------------------------------------------

async def test_a_message_over_the_context_is_refused_and_stays_in_the_box(scripted_app, smollm_path, tmp_path):
    app = scripted_app(["never"], options=ChatOptions(model=str(smollm_path), theme="textual-dark"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        huge = "lorem ipsum " * 1500  # far over the 2048-token context
        app.prompt_input.load_text(huge)
        await pilot.press("enter")
        await pilot.pause()
        assert app.prompt_input.text == huge
        assert app.session.messages == [] and not app.query(UserMessage) and not app.generating
        assert any("message too long" in n.message and "/attach" in n.message for n in app._notifications)
        # a held file that makes the message too long: refused the same way, the file still held
        big = tmp_path / "big.txt"
        big.write_text("lorem ipsum " * 1500, encoding="utf-8")
        await run_slash(pilot, f"/attach {big}")
        assert [a.name for a in app.attachments.pending] == ["big.txt"]
        app.prompt_input.load_text("summarize")
        await pilot.press("enter")
        await pilot.pause()
        assert app.prompt_input.text == "summarize" and [a.name for a in app.attachments.pending] == ["big.txt"]
        assert app.session.messages == [] and not app.generating


async def test_a_turn_the_session_refuses_changes_neither_the_history_nor_the_screen(scripted_app, store):
    app = scripted_app(["the answer", "never"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "question")
        await wait_reply(pilot)
        conv = app.history.recorder.conversation_id
        # a system prompt too long for the context leaves no room to answer the same question again
        await run_slash(pilot, "/system " + "Be thorough. " * 700)
        await pilot.press("ctrl+r")
        await wait_reply(pilot)
        await pilot.pause()
        assert [(m.role, m.content) for m in app.session.messages] == [("user", "question"), ("assistant", "the answer")]
        assert [r.content for r in app.query(AssistantMessage)] == ["the answer"]  # shown as it is
        conversation = store.load(conv)
        assert [(m.role, m.content) for m in conversation.messages] == [("user", "question"), ("assistant", "the answer")]
        assert conversation.branches == []  # the old reply was not stored again
        await run_slash(pilot, "/system")
        await send(pilot, "next")
        await wait_reply(pilot)
        parents = {m.id: m for m in store.load(conv).messages}
        last_user = store.load(conv).messages[-2]
        assert last_user.content == "next" and parents[last_user.parent_id].content == "the answer"
