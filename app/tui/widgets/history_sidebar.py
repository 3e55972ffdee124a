"""The history sidebar: stored conversations, newest first, with search.

Keys inside the list: Enter resumes, ``r`` renames, ``d`` deletes (after a
confirmation), ``n`` starts a new chat, ``f`` forks it (a new conversation
holding its shown branch, linked to it; a fork's row says so).  The sidebar only posts messages;
the app talks to the store.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Label, ListItem, ListView, Static


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else ""


class ConversationItem(ListItem):
    """One row: title, then date, model and message count."""

    def __init__(self, info) -> None:
        super().__init__(Label(info.title or "(untitled)", markup=False, classes="title"),
                         Label(f"{_when(info.updated_at)} · {info.model_name or '-'} · "
                               f"{info.message_count} msgs"
                               + (f" · fork of #{info.forked_from}" if getattr(info, "forked_from", None) else ""),
                               markup=False, classes="meta"))
        self.info = info


class HistorySidebar(Vertical):
    """Search box over a list of :class:`app.history.store.ConversationInfo` rows."""

    DEFAULT_CSS = """
    HistorySidebar { width: 38; dock: left; display: none; border-right: vkey $panel; }
    HistorySidebar.-open { display: block; }
    HistorySidebar > Input { margin: 0; }
    HistorySidebar > ListView { height: 1fr; }
    HistorySidebar .meta { color: $text-muted; }
    HistorySidebar > .hint { color: $text-muted; height: auto; padding: 0 1; }
    """

    BINDINGS = [
        Binding("r", "rename", "Rename"),
        Binding("d,delete", "delete", "Delete"),
        Binding("n", "new", "New"),
        Binding("f", "fork", "Fork"),
    ]

    @dataclass
    class ConversationSelected(Message):
        conv_id: int

    @dataclass
    class RenameRequested(Message):
        conv_id: int
        title: str

    @dataclass
    class DeleteRequested(Message):
        conv_id: int
        title: str

    @dataclass
    class ForkRequested(Message):
        conv_id: int
        title: str

    class NewRequested(Message):
        """The user asked for a new conversation from the sidebar."""

    @dataclass
    class SearchChanged(Message):
        text: str

    def compose(self) -> ComposeResult:
        yield Input(placeholder="search history", id="history-search")
        yield ListView(id="history-list")
        yield Static("Enter open · r rename · d delete · n new", classes="hint")

    def show(self, conversations: Sequence) -> None:
        """Replace the rows (keeps the highlighted conversation when it is still there)."""
        view = self.query_one(ListView)
        current = self.highlighted_id()
        view.clear()
        view.extend(ConversationItem(info) for info in conversations)
        index = next((i for i, info in enumerate(conversations) if info.id == current), 0)
        if conversations:
            view.index = index

    def highlighted_id(self) -> int | None:
        item = self.query_one(ListView).highlighted_child
        return item.info.id if isinstance(item, ConversationItem) else None

    def _highlighted(self) -> ConversationItem | None:
        item = self.query_one(ListView).highlighted_child
        return item if isinstance(item, ConversationItem) else None

    @on(Input.Changed, "#history-search")
    def _search(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.SearchChanged(event.value))

    @on(Input.Submitted, "#history-search")
    def _to_list(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(ListView).focus()

    @on(ListView.Selected)
    def _selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, ConversationItem):
            self.post_message(self.ConversationSelected(event.item.info.id))

    def action_rename(self) -> None:
        item = self._highlighted()
        if item is not None:
            self.post_message(self.RenameRequested(item.info.id, item.info.title))

    def action_delete(self) -> None:
        item = self._highlighted()
        if item is not None:
            self.post_message(self.DeleteRequested(item.info.id, item.info.title))

    def action_new(self) -> None:
        self.post_message(self.NewRequested())

    def action_fork(self) -> None:
        item = self._highlighted()
        if item is not None:
            self.post_message(self.ForkRequested(item.info.id, item.info.title))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # typing in the search box must not rename/delete
        if action in ("rename", "delete", "new", "fork") and isinstance(self.app.focused, Input):
            return False
        return True
