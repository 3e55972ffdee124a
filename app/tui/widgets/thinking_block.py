"""The model's reasoning: a collapsible block above the answer.

Open while the reasoning streams, so the user sees the model work; closed as
soon as the answer starts, so the answer is what the eye lands on.  The
reasoning streams through ``Markdown.get_stream`` like the answer does.
"""
from __future__ import annotations

from textual.widgets import Collapsible, Markdown
from textual.widgets.markdown import MarkdownStream


class ThinkingBlock(Collapsible):
    """Reasoning text under a ``Thinking`` title; hidden until the first reasoning arrives."""

    DEFAULT_CSS = """
    ThinkingBlock {
        display: none;
        margin: 0 0 0 0;
        padding: 0;
        border: none;
        background: transparent;
    }
    ThinkingBlock.-has-text { display: block; }
    ThinkingBlock Markdown { color: $text-muted; margin: 0; padding: 0 1; }
    """

    def __init__(self, text: str = "", reasoning_tokens: int | None = None) -> None:
        """Empty and open for a streaming reply; with ``text``, a finished block, closed."""
        super().__init__(Markdown(text or None), title="Thinking…", collapsed=bool(text))
        self.text = text
        self._stream: MarkdownStream | None = None
        if text:
            self.add_class("-has-text")
            self.title = self._title_for(reasoning_tokens)

    @staticmethod
    def _title_for(reasoning_tokens: int | None) -> str:
        return "Thinking" if reasoning_tokens is None else f"Thinking ({reasoning_tokens} tokens)"

    async def append(self, text: str) -> None:
        """Add streamed reasoning text."""
        if not text:
            return
        self.text += text
        self.add_class("-has-text")
        if self._stream is None:
            self._stream = Markdown.get_stream(self.query_one(Markdown))
        await self._stream.write(text)

    async def finish(self, reasoning_tokens: int | None = None) -> None:
        """Flush the stream and put the token count in the title."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if self.text:
            self.title = self._title_for(reasoning_tokens)
