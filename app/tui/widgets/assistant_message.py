"""One assistant turn: thinking block, the answer streaming as Markdown, the token counts.

The answer is fed through ``Markdown.get_stream`` so each batch of text is
*appended* (only the last block is re-parsed), never the whole message
re-rendered per token.  Code blocks are highlighted by Textual's Markdown.
"""
from __future__ import annotations

import re

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from app.tui.format import json_code_block, stats_line
from app.tui.widgets.thinking_block import ThinkingBlock

#: the mark of a stored reply by how it ended, where no "⏹ stopped" (Esc) or counts tell it
CUT_MARK = "⚠ cut off: tokchat stopped while writing it (the text is as far as it was saved) · /continue goes on"
WRITING_MARK = "✎ being written in another window: what it had written when this window opened it"

#: fenced code blocks in a reply: group 1 is the code
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


class AssistantMessage(Vertical):
    """A reply; ``finish`` marks it done (or stopped) and shows its :class:`TurnStats`."""

    DEFAULT_CSS = """
    AssistantMessage {
        height: auto;
        margin: 1 4 0 1;
        padding: 0 1;
        border-left: thick $accent;
    }
    AssistantMessage > Markdown { margin: 0; padding: 0; }
    AssistantMessage > .stats { color: $text-muted; height: auto; display: none; }
    AssistantMessage > .opening { color: $text-muted; height: auto; display: none; }
    AssistantMessage.-opening > .opening { display: block; }
    AssistantMessage.-done > .stats { display: block; }
    AssistantMessage > .waiting { color: $text-muted; height: auto; display: none; }
    AssistantMessage.-waiting > .waiting { display: block; }
    AssistantMessage.-stopped { border-left: thick $warning; }
    AssistantMessage.-cut { border-left: thick $warning; }
    AssistantMessage.-writing { border-left: thick $secondary; }
    AssistantMessage.-error { border-left: thick $error; }
    """

    def __init__(self, *, content: str = "", reasoning: str = "", stats=None, stored: bool = False,
                 opening: str = "", finish_reason: str | None = "stop") -> None:
        """A streaming reply, or with ``stored=True`` a finished one shown at once (a resumed chat).
        ``opening``: the start of ``content`` the user wrote (/reply), marked as theirs.
        ``finish_reason``: how a stored reply ended; ``"interrupted"`` (its writer was killed) and None
        (another window is writing it) are marked, as Esc's "stopped" is."""
        super().__init__()
        self.opening = opening
        self.finish_reason = finish_reason
        self.content = content
        self.stats = stats
        self._stored_reasoning = reasoning
        self._stored = stored
        self._stream: MarkdownStream | None = None

    def compose(self) -> ComposeResult:
        yield ThinkingBlock(self._stored_reasoning, self.stats.reasoning_tokens if self.stats else None)
        yield Static(self._opening_text(), classes="opening", markup=False)
        yield Markdown(json_code_block(self.content) or self.content or None)
        yield Static("", classes="waiting", markup=False)
        yield Static(self._stored_text() if self._stored else "", classes="stats", markup=False)

    def _stored_text(self) -> str:
        """A stored reply's last line: its counts, after its mark when it did not end on its own."""
        line = self._stats_text(self.stats)
        mark = {"interrupted": CUT_MARK, None: WRITING_MARK}.get(self.finish_reason)
        return f"{mark} · {line}" if mark and line else mark or line

    def _opening_text(self) -> str:
        short = self.opening if len(self.opening) <= 60 else self.opening[:59] + "…"
        return f"✎ you wrote the start: “{short}”" if self.opening else ""

    async def show_opening(self, opening: str) -> None:
        """The user's start of this reply (/reply): shown as the reply's first text, marked as theirs."""
        self.opening = opening
        self.query_one(".opening", Static).update(self._opening_text())
        self.add_class("-opening")
        await self.add_content(opening)

    def reopen(self) -> None:
        """A finished reply streams on (/continue): its stats line waits for the new total."""
        self.remove_class("-done", "-stopped", "-error", "-cut", "-writing")
        self.finish_reason = "stop"
        self.query_one(".stats", Static).update("")

    def on_mount(self) -> None:
        if self.opening:
            self.add_class("-opening")
        if self._stored:
            self.add_class("-done")
            if self.stats is not None and self.stats.finish_reason == "cancelled":
                self.add_class("-stopped")
            self.set_class(self.finish_reason == "interrupted", "-cut")
            self.set_class(self.finish_reason is None, "-writing")

    @staticmethod
    def _stats_text(stats) -> str:
        if stats is None:
            return ""
        line = stats_line(stats)
        return "⏹ stopped · " + line if stats.finish_reason == "cancelled" else line

    def show_waiting(self, line: str) -> None:
        """The prompt's progress while nothing has been generated yet, in a row of its own: the stats
        row stays hidden until the reply is done (its counts are final only then), so a line written
        there would never be drawn.  The reply's first text replaces it (:meth:`end_waiting`)."""
        if not self.content and not self.reasoning and not self.has_class("-done"):
            self.query_one(".waiting", Static).update(line)
            self.add_class("-waiting")

    def end_waiting(self) -> None:
        """The wait is over (the reply starts, or the turn ends): the progress row goes away."""
        if self.has_class("-waiting"):
            self.remove_class("-waiting")
            self.query_one(".waiting", Static).update("")

    @property
    def thinking(self) -> ThinkingBlock:
        return self.query_one(ThinkingBlock)

    @property
    def reasoning(self) -> str:
        return self.thinking.text

    async def add_reasoning(self, text: str) -> None:
        if text:
            self.end_waiting()
        await self.thinking.append(text)

    async def add_content(self, text: str) -> None:
        """Append answer text; the first answer text closes the thinking block."""
        if not text:
            return
        self.end_waiting()
        if not self.content and self.thinking.text:
            self.thinking.collapsed = True
        self.content += text
        if self._stream is None:
            self._stream = Markdown.get_stream(self.query_one(Markdown))
        await self._stream.write(text)

    async def finish(self, stats, *, error: str | None = None) -> None:
        """Flush the streams and show the token counts (``stats`` may be None after an error)."""
        self.end_waiting()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        block = json_code_block(self.content)
        if block is not None:  # a JSON answer, drawn as a code block once it is whole
            await self.query_one(Markdown).update(block)
        await self.thinking.finish(stats.reasoning_tokens if stats else None)
        if self.thinking.text and self.content:
            self.thinking.collapsed = True
        self.stats = stats
        line = self._stats_text(stats)
        if stats is not None and stats.finish_reason == "cancelled":
            self.add_class("-stopped")
        if error:
            self.add_class("-error")
            line = f"error: {error}" + (f" · {line}" if line else "")
        self.query_one(".stats", Static).update(line)
        self.add_class("-done")

    def code_blocks(self) -> list[str]:
        """The fenced code blocks of the answer, in order (what /copy code N copies)."""
        return [m.group(1) for m in _FENCE.finditer(json_code_block(self.content) or self.content)]
