"""A native crash of the engine mid-reply costs one line, never the chat (headless and the TUI).

Real parts: the real ``tokchat`` process (headless) or the real Textual app
(Pilot), the real engine host running llama.cpp on SmolLM2, a real SIGSEGV
sent to the engine's process, a real SQLite history.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.process_env import child_env

from app.history.store import ChatStore
from backends.engine_wire import ENGINE_PROCESS_MODULE

STORY = "Write a very long story about a dragon who learns to cook, with many chapters."


def engine_pids(parent: int) -> list[int]:
    """The engine-host processes whose parent is ``parent`` (from any of its threads)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and ENGINE_PROCESS_MODULE.encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_sigsegv_of_the_engine_mid_reply_headless(smollm_path, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", STORY, "--temperature", "0",
         "--max-tokens", "600", "--backend", "cpu", "--ctx", "1024", "--stats", "--repeat-penalty", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=child_env(tmp_path))
    os.set_blocking(process.stdout.fileno(), False)
    shown = b""
    deadline = time.monotonic() + 240
    while len(shown.split()) < 5:
        shown += process.stdout.read() or b""
        assert process.poll() is None, f"the reply ended before the signal: {shown!r}"
        assert time.monotonic() < deadline, "the reply did not start"
        time.sleep(0.05)
    (engine,) = engine_pids(process.pid)
    os.kill(engine, signal.SIGSEGV)
    out, err = process.communicate(timeout=120)
    printed = (shown + out).decode()
    errors = [line for line in err.decode().splitlines() if "died of" in line]
    assert process.returncode == 2, err
    assert len(errors) == 1 and "died of SIGSEGV (segmentation fault)" in errors[0] and "engine log" in errors[0]
    assert "Traceback" not in err.decode()
    with ChatStore(tmp_path / "data" / "history.sqlite3") as store:
        user, reply = store.load(store.last_conversation_id()).messages
    assert (user.role, user.content) == ("user", STORY)
    assert reply.finish_reason == "error" and reply.content.strip()
    assert printed.strip() == reply.content.strip()



@pytest.mark.anyio
@pytest.mark.slow
async def test_sigsegv_of_the_engine_mid_reply_in_the_tui(smollm_path, tmp_path):
    from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

    from app.settings.options import ChatOptions
    from app.tui.app import ChatApp
    from app.tui.widgets.assistant_message import AssistantMessage
    from backends.base import SamplingParams

    with ChatStore(tmp_path / "history.sqlite3") as store:
        options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=1024,
                              sampling=SamplingParams(temperature=0.0, max_tokens=500, repeat_penalty=1.0))
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            backend = app.session.backend
            first_pid = backend.pid
            await send(pilot, STORY)
            await wait_for(pilot, lambda: len(app.session.messages) >= 1 and app.generating
                           and len(app.query(AssistantMessage)) == 1
                           and len(app.query(AssistantMessage).last().content.split()) >= 5,
                           timeout_s=180, what="the reply to stream")
            os.kill(first_pid, signal.SIGSEGV)
            await wait_reply(pilot)
            partial = app.session.messages[-1]
            assert partial.role == "assistant" and partial.finish_reason == "error" and partial.content.strip()
            assert app.query(AssistantMessage).last().content == partial.content
            shown = [str(n.message) for n in app._notifications]
            assert any("died of SIGSEGV" in text and "engine log" in text for text in shown), shown

            await send(pilot, "What is the capital of France?")
            await wait_reply(pilot)
            answer = app.session.messages[-1]
            assert answer.finish_reason in ("stop", "length") and "Paris" in answer.content
            assert backend.pid != first_pid
        conversation = store.load(store.last_conversation_id()).messages
    assert [(m.role, m.finish_reason) for m in conversation] == [
        ("user", None), ("assistant", "error"), ("user", None), ("assistant", answer.finish_reason)]
    assert conversation[1].content == partial.content
