"""Where engine logs go: a file, never the terminal.

llama.cpp prints model-loading chatter to stderr, which would tear through
the TUI.  Its log callback is process-wide, so one callback is installed
once and writes to the log file of the most recent load.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"path": None, "callback": None}


def default_log_path() -> Path:
    """``<user log dir>/tokchat/engine.log`` (platformdirs)."""
    from platformdirs import user_log_dir

    return Path(user_log_dir("tokchat", appauthor=False)) / "engine.log"


def _write(text: str) -> None:
    path = _state["path"]
    if path is None:
        return
    with _lock:
        try:
            with open(path, "a", encoding="utf-8", errors="replace") as fh:
                fh.write(text)
        except OSError:
            # a log that cannot be written must not stop the chat; the next load may fix the path
            _state["path"] = None


def capture_llama_log(path: Path | None) -> Path:
    """Send llama.cpp's (and ggml's) log to ``path`` from now on; returns the path used."""
    import ctypes

    import llama_cpp

    path = Path(path) if path else default_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    _state["path"] = path
    if _state["callback"] is None:

        def on_log(level: int, text: bytes, user_data: Any) -> None:
            _write(text.decode("utf-8", errors="replace"))

        # the ctypes wrapper must outlive every call from C, so it is kept here
        _state["callback"] = llama_cpp.llama_log_callback(on_log)
    llama_cpp.llama_log_set(_state["callback"], ctypes.c_void_p(0))
    return path
