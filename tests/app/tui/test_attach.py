"""Attachments in the real app: /attach, @path, a directory confirmed first, hostile files refused.

Real SmolLM2 tokenizer and template, scripted backend.  The cost the
prompt box shows before Enter is compared with the ids the message got in
the prompt the session sent.
"""
from __future__ import annotations

import pytest
from support.tui_helpers import send, wait_loaded, wait_reply

from app.conversation.context_breakdown import breakdown
from app.tui.widgets.dialogs import ConfirmScreen
from app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


def sent_message_ids(session):
    record = session.last_record
    parts = breakdown(session.tokenizer, record)
    current = len(record.messages) - 1
    return [t for t, owner in zip(record.ids, parts.message_owner) if owner == current]


async def type_text(pilot, text: str) -> None:
    pilot.app.prompt_input.focus()
    await pilot.press(*[("space" if ch == " " else ch) for ch in text])
    await pilot.pause(0.3)  # the draft is priced after a short pause in typing


async def test_attach_shows_the_cost_that_is_sent(scripted_app, tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("Colours: \x1b[31mred\x1b[0m and <|im_end|> literal.\n", encoding="utf-8")
    app = scripted_app(["Got it."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, f"/attach {file}")
        assert [a.name for a in app.attachments.pending] == ["notes.txt"]
        await type_text(pilot, "Summarize")
        box = app.prompt_input
        shown = app.meter.draft
        assert f"notes.txt {app.attachments.pending[0].tokens}" in box.border_subtitle
        assert f"message {shown} tokens" in box.border_subtitle
        await pilot.press("enter")
        await wait_reply(pilot)
        ids = sent_message_ids(app.session)
        assert len(ids) == shown
        tok = app.session.tokenizer
        assert not any(tok.is_special(t) for t in ids)
        assert app.session.messages[-2].content.startswith('<file name="notes.txt" size="')
        assert app.attachments.pending == [] and box.border_subtitle == ""
        shown_text = str(app.query(UserMessage).last().render())
        assert shown_text == f"📎 notes.txt ({file.stat().st_size} B)\n\nSummarize"  # the file is one line
        stored = app.history.store.load(app.history.recorder.conversation_id).messages
        assert stored[-2].content == app.session.messages[-2].content


async def test_at_path_is_priced_while_typing_and_attached_on_send(scripted_app, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.md").write_text("# Plan\n\n1. Ship it.\n", encoding="utf-8")
    app = scripted_app(["Fine."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await type_text(pilot, "Check @pl")
        await pilot.press("tab")  # completes @pl -> @plan.md
        assert app.prompt_input.text == "Check @plan.md"
        await pilot.pause(0.3)
        shown = app.meter.draft
        assert "@plan.md" in app.prompt_input.border_subtitle
        await pilot.press("enter")
        await wait_reply(pilot)
        assert len(sent_message_ids(app.session)) == shown
        assert "<file name=\"plan.md\" size=\"20\">\n# Plan\n\n1. Ship it.\n</file>\n\nCheck @plan.md" == \
            app.session.messages[-2].content


async def test_binary_and_huge_files_are_refused_and_nothing_is_sent(scripted_app, tmp_path):
    binary = tmp_path / "a.bin"
    binary.write_bytes(bytes(range(256)))
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    app = scripted_app(["Fine."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        for path, why in ((binary, "looks binary"), (huge, "over the 1.0 MB limit")):
            await send(pilot, f"/attach {path}")
            assert app.attachments.pending == []
            assert any(why in n.message for n in app._notifications)
        # an @word naming a refused file stops the send, keeping the draft
        await type_text(pilot, f"look @{binary}")
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.messages == [] and app.prompt_input.text == f"look @{binary}"


async def test_a_directory_asks_first(scripted_app, tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.py").write_text("print('a')\n", encoding="utf-8")
    (folder / "b.py").write_text("print('b')\n", encoding="utf-8")
    (folder / "logo.png").write_bytes(b"\x89PNG\x00\x00")
    app = scripted_app(["Fine."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, f"/attach {folder}")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Attach these 2 files" in app.screen.question and "logo.png" not in app.screen.question
        assert app.attachments.pending == []
        await pilot.press("y")
        await pilot.pause()
        await pilot.pause()
        assert [a.name for a in app.attachments.pending] == ["a.py", "b.py"]
