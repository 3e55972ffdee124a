"""Turn a rendered prompt into token ids, safely.

Markup is encoded with ``special=True`` so ``<|im_start|>`` becomes its
control id; every message span is passed as a literal span, so the same
characters typed by a user stay plain text.  The BOS rule: a model that
wants a BOS (``tokenizer.add_bos``) gets exactly one at the start, whether
or not its template already wrote ``bos_token`` (Llama 3 and Gemma do);
templates never get a second one prepended.
"""
from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING, Any, Sequence

from templates.chat_template import RenderedPrompt
from templates.sandbox import TemplateError

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

#: tokenizer -> compiled alternation of its control-token texts (None: it has none)
_CONTROL_PATTERNS: "weakref.WeakKeyDictionary[Any, re.Pattern[str] | None]" = weakref.WeakKeyDictionary()


def prompt_ids(tokenizer: Tokenizer, rendered: RenderedPrompt) -> list[int]:
    """The ids to send for ``rendered``: injection-safe, with exactly one BOS where the model wants it."""
    check_unplaced(tokenizer, rendered)
    ids = tokenizer.encode(rendered.text, special=True, literal_spans=protected_spans(tokenizer, rendered))
    return with_bos(tokenizer, ids)


def protected_spans(tokenizer: Tokenizer, rendered: RenderedPrompt) -> list[tuple[int, int]]:
    """Where control-token text sits inside message spans: what must be encoded as plain text.

    Only these occurrences are passed to the tokenizer as literal spans.
    The rest of a message encodes the same either way, except that
    llama.cpp still carves *user-defined* tokens out of plain text (Gemma's
    runs of spaces and newlines), and protecting whole messages would stop
    that.  A control token can only be carved where it overlaps none of
    these occurrences, and every occurrence is covered (the scan is
    leftmost, longest first), so no control id can come from message text.
    """
    pattern = control_pattern(tokenizer)
    if pattern is None:
        return []
    text = rendered.text
    spans: list[tuple[int, int]] = []
    for a, b in rendered.literal_spans:
        for match in pattern.finditer(text, a, b):
            if spans and match.start() <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], match.end()))
            else:
                spans.append(match.span())
    return spans


def control_pattern(tokenizer: Tokenizer) -> "re.Pattern[str] | None":
    """A regex matching any of the tokenizer's control-token texts (cached per tokenizer)."""
    try:
        if tokenizer in _CONTROL_PATTERNS:
            return _CONTROL_PATTERNS[tokenizer]
    except TypeError:  # cannot be weakly referenced: build it each time
        return _build_control_pattern(tokenizer)
    pattern = _CONTROL_PATTERNS[tokenizer] = _build_control_pattern(tokenizer)
    return pattern


def _build_control_pattern(tokenizer: Tokenizer) -> "re.Pattern[str] | None":
    texts = sorted((t for t, i in tokenizer.special_tokens.items() if t and tokenizer.is_special(i)),
                   key=len, reverse=True)
    return re.compile(_trie_pattern(texts)) if texts else None


def _trie_pattern(texts: Sequence[str]) -> str:
    """One regex for ``texts`` shaped as a trie, matching the longest text at each position.

    A flat ``a|b|c`` alternation tries every text at every position that
    could start one; Gemma has 6,414 control texts, nearly all starting with
    ``<``, so a paste of HTML took seconds per turn.  The trie tries one
    branch per character, and a greedy ``(...)?`` after a complete text
    still prefers the longer match, as the longest-first alternation did.
    """
    trie: dict = {}  # char -> subtrie; "" -> True where a text ends
    for text in texts:
        node = trie
        for ch in text:
            node = node.setdefault(ch, {})
        node[""] = True

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


def encode_part(tokenizer: Tokenizer, rendered: RenderedPrompt, start: int) -> list[int]:
    """Ids for ``rendered.text[start:]`` alone (the part of a prompt that is new this turn).

    The spans are shifted to the part; a span that crosses ``start`` cannot
    be split safely, so the caller must re-encode the whole prompt instead
    (this raises ValueError).
    """
    spans = []
    for a, b in protected_spans(tokenizer, rendered):
        if b <= start:
            continue
        if a < start:
            raise ValueError("a message span crosses the reuse boundary")
        spans.append((a - start, b - start))
    return tokenizer.encode(rendered.text[start:], special=True, literal_spans=spans)


def with_bos(tokenizer: Tokenizer, ids: Sequence[int]) -> list[int]:
    """``ids`` with one BOS in front if the model wants one and the template did not write it."""
    ids = list(ids)
    bos = tokenizer.bos_id
    if tokenizer.add_bos and bos is not None and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids


def check_unplaced(tokenizer: Tokenizer, rendered: RenderedPrompt) -> None:
    """Refuse a prompt whose unlocatable message text would be read as control tokens."""
    if not rendered.unplaced:
        return
    pattern = control_pattern(tokenizer)
    for content in rendered.unplaced:
        hit = pattern.search(content) if pattern is not None else None
        if hit is not None:
            raise TemplateError(
                f"this template rewrites message text, so {hit.group()!r} in a message cannot be kept as "
                "plain text; use a built-in template (--template chatml, llama3 or gemma)"
            )
