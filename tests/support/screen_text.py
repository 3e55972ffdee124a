"""What the terminal shows, as text: the rows the compositor draws, not a widget's attributes.

A widget can hold text that is never drawn (``display: none``, cut off by its width,
hidden behind a dialog); a check on what the user sees reads the drawn rows.
"""
from __future__ import annotations

from typing import Any


def drawn(app: Any, widget: Any = None, *, inside: bool = False) -> str:
    """The active screen's drawn rows (or only the part inside ``widget``'s region; ``inside``: within
    its border and padding), one line per row."""
    strips = app.screen._compositor.render_strips()
    if widget is None:
        return "\n".join(strip.text for strip in strips)
    region = widget.content_region if inside else widget.region
    return "\n".join(strip.crop(region.x, region.right).text for strip in strips[region.y:region.bottom])


def words(text: str) -> str:
    """``text`` with every run of blanks and line ends made one space (a wrapped line reads as one)."""
    return " ".join(text.split())


def toasts(app: Any) -> list[str]:
    """The notices drawn now, each as one line of words (the app must run with ``notifications=True``:
    Pilot draws none by default)."""
    return [words(drawn(app, toast, inside=True)) for toast in app.screen.query("Toast")]
