"""A summary message: the turns compacted out of the prompt, in one message of role ``summary``.

Plain functions on the message list (no tokenizer, backend or template), so that the conversation can
put the active summary at the prompt's start without depending on how summaries are made
(:mod:`app.conversation.compaction`).
"""
from __future__ import annotations

from typing import Sequence

from app.conversation.messages import ChatMessage

#: a summary message's role (never given to a template as such: see Conversation._system_messages)
SUMMARY_ROLE = "summary"
#: how the summary is introduced in the system message
HEADER = "Summary of the earlier conversation (its turns are no longer in the context):"

#: a summary's finish reason once the user took it back (``/compact undo``): kept on the path and in the
#: history, out of the prompt
UNDONE = "undone"


def active_summary(messages: Sequence[ChatMessage]) -> ChatMessage | None:
    """The summary in the prompt: the path's last summary message not taken back (each folds in the ones
    before it)."""
    return next((m for m in reversed(messages) if m.role == SUMMARY_ROLE and m.finish_reason != UNDONE), None)


def summary_block(summary: ChatMessage) -> str:
    """The summary as the system message carries it."""
    return f"{HEADER}\n{summary.content}"


def summary_first(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``messages`` with each summary stored right after the user message whose send made it put back
    before that message (where it stood when it was made)."""
    out = list(messages)
    for i in range(1, len(out)):
        if out[i].role == SUMMARY_ROLE and out[i - 1].role == "user":
            out[i - 1], out[i] = out[i], out[i - 1]
    return out


def summary_start(messages: Sequence[ChatMessage]) -> int:
    """Where the prompt starts after the active summary: the first user turn it does not stand for (0:
    no summary)."""
    summary = active_summary(messages)
    if summary is None or summary.stats is None:
        return 0
    covered = summary.stats.compacted_turns
    turn = 0
    for index, message in enumerate(messages):
        if message.role == "user":
            if turn == covered:
                return index
            turn += 1
    return len(messages)
