"""Headless ``--resume ID``: put a stored conversation back into a session, to continue or add to it.

The stored messages (and a reply's ids as generated, kept since history
schema 5) go into the :class:`app.conversation.session.ChatSession`; the recorder then
writes further turns after the last message loaded: the leaf this run extends, whatever
another run writes meanwhile.  With history off (``--no-history``) the database is only read.

Another tokchat may be in the middle of a turn on the same conversation: its user message is
committed before its reply starts, and the reply is written as it streams.  That turn is not
this run's to build on (its model never sees this run's message, and the two would interleave
into one line), so a resume leaves it out: it loads the path up to the last settled message
and this run's turn becomes its sibling (see :func:`settled_length`).

Not handled here: the TUI, which resumes from the history sidebar
(:mod:`app.tui.history`).
"""
from __future__ import annotations

from typing import Any, Sequence

from app.history.types import StoredMessage, StoreError


class ResumeError(StoreError):
    """The conversation to resume cannot be read; the message is one line for the user."""


def resume_into(session: Any, conv_id: int, recorder: Any = None) -> Any:
    """Load conversation ``conv_id`` into ``session`` (system prompt, shown branch); returns it.

    ``recorder`` (a :class:`app.history.recorder.HistoryRecorder`) is pointed at the conversation so the
    next message follows its last one."""
    from app.history.store import ChatStore

    shared = recorder.store if recorder is not None and recorder.enabled else None
    try:
        own = shared is None
        store = ChatStore(readonly=True) if shared is None else shared
        try:
            conversation = store.load(conv_id)
        finally:
            if own:
                store.close()
    except StoreError as exc:
        raise ResumeError(f"--resume {conv_id}: {exc}") from None
    if conversation.info.system_prompt:
        session.set_system(conversation.info.system_prompt)
    loaded = conversation.messages[: settled_length(conversation.messages)]
    session.load_messages([m.to_chat_message() for m in loaded])
    if recorder is not None:
        recorder.resume(conv_id, loaded[-1].id if loaded else None)
    return conversation


def settled_length(messages: Sequence[StoredMessage]) -> int:
    """How many of the shown branch's ``messages`` a resume builds on: all but an unsettled end.

    Unsettled: a reply still being written (``finish_reason`` None: its writer is alive, since a
    dead writer's reply is marked interrupted when the database is opened), and before it the
    user messages that no reply follows (a turn whose reply has not started yet, or never came).
    A user message then always follows a reply, and a new message never joins another run's turn."""
    end = len(messages)
    if end and messages[end - 1].role == "assistant" and messages[end - 1].finish_reason is None:
        end -= 1
    while end and messages[end - 1].role == "user":
        end -= 1
    return end
