"""How token pieces are drawn: inert display text per id, and rows of a given width.

Kept apart from the inspector screen so it can be tested without a
terminal.  A piece is shown as what it stands for, made safe: a newline is
``↵`` and a piece ending in one ends the row (so the prompt keeps its shape), a tab is ``→``,
control and format characters (ESC, bidi overrides, NUL) are written as
``\\x1b`` / ``\\u202e`` so nothing reaches the terminal as a command, and a
piece that is not whole UTF-8 (a byte-fallback ``<0xE2>`` token, or part of
a character in a byte-level vocabulary) is written as its bytes ``‹e2 80›``.

Rows hold ``(token index, text)`` chunks; a piece wider than the row is
split over rows.  Layout is linear in the number of ids and needs no
widget per token: the inspector draws only the rows on screen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from rich.cells import cell_len

from app.tui.inert import safe_text

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

NORMAL, SPECIAL, BYTES = "normal", "special", "bytes"


@dataclass(frozen=True)
class Piece:
    """One id as drawn: ``text`` is safe to print; ``newline``: the row ends after it."""

    text: str
    kind: str  # normal | special | bytes
    newline: bool = False


def piece(tokenizer: Tokenizer, tid: int) -> Piece:
    """How ``tid`` is drawn (see the module docstring)."""
    from tokenizer.core import ATTR_BYTE

    data = tokenizer.token_bytes(tid)
    if tokenizer.is_special(tid) or tokenizer.id_to_token(tid) in tokenizer.special_tokens:
        return Piece(safe_text(data.decode("utf-8", "replace")) or f"<{tid}>", SPECIAL)
    if tokenizer.token_attr(tid) & ATTR_BYTE:
        return Piece("‹" + data.hex(" ") + "›", BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Piece("‹" + data.hex(" ") + "›", BYTES)
    if not text:
        return Piece("∅", BYTES)
    newline = text.endswith("\n")
    shown = safe_text(text)
    if cell_len(shown) == 0:  # only combining marks: show them on a dotted circle
        shown = "◌" + shown
    return Piece(shown, NORMAL, newline)


def pieces(tokenizer: Tokenizer, ids: Sequence[int]) -> list[Piece]:
    cache: dict[int, Piece] = {}
    out = []
    for tid in ids:
        p = cache.get(tid)
        if p is None:
            p = cache[tid] = piece(tokenizer, tid)
        out.append(p)
    return out


def id_pieces(ids: Sequence[int], drawn: Sequence[Piece]) -> list[Piece]:
    """The same tokens drawn as their ids (the inspector's id view)."""
    return [Piece(str(tid) + " ", p.kind, p.newline) for tid, p in zip(ids, drawn)]


#: one row: (token index, text) chunks
Row = list[tuple[int, str]]


def layout(drawn: Sequence[Piece], width: int) -> list[Row]:
    """Rows of at most ``width`` cells; a row ends after a newline piece or when full."""
    width = max(4, width)
    rows: list[Row] = []
    row: Row = []
    used = 0
    for index, p in enumerate(drawn):
        text = p.text
        size = cell_len(text)
        if used + size > width and row and size <= width:
            rows.append(row)
            row, used = [], 0
        while used + size > width:  # wider than what is left even on a fresh row: split it
            cut, cells = 0, 0
            while cut < len(text) and cells + cell_len(text[cut]) <= width - used:
                cells += cell_len(text[cut])
                cut += 1
            if cut == 0 and not row:
                cut = 1  # one character wider than the row: place it anyway
            if cut:
                row.append((index, text[:cut]))
            rows.append(row)
            row, used = [], 0
            text = text[cut:]
            size = cell_len(text)
        if text:
            row.append((index, text))
            used += size
        if p.newline:
            rows.append(row)
            row, used = [], 0
    if row or not rows:
        rows.append(row)
    return rows


def first_rows(rows: Sequence[Row], count: int) -> list[int]:
    """For each token index below ``count``, the first row it appears on."""
    first = [-1] * count
    for y, row in enumerate(rows):
        for index, _ in row:
            if first[index] < 0:
                first[index] = y
    return first
