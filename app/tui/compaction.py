"""Compaction in the TUI: ``/compact drop|summarize|refuse|undo|edit TEXT`` and ``/pin N``.

:class:`Compaction` is held by the chat window (``app.compaction``).  The work is the conversation's
(:mod:`app.conversation.compaction`); here the screen and the history follow it: a summary made during a
send is shown marked (:class:`~app.tui.widgets.summary_message.SummaryMessage`) and stored after the
message being sent; an edit or an undo rewrites its stored row; the meter (its ``next send ...`` part)
says what the next send will do under the policy in use.

Not kept: pins are this window's, not stored with the conversation (a reopened chat has none).
"""
from __future__ import annotations

from typing import Any

from app.tui.history import ChatHistory
from app.tui.host import ChatHost
from app.tui.slash import SlashError

USAGE = "/compact drop | summarize | refuse | undo | edit TEXT"


class Compaction:
    """The policy, pins and the summary on screen; the history follows through ``history``."""

    def __init__(self, host: ChatHost, history: ChatHistory) -> None:
        self.host = host
        self.history = history

    async def cmd_compact(self, arg: str) -> None:
        """``/compact POLICY`` sets this chat's policy; ``undo`` and ``edit TEXT`` change the summary in the prompt;
        alone: says the policy and the summary in use."""
        from app.conversation.compaction import POLICIES, edit_summary, undo_summary
        from app.conversation.summary import active_summary

        host = self.host
        session = host.need_session("compact")
        word, _, rest = arg.strip().partition(" ")
        word = word.lower()
        if not word:
            summary = active_summary(session.messages)
            host.notify(f"Compaction: {session.compact_policy}"
                        + (f"; a summary of {summary.stats.compacted_turns} turns is in the prompt"
                           if summary is not None and summary.stats is not None else "") + f" ({USAGE})")
            return
        if word in POLICIES:
            session.compact_policy = word
            host.update_meter()
            host.notify(f"Compaction: {word} (for this chat)")
            return
        if word in ("undo", "edit"):
            if word == "edit" and not rest.strip():
                raise SlashError("/compact edit needs the summary's new text: /compact edit TEXT")
            summary = undo_summary(session) if word == "undo" else edit_summary(session, rest.strip())
            if summary is None:
                raise SlashError(f"/compact {word}: there is no summary in the prompt")
            self.history.record_summary_changed(summary)
            await self.show_changed(summary)
            host.update_meter()
            host.notify("Summary taken out of the prompt (its turns stay dropped)" if word == "undo"
                        else "Summary edited: the next send reads your text")
            return
        raise SlashError(f"/compact takes {USAGE}, not {arg!r}")

    async def cmd_pin(self, arg: str) -> None:
        """``/pin N``: keep message N's turn (the user message and its reply) in the prompt whatever the policy;
        ``/pin`` alone lists the pins, ``/pin -N`` unpins."""
        host = self.host
        session = host.need_session("pin")
        messages = session.messages
        if not arg.strip():
            pinned = [str(i + 1) for i, m in enumerate(messages) if m.pinned and m.role == "user"]
            host.notify(f"Pinned: message {', '.join(pinned)}" if pinned else "Nothing pinned: /pin N keeps message "
                        "N's turn in the prompt")
            return
        text = arg.strip()
        unpin = text.startswith("-")
        try:
            number = int(text.lstrip("-"))
        except ValueError:
            raise SlashError(f"/pin takes a message number from 1 to {len(messages)}, not {arg!r}") from None
        if not 1 <= number <= len(messages):
            raise SlashError(f"/pin takes a message number from 1 to {len(messages)}, not {number}")
        first, last = turn_of(messages, number - 1)
        if first is None:
            raise SlashError(f"message {number} is a summary: it is in the prompt already (/compact undo removes it)")
        for message in messages[first:last]:
            message.pinned = not unpin
        host.update_meter()
        span = f"{first + 1}" if last - first == 1 else f"{first + 1}-{last}"
        host.notify(f"{'Unpinned' if unpin else 'Pinned'} messages {span}: "
                    + ("they may leave the prompt again" if unpin else "they stay in the prompt whatever the policy"))

    async def show_summary(self, summary: Any, before: Any) -> None:
        """A summary made during this send: stored, and shown marked above ``before`` (the reply widget)."""
        from app.tui.widgets.summary_message import SummaryMessage

        self.history.record_summary(summary)
        view = self.host.chat_view
        widget = SummaryMessage(summary)
        await view.mount(widget, before=before)

    async def show_changed(self, summary: Any) -> None:
        from app.tui.widgets.summary_message import SummaryMessage

        for widget in self.host.chat_view.query(SummaryMessage):
            if widget.summary is summary:
                widget.show(summary)


def turn_of(messages: list, index: int) -> tuple[int | None, int]:
    """``messages[first:last]``: the turn of ``messages[index]`` (its user message and the replies after it);
    (None, 0) for a summary."""
    if messages[index].role == "summary":
        return None, 0
    first = index
    while first > 0 and messages[first].role != "user":
        first -= 1
    last = index + 1
    while last < len(messages) and messages[last].role not in ("user", "summary"):
        last += 1
    return first, last
