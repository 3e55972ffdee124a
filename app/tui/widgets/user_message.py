"""One user turn in the chat view, shown verbatim (no Markdown, no markup)."""
from __future__ import annotations

from textual.widgets import Static


class UserMessage(Static):
    """The user's prompt as sent."""

    DEFAULT_CSS = """
    UserMessage {
        margin: 1 1 0 8;
        padding: 0 1;
        background: $boost;
        border-left: thick $primary;
    }
    """

    def __init__(self, text: str) -> None:
        from app.tui.inert import inert_text

        super().__init__(inert_text(text), markup=False)  # an attached file's ESC sequences stay inert
        self.text = text
