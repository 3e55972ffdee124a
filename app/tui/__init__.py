"""The Textual chat TUI: ``tokchat`` with no ``--prompt``."""
from __future__ import annotations

import sys
from typing import Any, Callable, TextIO

from app.settings.options import ChatOptions


def run_tui(options: ChatOptions, with_preset: Callable[[], ChatOptions] | None = None,
            early: Any = None) -> int:
    """Open the chat window; the model loads inside it (errors are shown there, not raised).

    ``with_preset``: builds the options again with the model's preset (see
    :meth:`app.tui.app.ChatApp._load`), so the first frame never waits for the model file.
    ``early``: the engine the command line started (:class:`app.chat.early.EarlyEngine`), handed to the
    window's loader, which adopts it for the options it was started with.
    Returns the exit status: non-zero when the app ended on an unhandled exception.
    """
    from app.tui.app import ChatApp
    from app.tui.paste import use_paste_safe_parser

    use_paste_safe_parser()
    from app.tui.loader import early_loader

    app = ChatApp(options, with_preset=with_preset, loader=early_loader(early) if early is not None else None)
    app.run()
    return exit_status(app)


def exit_status(app: Any, err: TextIO | None = None) -> int:
    """The app's return code; after a crash the message the user was typing or sending goes to
    ``err`` (stderr), so a traceback never costs what was typed."""
    code = app.return_code or 0
    if code:
        text = app.unsent_text()
        if text.strip():
            print(f"tokchat: the message you were writing, kept here:\n{text}", file=err or sys.stderr)
    return code
