"""Conversation history, as a mixin of ChatApp: recording turns and the sidebar.

Placeholder until app/store.py lands: nothing is recorded yet.
"""
from __future__ import annotations

from typing import Any

from textual.app import ComposeResult


class HistoryMixin:
    def init_history(self, store: Any) -> None:
        self.store = store

    def compose_history(self) -> ComposeResult:
        yield from ()

    def on_model_ready(self) -> None:
        pass

    def new_conversation(self) -> None:
        pass

    def record_reply(self) -> None:
        pass

    def action_toggle_history(self) -> None:
        self.notify("History is not available yet", severity="warning")
