"""The header line: which model, quantization, backend and device, template and context size.

While the model loads it shows the load status instead (file, size, the step
in progress); after a failed load it says so, and the chat screen explains.
A download started from the TUI shows its progress first.
"""
from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static


class ModelBar(Static):
    """One line at the top; ``state`` is ``loading`` | ``ready`` | ``failed``."""

    DEFAULT_CSS = """
    ModelBar {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $panel;
        color: $text;
    }
    ModelBar.-loading { color: $text-warning; }
    ModelBar.-failed { background: $error-muted; }
    """

    text: reactive[str] = reactive("tokchat")
    state: reactive[str] = reactive("loading")
    #: a download running beside the chat (:mod:`app.tui.pull`): its progress line, else ""
    download: reactive[str] = reactive("")

    #: the reply format ``/format`` holds replies to (backends.constraint.describe), else ""
    reply_format: reactive[str] = reactive("")

    def render(self) -> str:
        held = f"format: {self.reply_format}  ·  " if self.reply_format else ""  # before the long model text
        if self.download:  # first: the bar is one line, and the model's own text is long
            return f"tokchat · {self.download}  ·  {held}{self.text}"
        return f"tokchat · {held}{self.text}"

    def watch_state(self, state: str) -> None:
        for name in ("loading", "ready", "failed"):
            self.set_class(name == state, f"-{name}")
