"""Text made safe to draw: control and format characters written as visible escapes.

A file or a reply can hold terminal escape sequences (``ESC [31m``), bell
characters or bidi overrides; drawn raw they would recolour the terminal or
reorder what the user reads.  Rich strips a few control codes but passes
ESC through, so everything user- or model-supplied that is shown verbatim
goes through here first.
"""
from __future__ import annotations

import unicodedata

#: unicode categories written as escapes: controls, format (bidi, zero-width), surrogates, private use, separators
_UNSAFE = frozenset(("Cc", "Cf", "Cs", "Co", "Zl", "Zp"))


def escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def inert_text(text: str, *, keep: str = "\n\t") -> str:
    """``text`` with every unsafe character but those in ``keep`` written as an escape."""
    if text.isprintable() or all(ch in keep or unicodedata.category(ch) not in _UNSAFE for ch in text):
        return text
    return "".join(ch if ch in keep or unicodedata.category(ch) not in _UNSAFE else escape_char(ch) for ch in text)


def safe_text(text: str) -> str:
    """One line of inert text: a newline drawn as ``↵``, a tab as ``→``, every other control escaped."""
    return inert_text(text.replace("\t", "→").replace("\n", "↵"), keep="")
