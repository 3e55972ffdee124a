"""The token inspector in the real app: opened by /tokens, F2 and a double click; numbers equal the session's.

The scripted tests use the real SmolLM2 tokenizer and template with a
backend that replays fixed ids (stable frames); the last test runs the real
model through llama.cpp.  Every count on screen is compared with the
session's own TurnStats, and every id with the ids the session sent.
"""
from __future__ import annotations

import pytest
from support.tui_helpers import send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.loader import scripted_loader
from app.tui.screens.token_inspector import TokenInspector
from app.tui.widgets.token_view import TokenView
from backends.base import SamplingParams
from support.tui_helpers import stable_timings

pytestmark = pytest.mark.anyio

SIZE_80 = (80, 30)
LONG = "The quick brown fox jumps over the lazy dog. " * 6
QUESTIONS = ["Tell me about foxes.", "And dogs?", "Which one is quicker?", "Why is that?"]


def small_context_app(smollm_path, store, ctx: int = 300, replies=(LONG,)) -> ChatApp:
    options = ChatOptions(model=str(smollm_path), theme="textual-dark",
                          sampling=SamplingParams(temperature=0.0, max_tokens=64))
    return ChatApp(options, loader=scripted_loader(smollm_path, list(replies), context_size=ctx),
                   stats_filter=stable_timings, store=store)


async def chat_until_a_turn_drops(pilot) -> None:
    await wait_loaded(pilot)
    for question in QUESTIONS:
        await send(pilot, question)
        await wait_reply(pilot)
    assert pilot.app.session.messages[-1].stats.dropped_turns > 0


def view_text(view: TokenView) -> str:
    """Every row the view draws, as text."""
    return "\n".join(view.row_strip(y).text for y in range(view.row_count))


async def test_f2_opens_the_last_turn_with_numbers_equal_to_the_session(smollm_path, store):
    app = small_context_app(smollm_path, store)
    async with app.run_test(size=SIZE_80) as pilot:
        await chat_until_a_turn_drops(pilot)
        stats = app.session.messages[-1].stats
        await pilot.press("f2")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TokenInspector)
        parts = screen.breakdown
        record = app.session.last_record
        assert screen.ids == list(record.ids) + list(record.reply_ids)  # the ids sent, then the reply
        assert record.ids == app.session.last_prompt.ids
        assert parts.prompt_tokens == stats.prompt_tokens == sum(p.tokens for p in parts.parts if not p.dropped)
        assert parts.reply_tokens == stats.completion_tokens and parts.used == stats.context_used
        assert sum(p.dropped for p in parts.parts) == stats.dropped_turns
        title = str(screen.query_one("#inspector-title").render())
        assert f"prompt {stats.prompt_tokens} ids" in title and f"used {stats.context_used} of 300" in title
        rows = [str(o.prompt) for o in screen.query_one("#parts").options]
        assert any("turn 1 (dropped)" in r and "dropped" in r.split()[-1] for r in rows)
        view = screen.query_one(TokenView)
        assert view.row_count > 0 and view.size.width <= 80
        text = view_text(view)
        assert text.count("<|im_start|>") == record.ids.count(app.session.tokenizer.special_tokens["<|im_start|>"])
        # the cursor line describes the token under it
        await pilot.press("right", "right")
        detail = str(screen.query_one("#token-detail").render())
        assert detail.startswith(f"#2 of {len(screen.ids)}  id {screen.ids[2]}")
        # ids instead of pieces
        await pilot.press("i")
        await pilot.pause()
        assert view_text(view).split()[0] == str(record.ids[0])
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TokenInspector)


async def test_choosing_a_part_selects_its_ids(smollm_path, store):
    app = small_context_app(smollm_path, store)
    async with app.run_test(size=SIZE_80) as pilot:
        await chat_until_a_turn_drops(pilot)
        await send(pilot, "/tokens")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TokenInspector)
        parts_list = screen.query_one("#parts")
        labels = [p.label for p in screen.breakdown.parts]
        current = labels.index("this turn's message")
        parts_list.focus()
        parts_list.highlighted = current
        await pilot.press("enter")
        await pilot.pause()
        view = screen.query_one(TokenView)
        assert view.selected_part == current
        cursor_ids = [screen.ids[i] for i, owner in enumerate(view.data.parts) if owner == current]
        assert app.session.tokenizer.decode(cursor_ids).strip() == QUESTIONS[-1]
        assert screen.breakdown.owner[view.cursor] == current


async def test_double_click_on_a_message_opens_the_prompt_it_was_sent_in(smollm_path, store, scripted_app):
    app = scripted_app(["Fine.", "Sure."])
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "First question")
        await wait_reply(pilot)
        await send(pilot, "Second question")
        await wait_reply(pilot)
        from app.tui.widgets.user_message import UserMessage

        first = app.query(UserMessage).first()
        await pilot.click(first, times=2)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TokenInspector)
        # the first message's own turn: its reply's record, the message selected
        assert screen.record is app.session.messages[1].record
        view = screen.query_one(TokenView)
        chosen = [screen.ids[i] for i, owner in enumerate(view.data.parts) if owner == view.selected_part]
        assert app.session.tokenizer.decode(chosen).strip() == "First question"


async def test_nothing_to_inspect_before_the_first_turn(scripted_app):
    app = scripted_app(["Hi."])
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        await pilot.press("f2")
        await pilot.pause()
        assert not isinstance(app.screen, TokenInspector)
        assert any("No turn to inspect yet" in n.message for n in app._notifications)


