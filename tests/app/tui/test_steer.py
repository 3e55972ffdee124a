"""Pilot tests for steering the reply: /continue (Ctrl+L), /reply, /fork, /think on|off|budget N.

The real app; /continue runs on the real SmolLM2 through llama.cpp (the
oracle: the engine generating the whole reply in one go), the rest on the
scripted backend with the real tokenizer and template.  The config file the
thinking choices are written to is a real config.toml in a temporary
directory (TOKCHAT_CONFIG_DIR).
"""
from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    path = tmp_path / "config"
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(path))
    return path


async def test_ctrl_l_continues_a_cut_reply_into_the_same_message_as_one_long_reply(real_app, store):
    app = real_app(max_tokens=12)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "Tell me a long story about a cat.")
        await wait_reply(pilot)
        reply = app.session.messages[-1]
        assert reply.finish_reason == "length" and len(reply.reply_ids) == 12
        head = list(app.session.last_record.prompt.ids)
        await pilot.press("ctrl+l")
        await wait_reply(pilot)
        messages = app.session.messages
        assert messages[-1] is reply and len(reply.reply_ids) == 24
        # one reply widget, showing the whole reply, with both parts in its stats line
        widgets = list(app.query(AssistantMessage))
        assert len(widgets) == 1 and widgets[0].content == reply.content
        assert "2 parts (12 + 12)" in str(widgets[0].query_one(".stats").render())
        # the oracle: the engine asked for 24 ids in one go from the same prompt
        one_go = list(app.chat.backend.generate(head, replace(app.session.sampling, max_tokens=24),
                                                app.session.stop_ids))
        assert list(reply.reply_ids) == one_go
        conv = store.load(app.history.recorder.conversation_id)
        assert [m.role for m in conv.messages] == ["user", "assistant"]
        assert conv.messages[-1].content == reply.content and conv.messages[-1].reply_ids == one_go
        assert [p["completion_tokens"] for p in conv.messages[-1].stats["parts"]] == [12, 12]


