"""The prompt box: a multi-line text area that grows with its text.

Enter sends; Shift+Enter and Ctrl+J insert a newline (most terminals send
Shift+Enter as plain Enter, so Ctrl+J is the one that always works).  Up in
an empty box walks back through the prompts sent so far, Down walks forward.
Tab right after an ``@path`` word completes the path (attachments).
"""
from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea


class PromptInput(TextArea):
    """Where the user types; posts :class:`PromptInput.Submitted` on Enter."""

    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        min-height: 3;
        max-height: 12;
    }
    """

    @dataclass
    class Submitted(Message):
        """The user pressed Enter on a non-empty prompt."""

        input: "PromptInput"
        text: str

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        #: prompts sent so far, oldest first
        self.sent: list[str] = []
        # index into ``sent`` while recalling; None when not recalling
        self._recall: int | None = None

    def remember(self, text: str) -> None:
        """Add a sent prompt to the recall list (no consecutive duplicates)."""
        if not self.sent or self.sent[-1] != text:
            self.sent.append(text)
        self._recall = None

    async def _on_key(self, event: events.Key) -> None:
        key = event.key
        if key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text
            if text.strip():
                self.post_message(self.Submitted(self, text))
            return
        if key == "tab" and self._complete_at():
            event.stop()
            event.prevent_default()
            return
        if key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if key == "up" and self._can_recall():
            event.stop()
            event.prevent_default()
            self._recall_step(-1)
            return
        if key == "down" and self._recall is not None:
            event.stop()
            event.prevent_default()
            self._recall_step(+1)
            return
        if event.is_printable or key in ("backspace", "delete"):
            self._recall = None
        await super()._on_key(event)

    def _complete_at(self) -> bool:
        """Tab after ``@partial/pa``: complete the path (app.attachments.complete_path); False if none."""
        from app.attachments import complete_path

        row, col = self.cursor_location
        line = self.document.get_line(row)[:col]
        word = line.split()[-1] if line.strip() and not line.endswith((" ", "\t")) else ""
        if not word.startswith("@"):
            return False
        done = complete_path(word[1:])
        if done is None:
            return False
        self.insert(done[len(word) - 1:])
        return True

    def _can_recall(self) -> bool:
        if not self.sent:
            return False
        if self._recall is not None:
            return self.cursor_location[0] == 0
        return not self.text

    def _recall_step(self, step: int) -> None:
        index = len(self.sent) if self._recall is None else self._recall
        index = max(0, index + step)
        if index >= len(self.sent):
            self._recall = None
            self.load_text("")
            return
        self._recall = index
        self.load_text(self.sent[index])
        self.move_cursor(self.document.end)
