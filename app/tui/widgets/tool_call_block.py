"""One tool call in a reply: a collapsible block with the call's arguments and its result.

The block opens while the model writes the call (its text streams in), and
closes once the result is in, its title saying what happened: ``🔧
time.get_current_time · ok · 59 tokens``.  Everything shown passes through
:func:`app.tools.display.printable` into ``markup=False`` widgets, so a
tool's escape sequences and brackets are inert text.
"""
from __future__ import annotations

import json

from textual.widgets import Collapsible, Static

from app.tools.display import printable

_STATUS_TEXT = {"ok": "ok", "error": "failed", "denied": "denied", "malformed": "malformed, not run",
                "unknown": "unknown tool, not run", "skipped": "not run",
                "repeat": "repeated, answered from the first call"}


class ToolCallBlock(Collapsible):
    """A call being written, then decided, then answered."""

    DEFAULT_CSS = """
    ToolCallBlock { margin: 0; padding: 0; border: none; background: transparent; height: auto; }
    ToolCallBlock > Contents { padding: 0 1; }
    ToolCallBlock .call { color: $text-muted; }
    ToolCallBlock .result { color: $text; }
    ToolCallBlock.-failed CollapsibleTitle { color: $error; }
    """

    def __init__(self) -> None:
        self.call_text = Static("", classes="call", markup=False)
        self.result_text = Static("", classes="result", markup=False)
        super().__init__(self.call_text, self.result_text, title="🔧 calling a tool…", collapsed=False)
        self.raw = ""
        self.status: str | None = None
        self.tool: str = ""

    @classmethod
    def stored(cls, call: dict | None, result) -> "ToolCallBlock":
        """A finished block for a stored call (``call`` in HF form, or None) and its ``tool`` message."""
        block = cls()
        function = (call or {}).get("function", call or {})
        block.tool = function.get("name") or getattr(result, "name", None) or "?"
        block.call_text.update(printable(json.dumps(function.get("arguments", {}), ensure_ascii=False, indent=2)))
        block.result_text.update(printable(result.content))
        block.status = "error" if result.content.startswith("error:") else "ok"
        block.title = f"🔧 {printable(block.tool)} · {'failed' if block.status == 'error' else 'result'}"
        block.collapsed = True
        if block.status == "error":
            block.add_class("-failed")
        return block

    def add_text(self, text: str) -> None:
        """More of the call as the model writes it."""
        self.raw += text
        self.call_text.update(printable(self.raw))

    def show_call(self, call, server: str) -> None:
        """The parsed call: its name and arguments (or why it is malformed)."""
        self.tool = f"{server + '.' if server else ''}{call.name or '?'}"
        if call.error:
            self.call_text.update(printable(f"{call.raw}\n{call.error}"))
        else:
            self.call_text.update(printable(json.dumps(call.arguments, ensure_ascii=False, indent=2)))
        self.title = f"🔧 {printable(self.tool)} · waiting"

    def show_result(self, outcome) -> None:
        """The outcome: status, tokens sent back, and the result text."""
        self.status = outcome.status
        cut = f" (cut from {outcome.truncated_from_chars:,} characters)" if outcome.truncated_from_chars else ""
        self.title = (f"🔧 {printable(self.tool)} · {_STATUS_TEXT.get(outcome.status, outcome.status)} · "
                      f"{outcome.tokens} tokens{cut}")
        self.result_text.update(printable(outcome.text))
        if outcome.status != "ok":
            self.add_class("-failed")
        self.collapsed = True
