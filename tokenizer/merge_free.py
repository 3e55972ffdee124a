"""GGUF wiring for the two merge-free models: WordPiece (``bert``) and Unigram (``t5``).

:func:`gguf_parts` reads the model's own GGUF keys (normalizer flags, the
precompiled charsmap, whitespace flags) and returns what
:func:`tokenizer.loader.load_gguf_tokenizer` needs: ``encode_fragment`` and
``render``.  Both models store word starts with ``▁``, so a normal token
renders with ``▁`` as a space, as llama.cpp's ``token_to_piece`` does.
"""
from __future__ import annotations

from typing import Any, Callable

from tokenizer.accel import accel_module
from tokenizer.core import PieceCache
from tokenizer.errors import TokenizerError

_SPACE = "\u2581"


def render_spaces(text: str) -> bytes:
    return text.replace(_SPACE, " ").encode("utf-8")


def _charsmap(kv: dict[str, Any]) -> bytes | None:
    raw = kv.get("tokenizer.ggml.precompiled_charsmap")
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray)):
        return bytes(raw)
    if isinstance(raw, list) and all(type(x) is int for x in raw):
        return bytes(x & 0xFF for x in raw)
    raise TokenizerError("tokenizer.ggml.precompiled_charsmap is not a byte array")


def _bool(kv: dict[str, Any], key: str, default: bool) -> bool:
    value = kv.get(key)
    return value if isinstance(value, bool) else default


def gguf_parts(model: str, v: dict[str, Any], kv: dict[str, Any], caches: list[PieceCache]
               ) -> tuple[Callable[[str], list[int]], Callable[[str], bytes]]:
    """(encode_fragment, render) for a ``bert`` or ``t5`` GGUF vocabulary ``v``."""
    if model == "bert":
        from tokenizer.wordpiece import LlamaWordPiece

        lowercase = _bool(kv, "tokenizer.ggml.normalizer.lowercase", True)
        strip = _bool(kv, "tokenizer.ggml.normalizer.strip_accents", lowercase)
        wpm = LlamaWordPiece(v["ids"], v["special"]["unk"], lowercase, strip, matcher=_wpm_matcher(v["ids"]))
        caches.append(wpm.cache)
        return wpm.encode_fragment, render_spaces
    from tokenizer.unigram import LlamaUnigram

    scores = v["scores"] if v["scores"] is not None else [0.0] * len(v["tokens"])
    try:
        ugm = LlamaUnigram(v["tokens"], v["attrs"], scores, v["special"]["unk"], _charsmap(kv),
                           add_space_prefix=v["add_space_prefix"],
                           remove_extra_whitespaces=v["remove_extra_whitespaces"])
    except ValueError as exc:
        raise TokenizerError(f"bad Unigram vocabulary: {exc}") from None
    ugm_fast = _ugm_viterbi(ugm, v, kv)
    if ugm_fast is not None:
        ugm._viterbi_factory = ugm_fast
    return ugm.encode_fragment, render_spaces


def _wpm_matcher(ids: dict[str, int]):
    """A factory for the C accelerator's WordPiece matcher, or None without it."""
    accel = accel_module()
    if accel is None or not hasattr(accel, "WordPiece"):
        return None

    def build():
        try:
            return accel.WordPiece(ids, "")
        except (ValueError, TypeError, UnicodeError):
            return None

    return build


def _ugm_viterbi(ugm: Any, v: dict[str, Any], kv: dict[str, Any]):
    accel = accel_module()
    if accel is None or not hasattr(accel, "Unigram"):
        return None

    def build():
        pieces = list(ugm.pieces.items())
        try:
            return accel.Unigram([t for t, _ in pieces], [i for _, (i, _) in pieces], [s for _, (_, s) in pieces],
                                 ugm.user_tokens, ugm.charsmap_blob, ugm.unk_id, ugm.unk_score,
                                 ugm.add_space_prefix, ugm.merge_spaces, ugm.space != " ")
        except (ValueError, TypeError, UnicodeError, OverflowError):
            return None

    return build
