"""The "‹ 2/3 ›" line above a message that has siblings (regenerated replies, edited prompts)."""
from __future__ import annotations

from textual.widgets import Static


class BranchLabel(Static):
    """Which sibling is shown, and the keys that move between them."""

    DEFAULT_CSS = """
    BranchLabel { color: $text-muted; margin: 1 0 0 2; height: 1; }
    """

    def __init__(self, at: int, shown: int, count: int) -> None:
        super().__init__(f"‹ {shown}/{count} ›  Alt+← / Alt+→ or /branch N", markup=False)
        self.at = at
        self.shown = shown
        self.count = count
