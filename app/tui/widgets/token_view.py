"""A scrolling view of many token pieces, drawn a row at a time (Textual's line API).

One widget for the whole prompt, not one per token: :func:`token_layout.layout`
places the pieces in rows once per width, and :meth:`TokenView.render_line`
builds only the rows on screen, so a full 8k context opens and scrolls at
the same speed as a short one.  Neighbouring tokens alternate two
backgrounds (the boundaries), special tokens and byte pieces have their own
colours, the selected part is underlined, and the cursor token is reversed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from app.tui.token_layout import BYTES, SPECIAL, Piece, Row, first_rows, layout

_STYLES = {
    # (kind, parity) -> style; the two parities alternate so every boundary shows
    ("normal", 0): Style(color="#e0e0e0", bgcolor="#2b3a4a"),
    ("normal", 1): Style(color="#e0e0e0", bgcolor="#4a3a2b"),
    (SPECIAL, 0): Style(color="#ffffff", bgcolor="#7a1f6a", bold=True),
    (SPECIAL, 1): Style(color="#ffffff", bgcolor="#5a1f7a", bold=True),
    (BYTES, 0): Style(color="#ffd75f", bgcolor="#303030", italic=True),
    (BYTES, 1): Style(color="#ffd75f", bgcolor="#404040", italic=True),
    ("reply", 0): Style(color="#c0ffc0", bgcolor="#1f4a2b"),
    ("reply", 1): Style(color="#c0ffc0", bgcolor="#2b5a1f"),
}
_SELECTED = Style(underline=True)
_CURSOR = Style(reverse=True)


@dataclass
class TokenRows:
    """The pieces to draw, each with the part it belongs to; ``reply_from``: first reply token."""

    pieces: Sequence[Piece]
    parts: Sequence[int]
    reply_from: int


class TokenView(ScrollView, can_focus=True):
    """All pieces of a prompt (and its reply); arrows move a token cursor, PageUp/Down scroll."""

    DEFAULT_CSS = """
    TokenView { height: 1fr; background: $surface; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "Prev token", show=False),
        Binding("right", "move(1)", "Next token", show=False),
        Binding("up", "move_row(-1)", "Row up", show=False),
        Binding("down", "move_row(1)", "Row down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
    ]

    cursor: reactive[int] = reactive(0)
    selected_part: reactive[int] = reactive(-1)

    @dataclass
    class CursorMoved(Message):
        index: int

    def __init__(self, rows: TokenRows, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data = rows
        self._rows: list[Row] = []
        self._first: list[int] = []
        self._width = 0

    # -- layout -------------------------------------------------------------------------------
    def on_resize(self) -> None:
        self._relayout()

    def set_pieces(self, pieces: Sequence[Piece]) -> None:
        """Draw other text for the same tokens (pieces or ids)."""
        self.data.pieces = pieces
        self._width = 0
        self._relayout()

    def _relayout(self) -> None:
        width = self.scrollable_content_region.width or self.size.width
        if width <= 0 or width == self._width:
            return
        self._width = width
        self._rows = layout(self.data.pieces, width)
        self._first = first_rows(self._rows, len(self.data.pieces))
        self.virtual_size = Size(width, len(self._rows))
        self.refresh()

    @property
    def row_count(self) -> int:
        return len(self._rows)

    # -- drawing ------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        strip = self.row_strip(y + self.scroll_offset.y)
        return strip.crop(self.scroll_offset.x, self.scroll_offset.x + self.size.width).extend_cell_length(
            self.size.width, self.rich_style)

    def row_strip(self, row_y: int) -> Strip:
        """Row ``row_y`` of the whole layout, uncropped (what render_line shows when it is on screen)."""
        if not 0 <= row_y < len(self._rows):
            return Strip.blank(0)
        segments = []
        data = self.data
        for index, text in self._rows[row_y]:
            kind = data.pieces[index].kind
            if kind == "normal" and index >= data.reply_from:
                kind = "reply"
            style = _STYLES[(kind, index & 1)]
            if data.parts[index] == self.selected_part:
                style = style + _SELECTED
            if index == self.cursor:
                style = style + _CURSOR
            segments.append(Segment(text, style))
        return Strip(segments)

    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh()
        self.post_message(self.CursorMoved(new))

    def watch_selected_part(self) -> None:
        self.refresh()

    # -- moving -------------------------------------------------------------------------------
    def show_token(self, index: int) -> None:
        """Put the cursor on ``index`` and scroll its row into view."""
        if not self.data.pieces:
            return
        index = max(0, min(index, len(self.data.pieces) - 1))
        self.cursor = index
        if self._first and self._first[index] >= 0:
            row = self._first[index]
            top = self.scroll_offset.y
            if not top <= row < top + self.scrollable_content_region.height:
                self.scroll_to(y=max(0, row - 2), animate=False)

    def action_move(self, step: int) -> None:
        self.show_token(self.cursor + step)

    def action_jump(self, index: int) -> None:
        self.show_token(index if index >= 0 else len(self.data.pieces) - 1)

    def action_move_row(self, step: int) -> None:
        if not self._first:
            return
        row = self._first[self.cursor] + step
        if 0 <= row < len(self._rows) and self._rows[row]:
            self.show_token(self._rows[row][0][0])
        elif 0 <= row < len(self._rows):
            self.scroll_to(y=row, animate=False)
