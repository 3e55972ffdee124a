"""A real terminal for the TUI tests: tmux sessions running tokchat, read with capture-pane."""
from __future__ import annotations
import shutil
import subprocess
import time
import uuid
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]


class Tmux:
    """One detached tmux session on a private socket."""

    def __init__(self, tmp: Path) -> None:
        if shutil.which("tmux") is None:
            raise AssertionError("tmux is not installed: apt-get install tmux")
        self.socket = str(tmp / "tmux.sock")
        self.name = f"tokchat-{uuid.uuid4().hex[:8]}"

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True, capture_output=True,
                              text=True).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.name, *keys)

    def wait(self, predicate, timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen was:\n{screen}")
            time.sleep(0.2)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)
