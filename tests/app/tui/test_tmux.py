"""End to end in a real terminal: ``tokchat`` inside tmux, driven with send-keys, read with capture-pane.

The counts on screen are checked against the TurnStats the app recorded in
its history database (a temporary one), so this proves the real terminal
shows the real accounting; then Esc stops a long reply, and Ctrl+Q quits.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from app.history.store import ChatStore
from support.tmux import ROOT, Tmux  # noqa: E402

pytestmark = pytest.mark.slow

STATS = re.compile(r"prompt (\d+) new / (\d+) total · completion (\d+) · reasoning (\d+)")


def test_tokchat_in_tmux(tmp_path, smollm_path):
    tmux = Tmux(tmp_path)
    env = {**os.environ, "TOKCHAT_DATA_DIR": str(tmp_path / "data"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
    command = (f"{sys.executable} -m app --model {smollm_path} --backend cpu --ctx 2048 "
               f"--temperature 0 --max-tokens 12; echo TOKCHAT-EXITED $?; sleep 30")
    subprocess.run(["tmux", "-S", tmux.socket, "new-session", "-d", "-s", tmux.name, "-x", "110", "-y", "34",
                    command], check=True, env=env, cwd=tmp_path)
    try:
        tmux.wait(lambda s: "llama.cpp on CPU" in s and "ctx 2048" in s, 90, "the model to load")
        tmux.keys("-l", "What is the capital of France?")
        # the meter counts what the next prompt holds (the system prompt) plus the draft
        tmux.wait(lambda s: re.search(r"ctx \d+\+\d+ /", s) is not None, 20, "the meter to count the draft")
        tmux.keys("Enter")
        screen = tmux.wait(lambda s: STATS.search(s) is not None, 120, "the reply's token counts")

        with ChatStore(tmp_path / "data" / "history.sqlite3") as store:
            conversation = store.load(store.last_conversation_id())
        reply = conversation.messages[-1]
        shown = STATS.search(screen).groups()
        assert tuple(map(int, shown)) == (reply.stats["new_prompt_tokens"], reply.stats["prompt_tokens"],
                                          reply.stats["completion_tokens"], reply.stats["reasoning_tokens"])
        # the meter counts the conversation as `tokchat render --ids` gives it on the stored messages
        stored = tmp_path / "stored.json"
        stored.write_text(json.dumps([{"role": m.role, "content": m.content} for m in conversation.messages]))
        rendered = subprocess.run([sys.executable, "-m", "app", "render", "--model", str(smollm_path), "--messages",
                                   str(stored), "--ids", "--no-generation-prompt"], capture_output=True, text=True,
                                  check=True, env=env, cwd=tmp_path)
        assert f"ctx {len(json.loads(rendered.stdout))} / 2048" in screen
        first_words = reply.content.split()[0]
        assert first_words in screen

        # a long reply, stopped with Esc: marked on screen, partial text kept.  Each step waits
        # for the screen, as a person would: keys sent in one burst read as a paste.
        tmux.keys("-l", "/max_tokens 400")
        tmux.wait(lambda s: "/max_tokens 400" in s, 10, "the command in the prompt box")
        tmux.keys("Enter")
        tmux.wait(lambda s: "max_tokens = 400" in s, 10, "the command's confirmation")
        story = "Write a very long story about a dragon who learns to cook."
        tmux.keys("-l", story)
        tmux.wait(lambda s: story in s, 10, "the prompt in the box")
        tmux.keys("Enter")
        tmux.wait(lambda s: "esc Stop" in s, 30, "the reply to start")
        tmux.wait(lambda s: re.search(r"█ \S+", s.split(story, 1)[-1].split("╭", 1)[0]) is not None, 120,
                  "the first words of the reply")
        tmux.keys("Escape")
        screen = tmux.wait(lambda s: "⏹ stopped" in s, 30, "the stopped marker")
        assert "cancelled" in screen
        with ChatStore(tmp_path / "data" / "history.sqlite3") as store:
            stopped = store.load(store.last_conversation_id()).messages[-1]
        assert stopped.finish_reason == "cancelled" and stopped.content.strip()
        assert stopped.content.split()[0] in screen.split(story, 1)[-1]

        tmux.keys("C-q")
        screen = tmux.wait(lambda s: "TOKCHAT-EXITED" in s, 20, "tokchat to quit")
        assert "TOKCHAT-EXITED 0" in screen
    finally:
        tmux.kill()