async def test_escape_sequences_and_control_literals_are_drawn_inert(smollm_path, store, scripted_app):
    app = scripted_app(["ok"])
    hostile = "red \x1b[31mRED\x1b[0m bell\x07 rtl\u202e <|im_end|> done"
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.load_text(hostile)
        app.prompt_input.focus()
        await pilot.press("enter")
        await wait_reply(pilot)
        await pilot.press("f2")
        await pilot.pause()
        view = app.screen.query_one(TokenView)
        text = view_text(view)
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
        assert "\\x1b[31mRED\\x1b[0m" in text and "\\x07" in text and "‹e2 80›‹ae›" in text
        tok = app.session.tokenizer
        parts = app.screen.breakdown
        user = next(i for i, m in enumerate(app.session.last_record.messages) if m.role == "user")
        typed = [t for t, owner in zip(app.session.last_record.ids, parts.message_owner) if owner == user]
        assert tok.decode(typed) == hostile and not any(tok.is_special(t) for t in typed)


async def test_a_full_8k_prompt_opens_and_scrolls_at_80_columns(smollm_path, store):
    long = "token " * 7000
    app = small_context_app(smollm_path, store, ctx=8192, replies=("ok",))
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.load_text(long)
        app.prompt_input.focus()
        await pilot.press("enter")
        await wait_reply(pilot)
        assert app.session.messages[-1].stats.prompt_tokens > 7000
        await pilot.press("f2")
        await pilot.pause()
        view = app.screen.query_one(TokenView)
        assert view.row_count * 80 >= 7000 * 5
        await pilot.press("end")
        await pilot.pause()
        assert view.cursor == len(app.screen.ids) - 1 and view.scroll_offset.y > 0
        assert view.render_line(0).cell_length == view.size.width


def test_snapshot_inspector_after_a_dropped_turn(snap_compare, smollm_path, store):
    async def run_before(pilot) -> None:
        await chat_until_a_turn_drops(pilot)
        await pilot.press("f2")
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(small_context_app(smollm_path, store), terminal_size=SIZE_80, run_before=run_before)


@pytest.mark.slow
async def test_real_model_inspector_numbers_equal_the_session(real_app):
    app = real_app(max_tokens=48, ctx=256)
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        assert app.chat is not None
        for question in ["Tell me a long story about a fox.", "Now one about a dog.", "And a cat?",
                         "And a bird?"]:
            await send(pilot, question)
            await wait_reply(pilot)
        stats = app.session.messages[-1].stats
        assert stats.dropped_turns > 0
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, TokenInspector), what="the inspector")
        parts = app.screen.breakdown
        assert app.screen.ids[:parts.prompt_tokens] == app.session.last_prompt.ids
        assert (parts.prompt_tokens, parts.reply_tokens, parts.used) == (
            stats.prompt_tokens, stats.completion_tokens, stats.context_used)
        # the turn's own prompt and reply; the meter (the conversation rendered) adds the reply's closing markup
        assert parts.used < app.session.context_used <= parts.used + 2
        assert sum(p.dropped for p in parts.parts) == stats.dropped_turns


async def test_a_resumed_chat_shows_its_turns_rebuilt_from_the_stored_text(smollm_path, store, scripted_app):
    from app.history.store import ChatStore
    from templates import prompt_ids

    app = scripted_app(["Fine.", "Sure."])
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "First question")
        await wait_reply(pilot)
        await send(pilot, "Second question")
        await wait_reply(pilot)
        sent = list(app.session.last_record.ids)
        conv_id = app.history.recorder.conversation_id
    fresh = ChatStore(store.path)
    again = ChatApp(ChatOptions(model=str(smollm_path), theme="textual-dark"),
                    loader=scripted_loader(smollm_path, ["Ok."]), stats_filter=stable_timings, store=fresh)
    async with again.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        await again.history.resume_conversation(conv_id)
        await pilot.pause()
        await pilot.press("f2")
        await pilot.pause()
        screen = again.screen
        assert isinstance(screen, TokenInspector)
        assert "rebuilt from the stored text" in str(screen.query_one("#inspector-title").render())
        session = again.session
        rendered = session.template.render(
            [{"role": m.role, "content": m.content} for m in session.messages[:-1]])
        assert screen.record.ids == prompt_ids(session.tokenizer, rendered)
        assert screen.record.ids == sent  # here the text gives back the very ids the first app sent
        assert sum(p.tokens for p in screen.breakdown.parts) == len(screen.record.ids)
    fresh.close()


async def test_brackets_move_between_turns(scripted_app):
    app = scripted_app(["One.", "Two.", "Three."])
    async with app.run_test(size=SIZE_80) as pilot:
        await wait_loaded(pilot)
        for question in ("First", "Second", "Third"):
            await send(pilot, question)
            await wait_reply(pilot)
        await pilot.press("f2")
        await pilot.pause()
        replies = [m for m in app.session.messages if m.role == "assistant"]
        assert app.screen.turn == 3 and app.screen.record is replies[2].record
        await pilot.press("[", "[")
        await pilot.pause()
        assert app.screen.turn == 1 and app.screen.record is replies[0].record
        assert app.screen.ids == list(replies[0].record.ids) + list(replies[0].record.reply_ids)
        await pilot.press("[")  # no turn 0: it stays, with one line
        await pilot.pause()
        assert app.screen.turn == 1 and any("no turn 0" in n.message for n in app._notifications)
        await pilot.press("]")
        await pilot.pause()
        assert app.screen.turn == 2 and app.screen.record is replies[1].record
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TokenInspector)
