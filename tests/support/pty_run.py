"""A real ``python -m app`` whose stdout (and, unless asked otherwise, stderr) is a pseudo-terminal.

What a user's terminal receives is what these tests read: the bytes the terminal got, in the
order it got them, stdout and stderr interleaved as on a screen when both are the terminal
(``pty.openpty``, as :mod:`tests.app.cli.test_terminal_escapes` does for stdout alone).
"""
from __future__ import annotations

import errno
import os
import pty
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what a terminal acts on: ESC, BEL and the one-byte CSI
RAW_CONTROLS = ("\x1b", "\x07", "\x9b")


@dataclass
class TerminalRun:
    returncode: int
    #: what the terminal received (stdout, and stderr when it shared the terminal), decoded, CRLF as LF
    screen: str
    #: stderr when it was a pipe ("" when it shared the terminal)
    stderr: str


def on_terminal(env: dict[str, str], *args: str, stderr_too: bool = True, timeout_s: float = 600) -> TerminalRun:
    """Run tokchat with stdout (and stderr, with ``stderr_too``) on one pseudo-terminal; stdin from /dev/null."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave if stderr_too else subprocess.PIPE)
    os.close(slave)
    received = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:
            if exc.errno != errno.EIO:  # EIO: every writer of the terminal has closed it (its end of file)
                raise
            break
        if not chunk:
            break
        received += chunk
    os.close(master)
    code = proc.wait(timeout=timeout_s)
    err = "" if proc.stderr is None else proc.stderr.read().decode("utf-8", "replace")
    if proc.stderr is not None:
        proc.stderr.close()
    return TerminalRun(code, received.decode("utf-8", "replace").replace("\r\n", "\n"), err)
