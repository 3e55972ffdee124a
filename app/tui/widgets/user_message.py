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
        from app.conversation.attachments import summarize_blocks
        from app.tui.inert import inert_text

        # an attached file is one line here (its text is in the message sent, the history and the
        # inspector); control characters are drawn inert
        super().__init__(inert_text(summarize_blocks(text)), markup=False)
        self.text = text
