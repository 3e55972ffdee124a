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


#: joiners that are part of what is drawn when they sit between two visible characters (emoji ZWJ
#: sequences such as 👨‍👩‍👧, ZWNJ in Persian and Indic words)
_JOINERS = frozenset("\u200c\u200d")
#: tag characters: part of a flag sequence (🏴 + tags + cancel tag) when they follow the flag or a tag
_TAGS = range(0xE0020, 0xE0080)


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE


def _in_sequence(text: str, i: int) -> bool:
    """Is the format character ``text[i]`` part of an emoji or script sequence (drawn, not escaped)?"""
    ch = text[i]
    before = text[i - 1] if i else ""
    if ch in _JOINERS:
        after = text[i + 1] if i + 1 < len(text) else ""
        return bool(before and after) and not (before.isspace() or after.isspace()
                                               or _unsafe(before) or _unsafe(after))
    if ord(ch) in _TAGS:
        j = i
        while j and ord(text[j - 1]) in _TAGS:
            j -= 1
        return j > 0 and text[j - 1] == "\U0001f3f4"  # 🏴, the only base of tag sequences
    return False


def inert_text(text: str, *, keep: str = "\n\t") -> str:
    """``text`` with every unsafe character but those in ``keep`` (and those that join an emoji
    or script sequence) written as an escape."""
    if text.isprintable() or all(ch in keep or not _unsafe(ch) for ch in text):
        return text
    return "".join(ch if ch in keep or not _unsafe(ch) or (unicodedata.category(ch) == "Cf"
                                                           and _in_sequence(text, i))
                   else escape_char(ch) for i, ch in enumerate(text))


def safe_text(text: str) -> str:
    """One line of inert text: a newline drawn as ``↵``, a tab as ``→``, every other control escaped."""
    return inert_text(text.replace("\t", "→").replace("\n", "↵"), keep="")
