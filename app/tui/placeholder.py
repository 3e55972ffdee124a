"""A placeholder screen until the chat TUI lands: proves the model file is found."""
from __future__ import annotations

from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import Footer, Header, Static


class PlaceholderApp(App):
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(self, model: Path) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        size_mb = self.model.stat().st_size / 1e6
        yield Header()
        yield Static(f"tokchat\n\nmodel: {self.model}\nsize: {size_mb:.1f} MB\n\nThe chat view is on its way. Press q to quit.")
        yield Footer()


def run_placeholder(model: Path) -> int:
    PlaceholderApp(model).run()
    return 0
