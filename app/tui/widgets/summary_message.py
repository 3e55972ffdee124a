"""A summary of turns compacted out of the prompt (``--compact summarize``), marked as such in the chat.

The title says what it stands for and what it cost; the text is folded until the user opens it
(click, or Enter on the title).  ``/compact edit TEXT`` and ``/compact undo`` change or remove it
(:mod:`app.tui.compaction`); the turns it summarizes stay on screen above it, as they stay in the history.
"""
from __future__ import annotations

from typing import Any

from textual.widgets import Collapsible, Static


def summary_title(summary: Any) -> str:
    """``Summary of the first 3 turns · 40 tokens (read 310)`` (the turns are no longer in the prompt)."""
    stats = summary.stats
    turns = stats.compacted_turns if stats is not None else 0
    cost = f" · {stats.completion_tokens} tokens (read {stats.prompt_tokens})" if stats is not None else ""
    where = ("taken out of the prompt (/compact undo)" if summary.finish_reason == "undone"
             else "in the prompt in their place")
    return f"Summary of the first {turns} turn{'s' if turns != 1 else ''}, {where}{cost}"


class SummaryMessage(Collapsible):
    """A summary message: folded, titled with what it stands for; its text inside."""

    DEFAULT_CSS = """
    SummaryMessage {
        margin: 1 1 0 1;
        border-left: thick $accent;
        background: $accent-muted 20%;
    }
    SummaryMessage .summary-text { padding: 0 1; }
    """

    def __init__(self, summary: Any) -> None:
        self.summary = summary
        self.body = Static(summary.content, markup=False, classes="summary-text")
        super().__init__(self.body, title=summary_title(summary), collapsed=True)

    def show(self, summary: Any) -> None:
        """The summary's text changed (``/compact edit``)."""
        self.summary = summary
        self.body.update(summary.content)
        self.title = summary_title(summary)
