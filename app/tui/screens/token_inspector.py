"""The token inspector: the exact ids a turn sent, their pieces, and where the context went.

Opened with ``/tokens``, Ctrl+K, the palette, or a double click on a message.
It reads the :class:`~app.conversation.context_breakdown.PromptRecord` the session kept
for the reply and the :class:`~app.conversation.context_breakdown.Breakdown` computed on
those same ids; nothing is encoded again.  The parts list on top is the
breakdown (selecting a part underlines its ids and jumps to the first); the
:class:`~app.tui.widgets.token_view.TokenView` below draws the prompt and
then the reply as generated; the line at the bottom describes the token
under the cursor (index, id, piece, bytes, part).  ``i`` switches between
pieces and ids; ``[`` and ``]`` open the turn before and after.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass


from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from app.conversation.context_breakdown import Breakdown, PromptRecord, role_and_content
from app.tui.token_layout import id_pieces, pieces
from app.tui.widgets.token_view import TokenRows, TokenView

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer


class TokenInspector(Screen):
    """One turn's prompt and reply as ids and pieces, with the context breakdown."""

    DEFAULT_CSS = """
    TokenInspector { layout: vertical; }
    TokenInspector > #inspector-title { height: auto; padding: 0 1; background: $panel; }
    TokenInspector > #parts { height: auto; max-height: 10; border: none; padding: 0; }
    TokenInspector > #token-detail { height: 1; padding: 0 1; background: $panel; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("i", "toggle_ids", "Ids/pieces", tooltip="show the ids or the pieces"),
        Binding("[", "turn(-1)", "Prev turn", tooltip="the prompt of the turn before"),
        Binding("]", "turn(1)", "Next turn", tooltip="the prompt of the turn after"),
        Binding("tab", "focus_next", "Parts/tokens", show=False),
    ]

    @dataclass
    class TurnRequested(Message):
        """``[`` / ``]``: show turn ``turn`` (1-based) instead; the chat knows its turns, not this screen."""

        turn: int

    def __init__(self, tokenizer: Tokenizer, record: PromptRecord, parts: Breakdown, *, title: str = "",
                 focus_message: int | None = None, turn: int = 0, new_ids: int | None = None,
                 state: str = "") -> None:
        """``new_ids``: of the prompt's ids, those the engine evaluated for this reply (its stats' "new");
        None when the reply has no stats for this prompt.  ``state``: its stats' state note ("loaded N ids
        from disk in T s", backends.state_keeper), "" when there is none."""
        super().__init__()
        self.new_ids = new_ids
        self.state = state
        self.turn = turn
        self.tokenizer = tokenizer
        self.record = record
        self.breakdown = parts
        self.title_text = title
        self.focus_message = focus_message
        ids = list(record.ids) + list(record.reply_ids)
        self.ids = ids
        self._pieces = pieces(tokenizer, ids)
        self._showing_ids = False
        reply_part = len(parts.parts)
        owners = list(parts.owner) + [reply_part] * len(record.reply_ids)
        self.rows = TokenRows(self._pieces, owners, len(record.ids))
        #: option index -> part index (reply: len(parts); -1: draft and room, not in the view)
        self._option_parts: list[int] = []

    def compose(self) -> ComposeResult:
        b = self.breakdown
        # the engine's own count, as the reply's stats line says it: the prompt builder's guess of what
        # the cache held (``prompt.reused``) is wrong after a stopped prompt or a restarted engine
        new = f" ({self.new_ids} new)" if self.new_ids is not None else ""
        if self.state:
            new += f" · state: {self.state}"
        head = (f"{self.title_text} · prompt {b.prompt_tokens} ids{new} · "
                f"reply {b.reply_tokens} · used {b.used} of {b.context_size} · room {b.room}")
        yield Static(head, id="inspector-title", markup=False)
        yield OptionList(*self._options(), id="parts")
        yield TokenView(self.rows, id="tokens")
        yield Static("", id="token-detail", markup=False)
        yield Footer()

    def _options(self) -> list[Option]:
        b = self.breakdown
        rows = b.rows()
        width = max(len(r[0]) for r in rows)
        options = []
        for n, (label, tokens, share) in enumerate(rows):
            part = n if n < len(b.parts) else (len(b.parts) if label == "reply" else -1)
            dropped = n < len(b.parts) and b.parts[n].dropped
            line = Text(f"{label:<{width}} {tokens:>7} {share:>8}", style="dim" if dropped or part < 0 else "")
            if n < len(b.parts) and b.parts[n].roles and not dropped:
                line.append("  " + ", ".join(f"{r} {c}" for r, c in b.parts[n].roles.items()), style="dim")
            options.append(Option(line, id=f"part-{n}"))
            self._option_parts.append(part)
        return options

    def on_mount(self) -> None:
        view = self.query_one(TokenView)
        view.focus()
        if self.focus_message is not None and self.focus_message in self.breakdown.message_part:
            self.select_part(self.breakdown.message_part[self.focus_message])
        else:
            self._describe(0)

    # -- actions ------------------------------------------------------------------------------
    def action_close(self) -> None:
        self.dismiss()

    def action_turn(self, step: int) -> None:
        if self.turn:
            self.post_message(self.TurnRequested(self.turn + step))

    def action_toggle_ids(self) -> None:
        self._showing_ids = not self._showing_ids
        view = self.query_one(TokenView)
        view.set_pieces(id_pieces(self.ids, self._pieces) if self._showing_ids else self._pieces)

    def select_part(self, part: int) -> None:
        """Underline ``part``'s ids and put the cursor on its first one."""
        view = self.query_one(TokenView)
        view.selected_part = part
        first = next((i for i, owner in enumerate(self.rows.parts) if owner == part), None)
        if first is not None:
            view.show_token(first)
        option = self._option_parts.index(part) if part in self._option_parts else None
        if option is not None:
            self.query_one(OptionList).highlighted = option

    @on(OptionList.OptionSelected, "#parts")
    def _part_chosen(self, event: OptionList.OptionSelected) -> None:
        part = self._option_parts[event.option_index]
        if part < 0:
            self.notify("the draft and the room left are not in this prompt", severity="information")
            return
        if part < len(self.breakdown.parts) and self.breakdown.parts[part].dropped:
            self.notify("this turn was left out of the prompt to fit the context: none of its ids were sent")
            return
        self.select_part(part)
        self.query_one(TokenView).focus()

    @on(TokenView.CursorMoved)
    def _cursor_moved(self, event: TokenView.CursorMoved) -> None:
        self._describe(event.index)

    def _describe(self, index: int) -> None:
        if not self.ids:
            return
        tid = self.ids[index]
        data = self.tokenizer.token_bytes(tid)
        part = self.rows.parts[index]
        if part < len(self.breakdown.parts):
            where = self.breakdown.parts[part].label
            msg = self.breakdown.message_owner[index] if index < len(self.breakdown.message_owner) else -1
            if msg >= 0:
                where += f" ({role_and_content(self.record.messages[msg])[0]})"
        else:
            where = "reply (as generated)"
        special = " special" if self.tokenizer.is_special(tid) else ""
        self.query_one("#token-detail", Static).update(
            f"#{index} of {len(self.ids)}  id {tid}{special}  {self._pieces[index].text}  "
            f"bytes {data.hex(' ') or '-'}  · {where}")
