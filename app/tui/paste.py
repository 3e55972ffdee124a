"""A bracketed paste read as one piece of text, whatever it holds.

Textual 8.2's :class:`~textual._xterm_parser.XTermParser` reads a bracketed
paste character by character and, on an ESC inside it, goes back to parsing
escape sequences: ``abc \\e[31mred`` becomes the keys ``^ [ 3 1 m r e d``
delivered *before* the paste ``abc `` (the text is reordered), and a BEL
(``\\a``, as in an OSC title sequence) arrives as the key Ctrl+G.  Pasted text
must never act as keys, so :class:`PasteSafeParser` cuts every paste out of
the input before the base parser sees it and hands it on whole as one
:class:`textual.events.Paste`.  (To be reported upstream: the paste branch of
``XTermParser.parse`` should not reissue sequences as keys.)

A marker split across two reads is held back until the rest arrives; a lone
ESC held that way is the Esc key once :data:`textual.constants.ESCAPE_DELAY`
passes with nothing after it (:meth:`PasteSafeParser.tick`).
"""
from __future__ import annotations

import time
from typing import Iterable

from textual import constants, events
from textual._xterm_parser import XTermParser
from textual.message import Message

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"


class PasteSafeParser(XTermParser):
    """XTermParser with bracketed pastes taken out whole (see the module docstring)."""

    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        #: the paste being read (None outside a paste)
        self._paste: list[str] | None = None
        #: input held back because it may be the start of a marker split across reads, and since when
        self._held = ""
        self._held_at = 0.0

    def feed(self, data: str) -> Iterable[Message]:
        if not data and not self._held:
            return list(super().feed(""))  # "" is the end of input for the base parser
        out: list[Message] = []
        data, self._held = self._held + data, ""
        while data:
            if self._paste is not None:
                end = data.find(PASTE_END)
                if end < 0:
                    keep = _partial_marker(data, PASTE_END)
                    self._paste.append(data[: len(data) - keep])
                    self._held = data[len(data) - keep:]
                    break
                self._paste.append(data[:end])
                out.append(events.Paste("".join(self._paste).replace("\x00", "")))
                self._paste = None
                data = data[end + len(PASTE_END):]
                continue
            start = data.find(PASTE_START)
            if start < 0:
                keep = _partial_marker(data, PASTE_START)
                if keep and not (keep == 1 and len(data) > 1 and data[-2] == "\x1b"):  # ESC ESC: alt+esc
                    self._held, data = data[len(data) - keep:], data[: len(data) - keep]
                    self._held_at = time.monotonic()
                if data:
                    out.extend(super().feed(data))
                break
            if start:
                out.extend(super().feed(data[:start]))
            self._paste = []
            data = data[start + len(PASTE_START):]
        return out

    def tick(self) -> Iterable[Message]:
        if self._held == "\x1b" and self._paste is None and time.monotonic() - self._held_at >= constants.ESCAPE_DELAY:
            self._held = ""
            return [events.Key("escape", "\x1b")]  # nothing followed: the Esc key
        return list(super().tick())


def _partial_marker(data: str, marker: str) -> int:
    """How many characters at the end of ``data`` are a proper prefix of ``marker``."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:size]):
            return size
    return 0


def use_paste_safe_parser() -> None:
    """Make Textual's terminal drivers read input with :class:`PasteSafeParser` (before ``App.run``)."""
    from textual.drivers import linux_driver

    linux_driver.XTermParser = PasteSafeParser  # type: ignore[misc]
    try:
        from textual.drivers import linux_inline_driver
    except ImportError:  # not every Textual has the inline driver
        return
    linux_inline_driver.XTermParser = PasteSafeParser  # type: ignore[misc]
