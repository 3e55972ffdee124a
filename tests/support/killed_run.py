"""Kill a real ``tokchat`` process with SIGKILL once its reply has been saved mid-way, and read what it left.

Shared by the tests of issue 44 (C2, C9, "a SIGKILL at any moment of any reply path keeps what was
printed, marked as cut"): headless on the local engine and against a server.  The kill comes once the
history holds the reply still being written (``finish_reason`` NULL, its writer alive) with more than
30 characters beyond what the row held before, so a periodic save, not the first words, is what stays.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from app.history.store import ChatStore, StoreError
from app.history.types import StoredMessage


def history_file(env: dict[str, str]) -> Path:
    return Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3"


def last_message(env: dict[str, str], conv: int = 1) -> StoredMessage:
    """The last message of conversation ``conv``, read without writing (as ``export`` reads it): nothing
    has marked a dead writer's reply since the kill."""
    with ChatStore(history_file(env), readonly=True) as store:
        return store.load(conv).messages[-1]


def kill_once_saved(argv: Sequence[str], env: dict[str, str], cwd: Path, stored_before: str = "",
                    timeout_s: float = 240.0) -> str:
    """Run ``python -m app *argv``; SIGKILL it once its reply in conversation 1 has grown 30 characters past
    ``stored_before`` in the history.  Returns everything it printed on stdout."""
    process = subprocess.Popen([sys.executable, "-m", "app", *argv], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert process.poll() is None, f"it ended before the kill: {process.communicate()}"
            assert time.monotonic() < deadline, "the reply was never saved while it was written"
            reply = None
            if history_file(env).exists():
                try:
                    reply = last_message(env)
                except StoreError:  # the process is creating the database or the conversation: read it again
                    reply = None
            if reply is not None and reply.role == "assistant" and reply.finish_reason is None \
                    and len(reply.content) > len(stored_before) + 30:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    assert process.returncode == -signal.SIGKILL
    return out.decode()
