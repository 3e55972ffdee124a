"""The "show earlier messages" row at the top of a long resumed conversation.

A stored chat can hold hundreds of messages, and every reply is a tree of
Markdown widgets; mounting them all would take seconds to minutes.  The
chat view mounts the newest few and this row brings in older ones a page at
a time (click it, or focus it and press Enter).
"""
from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static


class EarlierMessages(Static, can_focus=True):
    """Says how many older messages are hidden; posts :class:`Requested` when activated."""

    DEFAULT_CSS = """
    EarlierMessages { margin: 1 2 0 2; color: $text-muted; text-style: italic; }
    EarlierMessages:hover, EarlierMessages:focus { color: $text; background: $boost; }
    """
    BINDINGS = [Binding("enter,space", "request", "Show earlier", show=False)]

    class Requested(Message):
        """The user wants the previous page of messages."""

    def __init__(self, hidden: int) -> None:
        super().__init__(markup=False)
        self.hidden = hidden

    def render(self) -> str:
        return f"▲ {self.hidden} earlier message(s): click or press Enter to show more"

    def on_click(self) -> None:
        self.post_message(self.Requested())

    def action_request(self) -> None:
        self.post_message(self.Requested())
