"""Incremental prompt ids: each turn encodes only what is new since the last one.

A backend reuses its KV cache for the longest common prefix of the ids it
is given, so turn N's prompt must start with *exactly* the ids turn N-1
sent plus the reply ids as the model generated them (not a re-tokenization
of the reply, which can differ).  :class:`PromptBuilder` remembers the text
and ids of what the backend holds and, when the new render starts with that
text, encodes only the rest.

The text check is what makes this safe: templates rewrite history (Qwen3
and DeepSeek-R1 drop earlier reasoning, Llama 3 trims replies, a dropped
turn changes the start), and then the new render no longer starts with the
old text, so the prompt is re-encoded in full.  ``reused`` reports which
happened.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from templates.chat_template import ChatTemplate, RenderedPrompt
from templates.ids import encode_part, prompt_ids

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer


@dataclass(frozen=True)
class BuiltPrompt:
    """One turn's prompt: the rendered text, its ids, and how many ids came from the cache."""

    rendered: RenderedPrompt
    ids: list[int]
    #: leading ids taken from the previous turn unchanged (0: encoded in full)
    reused: int

    @property
    def text(self) -> str:
        return self.rendered.text


@dataclass(frozen=True)
class _Base:
    text: str
    ids: tuple[int, ...]


class PromptBuilder:
    """Builds prompt ids for a message list, reusing what an earlier turn already encoded."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate) -> None:
        self.tokenizer = tokenizer
        self.template = template
        #: texts the backend's cache may hold, newest first: prompt + reply, then the prompt alone
        self._bases: list[_Base] = []

    def build(self, messages: Sequence[Any], enable_thinking: bool | None = None,
              tools: Sequence[Any] | None = None) -> BuiltPrompt:
        """Render ``messages`` (and ``tools``) with a generation prompt; encode what is not cached yet."""
        rendered = self.template.render(messages, add_generation_prompt=True, enable_thinking=enable_thinking,
                                        tools=tools)
        prefixes = [base for base in self._bases if base.ids and rendered.text.startswith(base.text)]
        for base in prefixes:
            new = self._continuation(base, rendered)
            if new is not None:
                return BuiltPrompt(rendered, list(base.ids) + new, len(base.ids))
        full = prompt_ids(self.tokenizer, rendered)
        for base in prefixes:
            cut = self._shared_boundary(full, rendered.text, base.text)
            if cut is not None:
                return BuiltPrompt(rendered, list(base.ids) + full[cut:], len(base.ids))
        return BuiltPrompt(rendered, full, 0)

    def _shared_boundary(self, full: list[int], text: str, base_text: str) -> int | None:
        """The index in ``full`` (``text`` encoded whole) where ``base_text`` ends, when the whole
        encode has an id boundary exactly there; else None.

        Then the ids after it are the whole encode's own, and the ids before it may be the
        base's as sent: the cache is kept up to there.  This is how a template that drops the
        last reply's reasoning (Qwen3, DeepSeek R1) costs only the reply: the previous prompt
        is kept id for id and the cut falls exactly where the reasoning began.  Extra bytes an
        encode puts before the text (a BOS, a space prefix) are allowed for.
        """
        tok = self.tokenizer
        sizes = [len(tok.token_bytes(i)) for i in full]
        extra = sum(sizes) - len(text.encode("utf-8", "surrogatepass"))
        if extra < 0:
            return None
        target = extra + len(base_text.encode("utf-8", "surrogatepass"))
        done = 0
        for index, size in enumerate(sizes):
            if done == target:
                return index if index > 0 else None
            if done > target:
                return None
            done += size
        return None

    def _continuation(self, base: _Base, rendered: RenderedPrompt) -> list[int] | None:
        """Ids for the text after ``base``, or None if they could differ from a full encode.

        Encoding the new part alone is exact only at a control-token
        boundary: llama.cpp and HF split text at control tokens first, but a
        token's rstrip (Phi-3's markers eat the newline after them) and the
        SentencePiece space prefix depend on what precedes.  So when the
        base ends in a control token, the new part is encoded together with
        that token's text and the repeated id dropped; otherwise the new
        part must start with a control token (or be empty).
        """
        tok = self.tokenizer
        last = base.ids[-1]
        start = len(base.text)
        if tok.is_special(last):
            marker = tok.decode([last])
            if marker and base.text.endswith(marker):
                try:
                    ids = encode_part(tok, rendered, start - len(marker))
                except ValueError:
                    return None  # a message span straddles the boundary
                return ids[1:] if ids and ids[0] == last else None
        try:
            ids = encode_part(tok, rendered, start)
        except ValueError:
            return None
        return ids if not ids or tok.is_special(ids[0]) else None

    def remember(self, prompt: BuiltPrompt, reply_ids: Sequence[int]) -> None:
        """Record what the backend holds after a turn: the prompt plus the reply as generated."""
        reply_text = self.tokenizer.decode(list(reply_ids)) if reply_ids else ""
        self._bases = [_Base(prompt.text + reply_text, tuple(prompt.ids) + tuple(reply_ids))]
        if reply_ids:  # a regenerate sends the same prompt again
            self._bases.append(_Base(prompt.text, tuple(prompt.ids)))

    def forget(self) -> None:
        """Drop the cache (a new conversation, or the tokenizer's view of it changed)."""
        self._bases = []

    @property
    def held_ids(self) -> tuple[int, ...]:
        """The ids the backend holds after the last turn (prompt and reply; empty before the first)."""
        return self._bases[0].ids if self._bases else ()

    @property
    def cached_tokens(self) -> int:
        """Ids the backend holds after the last turn (0 before the first)."""
        return len(self._bases[0].ids) if self._bases else 0
