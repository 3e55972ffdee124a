"""Headless chat: placeholder until the conversation issue lands."""
from __future__ import annotations

from app.cli import CLIError
from app.options import ChatOptions


def run_headless(options: ChatOptions) -> int:
    raise CLIError("headless mode is not built yet")
