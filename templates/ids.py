"""Turn a rendered prompt into token ids, safely.

Markup is encoded with ``special=True`` so ``<|im_start|>`` becomes its
control id; every message span is passed as a literal span, so the same
characters typed by a user stay plain text.  The BOS rule: a model that
wants a BOS (``tokenizer.add_bos``) gets exactly one at the start, whether
or not its template already wrote ``bos_token`` (Llama 3 and Gemma do);
templates never get a second one prepended.
"""
from __future__ import annotations

from typing import Any, Sequence

from templates.chat_template import RenderedPrompt
from templates.sandbox import TemplateError


def prompt_ids(tokenizer: Any, rendered: RenderedPrompt) -> list[int]:
    """The ids to send for ``rendered``: injection-safe, with exactly one BOS where the model wants it."""
    check_unplaced(tokenizer, rendered)
    ids = tokenizer.encode(rendered.text, special=True, literal_spans=list(rendered.literal_spans))
    return with_bos(tokenizer, ids)


def encode_part(tokenizer: Any, rendered: RenderedPrompt, start: int) -> list[int]:
    """Ids for ``rendered.text[start:]`` alone (the part of a prompt that is new this turn).

    The spans are shifted to the part; a span that crosses ``start`` cannot
    be split safely, so the caller must re-encode the whole prompt instead
    (this raises ValueError).
    """
    spans = []
    for a, b in rendered.literal_spans:
        if b <= start:
            continue
        if a < start:
            raise ValueError("a message span crosses the reuse boundary")
        spans.append((a - start, b - start))
    return tokenizer.encode(rendered.text[start:], special=True, literal_spans=spans)


def with_bos(tokenizer: Any, ids: Sequence[int]) -> list[int]:
    """``ids`` with one BOS in front if the model wants one and the template did not write it."""
    ids = list(ids)
    bos = getattr(tokenizer, "bos_id", None)
    if getattr(tokenizer, "add_bos", False) and bos is not None and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids


def check_unplaced(tokenizer: Any, rendered: RenderedPrompt) -> None:
    """Refuse a prompt whose unlocatable message text would be read as control tokens."""
    if not rendered.unplaced:
        return
    specials = getattr(tokenizer, "special_tokens", None) or {}
    for content in rendered.unplaced:
        hit = next((s for s in specials if s and s in content), None)
        if hit is not None:
            raise TemplateError(
                f"this template rewrites message text, so {hit!r} in a message cannot be kept as "
                "plain text; use a built-in template (--template chatml, llama3 or gemma)"
            )
