"""The Textual chat TUI: ``tokchat`` with no ``--prompt``."""
from __future__ import annotations

from typing import Callable

from app.options import ChatOptions


def run_tui(options: ChatOptions, with_preset: Callable[[], ChatOptions] | None = None) -> int:
    """Open the chat window; the model loads inside it (errors are shown there, not raised).

    ``with_preset``: builds the options again with the model's preset (see
    :meth:`app.tui.app.ChatApp._load`), so the first frame never waits for the model file.
    """
    from app.tui.app import ChatApp

    ChatApp(options, with_preset=with_preset).run()
    return 0
