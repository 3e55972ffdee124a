"""The Textual chat TUI."""
from __future__ import annotations

from app.options import ChatOptions


def run_tui(options: ChatOptions) -> int:
    """Open the chat window (placeholder until the TUI issue lands)."""
    from app.model_resolution import resolve_model
    from app.tui.placeholder import run_placeholder

    return run_placeholder(resolve_model(options.model))
