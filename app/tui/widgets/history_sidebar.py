"""The history sidebar: stored conversations, newest first, with search.

Typing in the sidebar always goes to its search box (Ctrl+B focuses it, and a
printable key pressed on the list is moved there): a typed word must never act
on a conversation.  So the sidebar's own keys are control keys, all named on its
hint line: Up/Down move the highlight, Enter opens, ctrl+r renames, ctrl+d
deletes (after a confirmation that no typed word can give), ctrl+z undoes the
last deletion, ctrl+f forks (a new conversation holding its shown branch, linked
to it; a fork's row says so), ctrl+n starts a new chat (the defaults: each is
configurable under ``[keys]``, and the hint names the keys in use).  Those keys
act only while the cursor is in the list: when it is elsewhere, the hint says
so instead, and opening a conversation closes the list.  The sidebar only posts
messages; the history (:class:`app.tui.history.ChatHistory`) talks to the store.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Collection, Sequence

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Label, ListItem, ListView, Static

from app.tui.keys import KeyMap, history_away_hint, history_hint, keymap_for
from app.tui.keys import default as key


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else ""



def _fork_note(info) -> str:
    """`` · fork of #N`` for a fork, or that its source is gone (#N would name nothing, or a later chat)."""
    if not getattr(info, "forked_from", None):
        return ""
    return " · fork of a deleted conversation" if getattr(info, "source_deleted", False) else \
        f" · fork of #{info.forked_from}"


#: on the row of a conversation whose last reply a window is still writing
WRITING_NOTE = " · ✎ a reply is being written"


class ConversationItem(ListItem):
    """One row: title, then date, model and message count (and whether a reply is being written in it)."""

    def __init__(self, info, writing: bool = False) -> None:
        super().__init__(Label(info.title or "(untitled)", markup=False, classes="title"),
                         Label(f"{_when(info.updated_at)} · {info.model_name or '-'} · "
                               f"{info.message_count} msgs"
                               + _fork_note(info) + (WRITING_NOTE if writing else ""),
                               markup=False, classes="meta"))
        self.info = info


class HistorySidebar(Vertical):
    """Search box over a list of :class:`app.history.store.ConversationInfo` rows."""

    DEFAULT_CSS = """
    /* at most half the window: at 60 columns, 46 left the chat 13 */
    HistorySidebar { width: 46; max-width: 50%; dock: left; display: none; border-right: vkey $panel; }
    HistorySidebar.-open { display: block; }
    HistorySidebar > Input { margin: 0; }
    HistorySidebar > ListView { height: 1fr; }
    HistorySidebar .meta { color: $text-muted; }
    /* a row wraps instead of being cut: "(fork)" and "fork of #N" end the lines */
    HistorySidebar ConversationItem > Label { width: 1fr; }
    HistorySidebar > .hint { color: $text-muted; height: auto; padding: 0 1; }
    /* its keys act only with the cursor in it: elsewhere, the hint says how to come back */
    HistorySidebar > .hint-here { display: none; }
    HistorySidebar.-here > .hint-here { display: block; }
    HistorySidebar.-here > .hint-away { display: none; }
    """

    # priority: they act on the highlighted row from the search box too (ctrl+d there would
    # otherwise delete a character); Up/Down reach here from the search box, the list has its own
    # ids: the [keys] names (app.tui.keys)
    BINDINGS = [
        Binding(key("history_rename"), "rename", "Rename", priority=True, id="history_rename"),
        Binding(key("history_delete"), "delete", "Delete", priority=True, id="history_delete"),
        Binding(key("history_undo_delete"), "undo_delete", "Undo delete", priority=True, id="history_undo_delete"),
        Binding(key("history_fork"), "fork", "Fork", priority=True, id="history_fork"),
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
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

    class UndoDeleteRequested(Message):
        """ctrl+z: bring back the conversation deleted last."""

    @dataclass
    class SearchChanged(Message):
        text: str

    def compose(self) -> ComposeResult:
        # no select-all on focus: a key typed on the list and moved here adds to the search, never replaces it
        yield Input(placeholder="search history", id="history-search", select_on_focus=False)
        yield ListView(id="history-list")
        keys = keymap_for(None)
        yield Static(history_hint(keys), classes="hint hint-here", markup=False)
        yield Static(history_away_hint(keys), classes="hint hint-away", markup=False)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self.add_class("-here")

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        self.call_later(self._cursor_moved)  # the focus may move to another part of the list: settle first

    def _cursor_moved(self) -> None:
        """The hint that names the list's keys is drawn only while they act: with the cursor in the list."""
        focused = self.app.focused
        self.set_class(focused is not None and self in focused.ancestors_with_self, "-here")

    def show_keys(self, keys: KeyMap) -> None:
        """The hint lines name the keys in use ([keys] in the config)."""
        self.query_one(".hint-here", Static).update(history_hint(keys))
        self.query_one(".hint-away", Static).update(history_away_hint(keys))

    def show(self, conversations: Sequence, writing: Collection[int] = ()) -> None:
        """Replace the rows (keeps the highlighted conversation when it is still there); ``writing``: the ids
        of conversations with a reply being written now."""
        view = self.query_one(ListView)
        current = self.highlighted_id()
        view.clear()
        view.extend(ConversationItem(info, info.id in writing) for info in conversations)
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

    def focus_search(self) -> None:
        """Where Ctrl+B puts the cursor: typing searches."""
        self.query_one("#history-search", Input).focus()

    @on(Input.Submitted, "#history-search")
    def _open_highlighted(self, event: Input.Submitted) -> None:
        """Enter in the search box opens the highlighted conversation (Up/Down chose it)."""
        event.stop()
        item = self._highlighted()
        if item is not None:
            self.post_message(self.ConversationSelected(item.info.id))

    def on_key(self, event: events.Key) -> None:
        """A printable key (or Backspace) pressed on the list goes to the search box, never to an action."""
        search = self.query_one("#history-search", Input)
        if self.app.focused is search or not (event.is_printable or event.key == "backspace"):
            return
        event.stop()
        event.prevent_default()
        search.focus()
        if event.key == "backspace":
            search.action_delete_left()
        else:
            search.insert_text_at_cursor(event.character or "")

    @on(ListView.Selected)
    def _selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, ConversationItem):
            self.post_message(self.ConversationSelected(event.item.info.id))

    def action_move(self, step: int) -> None:
        view = self.query_one(ListView)
        view.action_cursor_down() if step > 0 else view.action_cursor_up()

    def action_rename(self) -> None:
        item = self._highlighted()
        if item is not None:
            self.post_message(self.RenameRequested(item.info.id, item.info.title))

    def action_delete(self) -> None:
        item = self._highlighted()
        if item is not None:
            self.post_message(self.DeleteRequested(item.info.id, item.info.title))

    def action_undo_delete(self) -> None:
        self.post_message(self.UndoDeleteRequested())

    def action_fork(self) -> None:
        item = self._highlighted()
        if item is not None:
            self.post_message(self.ForkRequested(item.info.id, item.info.title))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The sidebar's keys only while it is open (a closed sidebar keeps no focus, but be sure)."""
        return self.has_class("-open")
