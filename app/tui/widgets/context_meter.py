"""The live context meter in the footer: tokens used of the window, coloured as it fills.

``used`` is the conversation's exact token count (``session.context_used``,
plus the reply's tokens while it streams); ``draft`` is what the text in
the prompt box would add (``session.draft_tokens``); ``next_send`` what sending it will do when the
conversation no longer fits (``next send drops turns 1-2``, :func:`app.conversation.compaction.next_send`),
said before the send, in the meter's own colour for a full context.
"""
from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static

from app.tui.format import meter_level, meter_text


class ContextMeter(Static):
    """``ctx used+draft / limit (pct)``, then `` · next send ...`` when it drops, summarizes or is refused;
    CSS classes ``-ok``, ``-warn``, ``-full`` (``-full`` too whenever the next send compacts)."""

    DEFAULT_CSS = """
    ContextMeter {
        width: auto;
        padding: 0 1;
        background: $success-muted;
        color: $text;
    }
    ContextMeter.-warn { background: $warning-muted; }
    ContextMeter.-full { background: $error-muted; }
    """

    # plain reactives: a per-token update repaints only this widget; the screen is laid out
    # again only when the text's length changes (see _refresh_level)
    used: reactive[int] = reactive(0)
    draft: reactive[int] = reactive(0)
    limit: reactive[int] = reactive(0)
    next_send: reactive[str] = reactive("")

    _width = 0

    def render(self) -> str:
        if not self.limit:
            return "ctx -"
        text = meter_text(self.used, self.draft, self.limit)
        return f"{text} · {self.next_send}" if self.next_send else text

    def _refresh_level(self) -> None:
        width = len(self.render())
        if width != self._width:
            self._width = width
            self.refresh(layout=True)
        level = "full" if self.next_send else meter_level(self.used + self.draft, self.limit)
        for name in ("ok", "warn", "full"):
            self.set_class(name == level, f"-{name}")

    def watch_used(self) -> None:
        self._refresh_level()

    def watch_draft(self) -> None:
        self._refresh_level()

    def watch_limit(self) -> None:
        self._refresh_level()

    def watch_next_send(self) -> None:
        self._refresh_level()
