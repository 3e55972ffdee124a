"""``tokchat --model hf:ORG/REPO:QUANT`` on first use, in a real terminal (tmux): the Rich progress bar,
then the chat opens on the downloaded model.  The hub is tests/support/hub_standin.py on loopback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.tmux import Tmux

from support.hub_standin import HubStandin

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
REPO = "tokchat-test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


def test_first_use_downloads_with_a_bar_then_opens_the_chat(tmp_path, smollm_path):
    server = HubStandin()
    hosted = server.add_file(REPO, FILE, smollm_path)
    hosted.hold_after = 40_000_000  # stop mid-file so the bar can be read
    server.start()
    tmux = Tmux(tmp_path)
    env = {**os.environ, "HF_ENDPOINT": server.endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
           "TOKCHAT_DATA_DIR": str(tmp_path / "data"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "TOKCHAT_CONFIG_DIR": str(tmp_path / "config"), "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    command = (f"{sys.executable} -m app --model hf:{REPO}:Q4_1 --backend cpu --ctx 2048; "
               "echo TOKCHAT-EXITED $?; sleep 30")
    subprocess.run(["tmux", "-S", tmux.socket, "new-session", "-d", "-s", tmux.name, "-x", "110", "-y", "30",
                    command], check=True, env=env, cwd=tmp_path)
    try:
        screen = tmux.wait(lambda s: "/98.4 MB" in s and "MB/s" in s, 90, "the progress bar")
        lines = screen.splitlines()
        assert lines[0] == f"hf:{REPO}:Q4_1: {FILE} (Q4_1, as asked)"
        assert lines[1].startswith("downloading 98.4 MB into ")
        bar = next(line for line in lines if "/98.4 MB" in line)
        assert bar.startswith(FILE) and "━" in bar
        hosted.release.set()
        screen = tmux.wait(lambda s: "llama.cpp on CPU" in s and "ctx 2048" in s, 120, "the chat on the new model")
        assert screen.splitlines()[0].lstrip().startswith("tokchat · ") and "Q4_1" in screen.splitlines()[0]
        tmux.keys("C-q")
        tmux.wait(lambda s: "TOKCHAT-EXITED 0" in s, 30, "tokchat to quit")
        assert list((tmp_path / "hf" / "hub").rglob(FILE))
    finally:
        tmux.kill()
        server.stop()
