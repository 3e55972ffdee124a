"""What the command line prints: text from the history, model files and config made inert on a terminal.

A conversation's title and text, a GGUF's metadata, a file name: any of them may hold escape
sequences (``ESC ] 0 ;`` retitles the window, ``ESC [ 2 J`` clears it, ``ESC ] 52`` writes the
clipboard).  The TUI draws them inert; the command line does the same whenever its output is a
terminal, with :func:`app.tools.display.printable` (controls written as ``\\x1b``).  Output to a pipe
or a file (``-o``) keeps the exact text: that is data, not a screen.
"""
from __future__ import annotations

import sys
from typing import TextIO

from app.tools.display import json_printable, printable


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-less stream is not a terminal
        return False


def shown(text: str, stream: TextIO | None = None) -> str:
    """``text`` as it may reach ``stream`` (stdout by default): inert if that is a terminal, else exact."""
    return printable(text) if is_terminal(stream) else text


def shown_json(text: str, stream: TextIO | None = None) -> str:
    """JSON text for ``stream``: to a terminal its controls are ``\\uXXXX`` escapes (the same JSON value)."""
    return json_printable(text) if is_terminal(stream) else text


def cell(text: str) -> str:
    """One cell of a listing's row: its whitespace (newlines included) made single spaces, so a row stays
    one line; pass the row through :func:`shown` for the controls."""
    return " ".join(text.split())
