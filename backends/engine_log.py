"""Where engine logs go: a file, never the terminal.

llama.cpp prints model-loading chatter to stderr, which would tear through
the TUI.  Its log callback is process-wide, so one callback is installed
once and writes to the log file of the most recent load.  Debug lines are
left out, as llama-server leaves them out without ``-v``.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"path": None, "file": None, "callback": None, "level": 0}

#: ggml's log levels (``enum ggml_log_level``): debug lines are dropped, a continuation takes the level
#: of the line it continues
_DEBUG, _CONT = 1, 5


def default_log_path() -> Path:
    """``<user log dir>/tokchat/engine.log`` (platformdirs)."""
    from platformdirs import user_log_dir

    return Path(user_log_dir("tokchat", appauthor=False)) / "engine.log"


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

    import llama_cpp

    path = Path(path) if path else default_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock:
        if _state["path"] != path and _state["file"] is not None:
            _state["file"].close()
            _state["file"] = None
        _state["path"] = path
    if _state["callback"] is None:

        def on_log(level: int, text: bytes, user_data: Any) -> None:
            _write(level, text.decode("utf-8", errors="replace"))

        # the ctypes wrapper must outlive every call from C, so it is kept here
        _state["callback"] = llama_cpp.llama_log_callback(on_log)
    llama_cpp.llama_log_set(_state["callback"], ctypes.c_void_p(0))
    return path
