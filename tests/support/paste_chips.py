"""Pastes as the terminal sends them (bracketed paste), for the paste-chip tests."""
from __future__ import annotations
from textual import events


def block(tag: str) -> str:
    return "".join(f"{tag} line {n}\n" for n in range(60))


async def paste(pilot, text: str) -> None:
    """A bracketed paste, as the terminal driver delivers it, to whatever has the focus."""
    app = pilot.app
    target = app.focused or app.screen
    target.post_message(events.Paste(text))
    await pilot.pause()
