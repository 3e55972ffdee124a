"""A line of information in the chat view: a dropped-turns notice, an error, help or totals.

Errors that happen during a turn or a load land here (as well as in a
toast), so they stay readable after the toast has gone.
"""
from __future__ import annotations

from textual.widgets import Static


class Notice(Static):
    """``kind`` is ``info`` | ``warning`` | ``error``; it picks the colour."""

    DEFAULT_CSS = """
    Notice {
        margin: 1 1 0 1;
        padding: 0 1;
        color: $text-muted;
    }
    Notice.-warning { color: $text-warning; border-left: thick $warning; }
    Notice.-error { color: $text-error; border-left: thick $error; background: $error-muted 30%; }
    """

    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(text, markup=False, classes=f"-{kind}")
        self.kind = kind
        self.text = text
