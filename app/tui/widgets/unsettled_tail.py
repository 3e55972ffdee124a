"""The unsettled end of an opened conversation: shown, marked, never built on.

A stored conversation can end in a turn that is not settled (see
:func:`app.tui.history.unsettled_tail`): a reply another window is still
writing, or a message whose reply never came (tokchat was killed while it read
the prompt).  The window shows those messages as they are stored, inside this
one container, so that they stay apart from the conversation it goes on with:
the keys acting on "the last reply" refuse them, and the next message sent
removes them from the screen (it becomes their sibling in the history).
"""
from __future__ import annotations

from typing import Any, Sequence

from textual.app import ComposeResult
from textual.containers import Vertical

from app.tui.widgets.notice import Notice
from app.tui.widgets.user_message import UserMessage


class UnsettledTail(Vertical):
    """``messages``: the tail as ChatMessages, first to last; ``note``: a line under them ("" for none)."""

    DEFAULT_CSS = """
    UnsettledTail { height: auto; }
    """

    def __init__(self, messages: Sequence[Any], note: str = "") -> None:
        super().__init__()
        self.messages = list(messages)
        self.note = note

    def compose(self) -> ComposeResult:
        from app.tui.widgets.assistant_message import AssistantMessage  # Markdown: not for the first frame

        for message in self.messages:
            if message.role == "assistant":
                yield AssistantMessage(content=message.content, reasoning=message.reasoning, stats=message.stats,
                                       stored=True, finish_reason=message.finish_reason)
            else:
                yield UserMessage(message.content)
        if self.note:
            yield Notice(self.note, "warning")
