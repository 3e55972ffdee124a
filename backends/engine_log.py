"""Where engine logs go: a file, never the terminal.

llama.cpp prints model-loading chatter to stderr, which would tear through
the TUI.  Its log callback is process-wide, so one callback is installed
once and writes to the log file of the most recent load.  Debug lines are
left out, as llama-server leaves them out without ``-v``.

The log is kept bounded: before an engine starts writing to it, a log past
:data:`LOG_LIMIT_BYTES` becomes ``engine.log.1`` (replacing the one before) and a
new one begins (:func:`rotate_log`), so the log of the last crash is still there
after the next start.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"path": None, "file": None, "callback": None, "level": 0}

#: a log larger than this is moved aside (to ``NAME.1``) before the next engine writes to it
LOG_LIMIT_BYTES = 4 << 20

#: ggml's log levels (``enum ggml_log_level``): debug lines are dropped, a continuation takes the level
#: of the line it continues
_DEBUG, _CONT = 1, 5


def default_log_path() -> Path:
    """``<user log dir>/tokchat/engine.log`` (platformdirs)."""
    from platformdirs import user_log_dir

    return Path(user_log_dir("tokchat", appauthor=False)) / "engine.log"


def rotate_log(path: Path, limit: int = LOG_LIMIT_BYTES) -> None:
    """Move ``path`` to ``path.1`` (replacing it) when it has grown past ``limit`` bytes.

    Called before an engine opens the log, never under a writer of this process; another tokchat's engine
    still writing to the old file goes on writing to ``.1``, which is harmless.  A log that cannot be moved
    (a read-only folder) is left as it is: the chat must not fail for its log."""
    try:
        if path.stat().st_size > limit:
            os.replace(path, path.with_name(path.name + ".1"))
    except OSError:
        pass  # no log yet, or it cannot be moved: nothing to do


def _write(level: int, text: str) -> None:
    """Append one message to the current log, unless it is one of llama.cpp's debug lines.

    A model load sends about 1,700 debug lines (one per tensor, one per graph input) that
    llama-server prints only with ``-v``: writing them cost the load tens of milliseconds.
    The file stays open between messages and is flushed after each, so a native crash
    right after a message still leaves it in the log."""
    if level == _CONT:
        level = _state["level"]
    _state["level"] = level
    if level == _DEBUG:
        return
    with _lock:
        path, fh = _state["path"], _state["file"]
        if path is None:
            return
        try:
            if fh is None:
                fh = _state["file"] = open(path, "a", encoding="utf-8", errors="replace")
            fh.write(text)
            fh.flush()
        except OSError:
            # a log that cannot be written must not stop the chat; the next load may fix the path
            _state["path"] = _state["file"] = None


def capture_llama_log(path: Path | None) -> Path:
    """Send llama.cpp's (and ggml's) log to ``path`` from now on; returns the path used."""
    import ctypes

    from backends.llama_lib import llama_bindings

    llama_cpp = llama_bindings()

    path = Path(path) if path else default_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock:
        if _state["path"] != path:
            if _state["file"] is not None:
                _state["file"].close()
                _state["file"] = None
            rotate_log(path)  # engines in this process (tests, in_process()): the log is bounded here too
        _state["path"] = path
    if _state["callback"] is None:

        def on_log(level: int, text: bytes, user_data: Any) -> None:
            _write(level, text.decode("utf-8", errors="replace"))

        # the ctypes wrapper must outlive every call from C, so it is kept here
        _state["callback"] = llama_cpp.llama_log_callback(on_log)
    llama_cpp.llama_log_set(_state["callback"], ctypes.c_void_p(0))
    return path
