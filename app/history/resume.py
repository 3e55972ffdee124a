"""Headless ``--resume ID``: put a stored conversation back into a session, to continue or add to it.

The stored messages (and a reply's ids as generated, kept since history
schema 5) go into the :class:`app.conversation.session.ChatSession`; the recorder then
writes further turns after the conversation's tip.  With history off
(``--no-history``) the database is only read.

Not handled here: the TUI, which resumes from the history sidebar
(:mod:`app.tui.history`).
"""
from __future__ import annotations

from typing import Any

from app.history.types import StoreError


class ResumeError(StoreError):
    """The conversation to resume cannot be read; the message is one line for the user."""


def resume_into(session: Any, conv_id: int, recorder: Any = None) -> Any:
    """Load conversation ``conv_id`` into ``session`` (system prompt, shown branch); returns it.

    ``recorder`` (a :class:`app.history.recorder.HistoryRecorder`) is pointed at the conversation so the
    next message follows its last one."""
    from app.history.store import ChatStore

    store = recorder.store if recorder is not None and recorder.enabled else None
    try:
        own = store is None
        if own:
            store = ChatStore(readonly=True)
        try:
            conversation = store.load(conv_id)
        finally:
            if own:
                store.close()
    except StoreError as exc:
        raise ResumeError(f"--resume {conv_id}: {exc}") from None
    if conversation.info.system_prompt:
        session.set_system(conversation.info.system_prompt)
    session.load_messages(conversation.chat_messages())
    if recorder is not None:
        recorder.resume(conv_id, conversation.messages[-1].id if conversation.messages else None)
    return conversation
