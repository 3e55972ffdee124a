"""What a Hugging Face tokenizer's configuration says, read the same way by every ``tokenizer.json`` loader.

The BPE loader (:mod:`tokenizer.hf_json`) and the WordPiece/Unigram loader
(:mod:`tokenizer.hf_merge_free`) both read the special tokens, the chat
template and whether the post-processor adds BOS; the readers live here,
below both, so neither imports the other's private helpers.
"""
from __future__ import annotations

from typing import Any


def token_text(value: Any) -> str | None:
    """A special token's text in tokenizer_config.json: a string, or an AddedToken dict's ``content``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def chat_template_of(value: Any) -> str | None:
    """The default chat template in tokenizer_config.json: a string, or the one named "default" in a list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default") or next(iter(named.values()), None)
        return chosen if isinstance(chosen, str) else None
    return None


def post_processor_adds_bos(spec: Any, bos_text: str | None) -> bool:
    """Does the post-processor put the BOS token in front of a single sequence?"""
    if not isinstance(spec, dict) or not bos_text:
        return False
    if spec.get("type") == "Sequence":
        return any(post_processor_adds_bos(p, bos_text) for p in spec.get("processors", []))
    if spec.get("type") == "TemplateProcessing":
        single = spec.get("single") or []
        first = single[0] if single else {}
        return isinstance(first, dict) and first.get("SpecialToken", {}).get("id") == bos_text
    return False
