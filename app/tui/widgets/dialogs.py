"""Small modal dialogs: confirm an action, confirm a deletion, type a new title."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from app.tui.keys import KeyMap, keymap_for
from app.tui.keys import default as key

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 60; height: auto; padding: 1 2; background: $panel; border: round $primary; }}
{name} Horizontal {{ height: auto; align-horizontal: right; margin-top: 1; }}
{name} Button {{ margin-left: 1; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no; dismisses with True only on an explicit yes."""

    DEFAULT_CSS = _CSS.format(name="ConfirmScreen")
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel"), Binding("y", "dismiss(True)", "Yes")]

    def __init__(self, question: str, yes: str = "Delete") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            with Horizontal():
                yield Button("Cancel", id="no")
                yield Button(self.yes, id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class DeleteScreen(ModalScreen[bool]):
    """Confirm deleting a conversation, with no key that a typed word can contain.

    A burst of typing that lands here by accident (``y`` of "my", Enter, space) must
    never delete: Cancel has the focus, so Enter and space keep the conversation, and
    no letter is bound.  Deleting takes ctrl+d again (the key that asked), or Tab to
    the Delete button and Enter, or a click on it.  Dismisses True only then.
    """

    # the hint wraps (a Label is one line, and was cut at the dialog's edge); the box is as wide
    # as the screen allows, so that it fits a small terminal too
    DEFAULT_CSS = _CSS.format(name="DeleteScreen") + (
        "DeleteScreen .hint { color: $text-muted; margin-top: 1; width: 1fr; }\n"
        "DeleteScreen > Vertical { max-width: 100%; }\n")
    # id: the [keys] name of the key that asked (app.tui.keys), which also answers
    BINDINGS = [Binding("escape", "dismiss(False)", "Keep"),
                Binding(key("history_delete"), "dismiss(True)", "Delete", id="history_delete")]

    def __init__(self, title: str, keys: KeyMap | None = None) -> None:
        """``keys``: the keys in use, for the hint (the one that asked deletes when pressed again)."""
        super().__init__()
        self.title_shown = title
        keys = keys or keymap_for(None)
        self.delete_key, self.undo_key = keys.hint("history_delete"), keys.hint("history_undo_delete")

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Delete “{self.title_shown}”?", markup=False, classes="question")
            # what keeps it first: a hint cut short must never read as if Enter deleted
            yield Static(f"Enter or Esc keeps it. {self.delete_key} again deletes it (or Tab to Delete, then "
                        f"Enter); {self.undo_key} in the history brings it back until you quit.", classes="hint", markup=False)
            with Horizontal():
                yield Button("Cancel", id="no")
                yield Button("Delete", id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class RenameScreen(ModalScreen[str | None]):
    """A new title; dismisses with None when cancelled or left empty."""

    DEFAULT_CSS = _CSS.format(name="RenameScreen")
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str) -> None:
        super().__init__()
        self.current = title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Rename conversation")
            yield Input(self.current, id="title")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)
