"""The Textual chat TUI: ``tokchat`` with no ``--prompt``."""
from __future__ import annotations

from app.options import ChatOptions


def run_tui(options: ChatOptions) -> int:
    """Open the chat window; the model loads inside it (errors are shown there, not raised)."""
    from app.tui.app import ChatApp

    ChatApp(options).run()
    return 0