async def test_continue_on_a_finished_reply_says_why_and_changes_nothing(scripted_app):
    app = scripted_app(["Done."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        await send(pilot, "/continue")
        await pilot.pause()
        assert not app.generating and [m.content for m in app.session.messages] == ["hi", "Done."]
        assert any("ended on its own" in str(n.message) for n in app._notifications)


async def test_reply_with_an_opening_shows_it_as_the_users_and_stores_it(scripted_app, store):
    app = scripted_app(["First.", " a cat."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "What is it?")
        await wait_reply(pilot)
        await send(pilot, "/reply It is")
        await wait_reply(pilot)
        reply = app.session.messages[-1]
        assert (reply.content, reply.opening) == ("It is a cat.", "It is")
        opening_ids = app.chat.tokenizer.encode("It is")
        assert reply.stats.opening_tokens == len(opening_ids)
        assert reply.stats.completion_tokens == len(app.chat.tokenizer.encode(" a cat.")) + 1
        widget = app.query(AssistantMessage).last()
        assert widget.content == "It is a cat." and widget.has_class("-opening")
        assert "you wrote the start" in str(widget.query_one(".opening").render())
        assert "your start" in str(widget.query_one(".stats").render())
        assert len(app.query(AssistantMessage)) == 1  # the old reply is a sibling, not on screen
        conv = store.load(app.history.recorder.conversation_id)
        assert [(m.content, m.opening) for m in conv.messages] == [("What is it?", ""), ("It is a cat.", "It is")]
        assert [m.content for m in conv.branches] == ["First."]
        # a resume shows the opening marked again
        await app.history.resume_conversation(app.history.recorder.conversation_id)
        await pilot.pause()
        assert app.query(AssistantMessage).last().has_class("-opening")


async def test_reply_alone_puts_the_last_reply_in_the_box_to_edit(scripted_app):
    app = scripted_app(["Hello there."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hi")
        await wait_reply(pilot)
        await send(pilot, "/reply")
        assert app.prompt_input.text == "/reply Hello there."


async def test_fork_makes_a_linked_conversation_and_keeps_the_old_one(scripted_app, store):
    app = scripted_app(["One.", "Two.", "Three."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "a")
        await wait_reply(pilot)
        await send(pilot, "b")
        await wait_reply(pilot)
        source = app.history.recorder.conversation_id
        await send(pilot, "/fork 2")
        await pilot.pause()
        assert [m.content for m in app.session.messages] == ["a", "One."]
        assert [w.text for w in app.query(UserMessage)] == ["a"]
        fork_id = app.history.recorder.conversation_id
        assert fork_id != source
        info = store.load(fork_id).info
        assert (info.forked_from, info.forked_at) == (source, store.load(source).messages[1].id)
        await send(pilot, "c")
        await wait_reply(pilot)
        assert [m.content for m in store.load(fork_id).messages] == ["a", "One.", "c", "Three."]
        assert [m.content for m in store.load(source).messages] == ["a", "One.", "b", "Two."]
        # forking at a user message keeps what came before and puts its text back in the box
        await send(pilot, "/fork 3")
        await pilot.pause()
        assert [m.content for m in app.session.messages] == ["a", "One."] and app.prompt_input.text == "c"


async def test_think_switch_and_budget_are_applied_and_remembered_per_model(scripted_app, smollm_path,
                                                                           config_dir):
    options = ChatOptions(model=str(smollm_path), template="chatml-think", theme="textual-dark")
    app = scripted_app(["<think>\none two three four five six seven eight", "Answer."], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/think budget 3")
        assert app.session.reasoning_budget == 3
        await send(pilot, "Why?")
        await wait_reply(pilot)
        reply = app.session.messages[-1]
        # after 3 reasoning ids tokchat closed the block; the model's next generation is the answer
        close = app.session.think_close_ids()
        ids = list(reply.reply_ids)
        at = next(i for i in range(len(ids)) if ids[i:i + len(close)] == close)
        answer = app.chat.tokenizer.encode("Answer.")
        assert ids[at + len(close):] == answer + [ids[-1]]  # the second generation, then its stop id
        # the model's 3 reasoning ids; tokchat's closing ids are counted apart (issue 34 item 9)
        assert (reply.stats.reasoning_tokens, reply.stats.forced_close_tokens) == (3, len(close))
        assert reply.content == "Answer." and reply.reasoning.startswith("one")
        assert reply.stats.reasoning_cut and "reasoning budget reached" in str(
            app.query(AssistantMessage).last().query_one(".stats").render())
        await send(pilot, "/think off")
        assert app.session.enable_thinking is False
        assert app.session.last_prompt is not None
        name = app.chat.info.model_name
    stored = tomllib.loads((config_dir / "config.toml").read_text())
    assert stored["models"][name] == {"reasoning_budget": 3, "thinking": "off"}
    # the next start with this model applies them; the prompt is rendered with thinking off
    again = scripted_app(["Four."], options=options)
    async with again.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert again.session.enable_thinking is False and again.session.reasoning_budget == 3
        await send(pilot, "2+2?")
        await wait_reply(pilot)
        assert again.session.last_prompt.text.endswith("<think>\n\n</think>\n\n")
    # a flag wins over what was remembered
    flagged = scripted_app(["Four."], options=replace(options, think=True, reasoning_budget=7))
    async with flagged.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert flagged.session.enable_thinking is True and flagged.session.reasoning_budget == 7


async def test_template_switch_keeps_the_reasoning_budget_and_every_other_setting(scripted_app, smollm_path):
    options = ChatOptions(model=str(smollm_path), template="chatml-think", theme="textual-dark")
    app = scripted_app(["<think>\none two three four five six seven eight", "Answer."], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        for command in ("/think budget 3", "/think on", "/temp 0.3", "/system Be brief."):
            await send(pilot, command)
        await send(pilot, "/template chatml")
        session = app.session
        assert session.template.name == "chatml"
        assert (session.reasoning_budget, session.enable_thinking, session.sampling.temperature,
                session.system_prompt) == (3, True, 0.3, "Be brief.")
        # the budget still closes the think block after 3 reasoning ids, with the new template
        await send(pilot, "Why?")
        await wait_reply(pilot)
        reply = session.messages[-1]
        assert reply.stats.reasoning_cut and reply.stats.reasoning_tokens == 3 and reply.content == "Answer."
        assert reply.stats.template == "chatml"


async def test_think_budget_refuses_a_bad_number(scripted_app, config_dir):
    app = scripted_app(["x"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/think budget lots")
        assert app.session.reasoning_budget is None and not (config_dir / "config.toml").exists()
        assert any("whole number" in str(n.message) for n in app._notifications)


async def test_ctrl_f_in_the_history_list_forks_a_stored_conversation_and_opens_it(scripted_app, store):
    app = scripted_app(["One.", "Two."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "a")
        await wait_reply(pilot)
        source = app.history.recorder.conversation_id
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: len(app.query("ConversationItem")) == 1, what="the history list")
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: app.history.recorder.conversation_id != source, what="the fork to open")
        fork = store.load(app.history.recorder.conversation_id)
        assert fork.info.forked_from == source and [m.content for m in fork.messages] == ["a", "One."]
        assert [m.content for m in app.session.messages] == ["a", "One."]
        await pilot.press("ctrl+b")  # the fork opened and closed the list: open it again
        await wait_for(pilot, lambda: any("fork of #" in str(label.render())
                                          for label in app.query(".meta")), what="the fork's row")


async def test_a_reply_edit_ends_when_another_conversation_opens(scripted_app, store):
    """Issue 33, 7: ``/reply`` in A, Ctrl+B, open B, Enter must never put A's reply into B."""
    from support.screen_text import drawn, words

    app = scripted_app(["yellow fruit", "red fruit", "more"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "banana")
        await wait_reply(pilot)
        banana = app.history.recorder.conversation_id
        await pilot.press("ctrl+n")
        await send(pilot, "apple")
        await wait_reply(pilot)
        await send(pilot, "/reply")
        await pilot.pause()
        box_while_editing = words(drawn(app, app.prompt_input))
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("down", "enter")  # the list is newest first: "banana" is second
        await wait_for(pilot, lambda: app.history.recorder.conversation_id == banana, what="B to open")
        await pilot.press("enter")
        await pilot.pause()
        await wait_reply(pilot)
        assert [(m.role, m.content) for m in store.load(banana).messages] == [
            ("user", "banana"), ("assistant", "yellow fruit")]
        assert store.load(banana).branches == []  # nothing of B was replaced
        assert [w.content for w in app.query(AssistantMessage)] == ["yellow fruit"]
        assert "red fruit" not in words(drawn(app, app.prompt_input))
        assert "/reply red fruit" in box_while_editing and "editing the last reply" in box_while_editing
        assert app.prompt_input.border_title == ""
        await pilot.press("up")  # the edited text is not lost: it is in the recall list
        assert app.prompt_input.text == "/reply red fruit"
