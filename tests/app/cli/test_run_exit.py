"""``tokchat`` (``app.cli.run``) ends without the interpreter's teardown, and loses nothing by it.

Real processes: ``python -m app`` with real output going to a pipe.  What
the teardown would have done that reaches outside the process (the atexit
functions, the flush of stdout and stderr, waiting for a thread that is not a
daemon) must still happen, with the statuses ``sys.exit`` would give.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "app", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_statuses_are_those_sys_exit_gives():
    assert _run("--version").returncode == 0 and _run("--version").stdout.startswith("tokchat ")
    bad = _run("--no-such-flag")
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr


def test_buffered_output_atexit_and_a_running_thread_are_not_lost(smollm_path):
    """Output left in the buffers, an atexit function and a thread that is not a daemon, all around a real
    ``tokchat tokenize`` run through ``app.cli.run``."""
    code = (
        "import atexit, sys, threading, time\n"
        "sys.stdout.write('buffered ')\n"
        "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread ended', file=sys.stderr))).start()\n"
        f"sys.argv = ['tokchat', 'tokenize', '--model', {str(smollm_path)!r}, 'Hello']\n"
        "from app.cli import run\n"
        "run()\n"
    )
    done = _run(code=code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("buffered ") and len(done.stdout.split()) > 1  # the ids followed
    assert "thread ended" in done.stderr and "atexit ran" in done.stderr


def test_without_a_running_thread_the_process_ends_at_once_and_flushes(smollm_path):
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
        f"sys.argv = ['tokchat', 'tokenize', '--model', {str(smollm_path)!r}, 'Hello']\n"
        "from app.cli import run\n"
        "run()\n"
        "print('not reached', file=sys.stderr)\n"
    )
    done = _run(code=code)
    assert done.returncode == 0 and done.stdout.strip() and "atexit ran" in done.stderr
    assert "not reached" not in done.stderr
