"""Continuing a reply whose stats were never stored (issue 44, T4 and C3): the drawn stats line and the row.

A real process writes a reply through the real recorder and is killed with a real SIGKILL after its
first words are saved, so the stored reply is cut with no stats, as after ``kill -9``.  The real app
on SmolLM2 (llama.cpp) opens it from the history and continues it with Ctrl+L.  The counts are checked
against ``tokchat render --ids`` (the prompt) and the reply's ids (its text encoded, what the continue
resumes from, then the ids generated).
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

from app.tui.widgets.assistant_message import AssistantMessage
from tokenizer import load_tokenizer

pytestmark = pytest.mark.anyio

QUESTION = "Tell me a story about a cat."
CUT = "Once upon a time, in a small village,"

#: a chat window: a new conversation in database argv[1], the question committed, the reply's first words saved;
#: then it waits to be killed
WRITER = r"""
import sys
from app.conversation.messages import ChatMessage, ReplyEvent
from app.history.recorder import HistoryRecorder

recorder = HistoryRecorder(store_path=sys.argv[1])
recorder.on_user(ChatMessage(role="user", content=sys.argv[2], reasoning="", stats=None, finish_reason=None))
recorder.on_event(ReplyEvent(kind="content", text=sys.argv[3]))
print("saved", flush=True)
sys.stdin.readline()
"""


def killed_mid_reply(tmp_path: Path, db: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(db), QUESTION, CUT], text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(tmp_path))
    try:
        assert process.stdout.readline().strip() == "saved"
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    assert process.returncode == -signal.SIGKILL


def render_ids(tmp_path: Path, model: Path, messages: list[dict]) -> list[int]:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "app", "render", "--model", str(model), "--messages", str(path),
                          "--ids"], env=child_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


async def test_continuing_a_reply_cut_by_sigkill_counts_its_prompt_and_every_id_of_it(real_app, store, smollm_path,
                                                                                       tmp_path):
    """T4: "prompt 59 new / 59 total · completion 12" with no parts, where the prompt is 38 and the reply 33 ids."""
    killed_mid_reply(tmp_path, store.path)
    prompt = render_ids(tmp_path, smollm_path, [{"role": "user", "content": QUESTION}])
    cut_ids = len(load_tokenizer(smollm_path).encode(CUT))
    app = real_app(max_tokens=12)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: CUT in words(drawn(app)), what="the cut reply to open")
        await pilot.pause()
        app.prompt_input.focus()
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: app.generating, what="the continue to start")
        await wait_reply(pilot)
        (widget,) = list(app.query(AssistantMessage))
        line = words(drawn(app, widget.query_one(".stats")))
        assert f"/ {len(prompt)} total · completion {cut_ids + 12} ·" in line, line
        assert f"2 parts ({cut_ids} + 12)" in line, line
        assert f"{cut_ids} evaluated again to continue" in line, line  # a new engine: the reply's ids again
        row = store.load(app.history.recorder.conversation_id).messages[-1]
        assert row.content.startswith(CUT) and row.finish_reason == "length"
        assert (row.prompt_tokens, row.completion_tokens) == (len(prompt), cut_ids + 12)
        assert [p["completion_tokens"] for p in row.stats["parts"]] == [cut_ids, 12]
        print(line)
