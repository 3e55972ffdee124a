"""Split a model's decoded reply into reasoning and content, while it streams.

Reasoning models wrap their chain of thought in tags: ``<think> ... </think>``
then the answer.  :class:`ThinkFilter` is the stage between the stream decoder
and the UI: it takes decoded text in chunks of any size and returns typed
:class:`ThinkEvent` s, so the UI can show the reasoning collapsed and the
answer in full, and the session can keep reasoning out of the next prompt.

Rules (the ones Ollama's and vLLM's parsers follow):

* Only a think block at the *start* of the reply counts: leading whitespace,
  then ``open_tag``.  A reply that starts with anything else is content from
  the first character, and after the block closes everything is content, so
  an answer that talks *about* ``<think>`` tags is never misfiled.
* ``start_in_reasoning=True`` is for templates that pre-fill ``<think>`` in
  the prompt (DeepSeek-R1, QwQ): the reply starts inside the block.  A
  redundant ``open_tag`` at the very start is swallowed.
  :meth:`ThinkFilter.for_prompt` picks the state from the prompt's tail.
* A tag may arrive whole (a special token) or split across any number of
  chunks at any boundary: a suffix that could still become a tag is held back
  until it is decided, and :meth:`ThinkFilter.finalize` flushes it as text.
* Whitespace (``strip_whitespace=True``, the default, as chat UIs show it):
  after either tag, the rest of the tag's line and any blank lines are
  dropped (the first text line keeps its indentation); trailing whitespace
  before ``close_tag`` and at the end of an unfinished block is dropped.  So
  ``"<think>\\nhmm\\n</think>\\n\\nAnswer"`` gives reasoning ``"hmm"`` and
  content ``"Answer"``.  Content that is not preceded by a think block is
  passed through untouched.

The output depends only on the whole stream, never on how it was chunked
(after merging adjacent events of the same kind); the tests check this with
hypothesis.  Non-goals: several think blocks in one reply, tool-call markup,
and channel formats such as gpt-oss's harmony.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EventKind = Literal["reasoning", "content"]

# Filter states.
_LEADING = 0  # nothing decided yet: buffer holds whitespace and maybe part of open_tag
_REASONING = 1  # inside the think block
_CONTENT = 2  # the answer; no tags are recognised any more


@dataclass(frozen=True)
class ThinkEvent:
    """A run of reply text of one kind."""

    kind: EventKind
    text: str


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def _after_tag_whitespace(run: str) -> str:
    """What survives of the whitespace run that follows a tag.

    The rest of the tag's own line and whole blank lines go; spaces that
    indent the first line of text stay.
    """
    newline = run.rfind("\n")
    return run[newline + 1 :] if newline >= 0 else ""


class ThinkFilter:
    """Streaming splitter of decoded text into reasoning and content events."""

    def __init__(
        self,
        open_tag: str = "<think>",
        close_tag: str = "</think>",
        start_in_reasoning: bool = False,
        *,
        strip_whitespace: bool = True,
    ) -> None:
        if not open_tag or not close_tag:
            raise ValueError("think tags must be non-empty strings")
        self.open_tag = open_tag
        self.close_tag = close_tag
        self.start_in_reasoning = start_in_reasoning
        self.strip_whitespace = strip_whitespace
        self._state = _LEADING
        self._buf = ""  # text received but not yet emitted
        self._eating = False  # dropping the whitespace run right after a tag
        self._finished = False

    @classmethod
    def for_prompt(
        cls, prompt_text: str, open_tag: str = "<think>", close_tag: str = "</think>", **kwargs
    ) -> "ThinkFilter":
        """A filter whose start state matches the prompt's tail.

        A prompt ending in ``open_tag`` (ignoring whitespace) pre-filled the
        block, so the reply starts inside it; a prompt ending in an empty
        ``<think></think>`` (thinking switched off) or anything else starts
        outside.
        """
        starts_inside = prompt_text.rstrip().endswith(open_tag)
        return cls(open_tag, close_tag, start_in_reasoning=starts_inside, **kwargs)

    @property
    def in_reasoning(self) -> bool:
        """Whether text fed now would count as reasoning (for token accounting)."""
        if self._state == _LEADING:
            return self.start_in_reasoning
        return self._state == _REASONING

    def feed(self, text: str) -> list[ThinkEvent]:
        """Take the next chunk of decoded text; return the events it completes."""
        if self._finished:
            raise ValueError("ThinkFilter.feed() after finalize()")
        self._buf += text
        out: list[ThinkEvent] = []
        self._drain(out, final=False)
        return _merged(out)

    def finalize(self) -> list[ThinkEvent]:
        """End of the reply: flush whatever was held back, as plain text."""
        if self._finished:
            return []
        self._finished = True
        out: list[ThinkEvent] = []
        self._drain(out, final=True)
        return _merged(out)

    # -- the state machine ---------------------------------------------------

    def _drain(self, out: list[ThinkEvent], final: bool) -> None:
        """Emit all of the buffer that is decided; loop while the state changes."""
        while True:
            state = self._state
            if state == _LEADING:
                if not self._leading(final):
                    return
            elif self._eating and not self._eat(final):
                return
            elif state == _REASONING:
                if not self._reasoning(out, final):
                    return
            else:
                if self._buf:
                    out.append(ThinkEvent("content", self._buf))
                    self._buf = ""
                return

    def _leading(self, final: bool) -> bool:
        """Look for open_tag after leading whitespace.  True when the state moved on."""
        stripped = self._buf.lstrip()
        if stripped.startswith(self.open_tag):
            self._enter_reasoning(stripped[len(self.open_tag) :])
            return True
        if not final and self.open_tag.startswith(stripped):
            return False  # whitespace only, or a prefix of the tag: wait for more
        # Not a think block here: the buffer is plain text of the start state.
        if self.start_in_reasoning:
            self._enter_reasoning(self._buf)
        else:
            self._state = _CONTENT  # passed through untouched, whitespace included
        return True

    def _enter_reasoning(self, rest: str) -> None:
        self._state = _REASONING
        self._buf = rest
        self._eating = self.strip_whitespace

    def _eat(self, final: bool) -> bool:
        """Drop the whitespace run after a tag.  True when it has ended."""
        buf = self._buf
        stripped = buf.lstrip()
        if not stripped:
            if final:
                self._buf = ""
                self._eating = False
                return True
            return False  # the run may go on in the next chunk
        run = buf[: len(buf) - len(stripped)]
        self._buf = _after_tag_whitespace(run) + stripped
        self._eating = False
        return True

    def _reasoning(self, out: list[ThinkEvent], final: bool) -> bool:
        """Emit reasoning up to close_tag or to what may start it.  True on a state change."""
        buf = self._buf
        end = buf.find(self.close_tag)
        if end >= 0:
            body = buf[:end].rstrip() if self.strip_whitespace else buf[:end]
            if body:
                out.append(ThinkEvent("reasoning", body))
            self._buf = buf[end + len(self.close_tag) :]
            self._state = _CONTENT
            self._eating = self.strip_whitespace
            return True
        if final:
            body = buf.rstrip() if self.strip_whitespace else buf
            keep = 0
        else:
            keep = _partial_tag_len(buf, self.close_tag)
            body = buf[: len(buf) - keep]
            if self.strip_whitespace:
                # Trailing whitespace is dropped if close_tag follows: hold it too.
                keep += len(body) - len(body.rstrip())
                body = body.rstrip()
        if body:
            out.append(ThinkEvent("reasoning", body))
        self._buf = buf[len(buf) - keep :] if keep else ""
        return False


def _merged(events: list[ThinkEvent]) -> list[ThinkEvent]:
    """Join adjacent events of the same kind; drop empty ones."""
    merged: list[ThinkEvent] = []
    for event in events:
        if not event.text:
            continue
        if merged and merged[-1].kind == event.kind:
            merged[-1] = ThinkEvent(event.kind, merged[-1].text + event.text)
        else:
            merged.append(event)
    return merged
