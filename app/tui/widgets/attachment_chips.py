"""The attachments held for the next message, one chip each: name, size, exact token cost, and actions.

A chip comes from ``/attach`` or ``@path`` files and from a large paste
(:mod:`app.tui.paste_chips`).  Each has three buttons: open (read it in a
dialog), edit (put its text back in the prompt box as typed text) and ×
(drop it).  The widget only shows what it is given and posts messages;
the list is :class:`app.tui.attach.Attachments` (``app.attachments.pending``).
"""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.binding import Binding
from textual.widgets import Button, Label, TextArea


class AttachmentChips(Vertical):
    """One row per held attachment; hidden when there is none."""

    DEFAULT_CSS = """
    AttachmentChips { height: auto; max-height: 6; margin: 0 1; display: none; }
    AttachmentChips.-some { display: block; }
    AttachmentChips > Horizontal { height: 1; }
    AttachmentChips Label { width: 1fr; color: $text-muted; }
    AttachmentChips Button { min-width: 6; height: 1; border: none; margin: 0 0 0 1; }
    """

    @dataclass
    class ChipAction(Message):
        """The user pressed a chip's button: ``action`` is open | edit | remove, ``index`` the chip."""

        action: str
        index: int

    def show(self, attachments: list) -> None:
        """Redraw the chips for ``attachments`` (app.conversation.attachments.Attachment)."""
        self.remove_children()
        self.set_class(bool(attachments), "-some")
        rows = []
        for index, item in enumerate(attachments):
            rows.append(Horizontal(
                Label(f"📎 {item.summary()}", markup=False, classes="chip"),
                # compact: a default Button is drawn in a tall border, which in a row of height 1 is
                # all that shows (its label is never seen)
                Button("open", id=f"chip-open-{index}", compact=True),
                Button("edit", id=f"chip-edit-{index}", compact=True),
                Button("×", id=f"chip-remove-{index}", compact=True)))
        if rows:
            self.mount_all(rows)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        _, action, index = (event.button.id or "").split("-")
        self.post_message(self.ChipAction(action, int(index)))


class AttachmentView(ModalScreen[None]):
    """An attachment's text, read-only (a chip's open); Esc closes."""

    DEFAULT_CSS = """
    AttachmentView { align: center middle; }
    AttachmentView > Vertical { width: 90%; height: 80%; background: $panel; border: round $primary; }
    AttachmentView TextArea { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "dismiss", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, markup=False)
            yield TextArea(self.text, read_only=True, soft_wrap=True, id="attachment-text")
