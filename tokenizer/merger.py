"""The C accelerator's id-based BPE merger, built from a vocabulary's merges, and the
whole-fragment encoder that splits and merges in C around it.

Shared by the two BPE loaders (GGUF in :mod:`tokenizer.loader`, ``tokenizer.json`` in
:mod:`tokenizer.hf_json`), so it sits below both of them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from tokenizer.accel import accel_module, flag_table
from tokenizer.bytelevel import BYTE_TO_CHAR
from tokenizer.core import PieceCache


def make_merger(merges: object, ids: Mapping[str, int], first_wins: bool, raw: dict | None = None):
    """The C accelerator's id-based merger, or None (not built, or merges it cannot express).

    ``merges``: the merge strings, or a function that decodes them (a GGUF's
    merges may be held as their bytes only, :class:`tokenizer.gguf.RawStrings`).
    ``raw``: the GGUF's stored token and merge arrays (``GGUFFile.raw``); the
    table is then built from their bytes in C (about 20x faster than from the
    Python strings), falling back to the strings where the bytes cannot say
    the same (an empty token, which the vocabulary renames).
    """
    accel = accel_module()
    if accel is None:
        return None
    tokens_raw = (raw or {}).get("tokenizer.ggml.tokens")
    merges_raw = (raw or {}).get("tokenizer.ggml.merges")
    build = getattr(accel, "merger_from_gguf", None)
    if (build is not None and tokens_raw is not None and merges_raw is not None
            and (callable(merges) or isinstance(merges, list) and merges_raw[1] == len(merges))):
        try:
            return build(*tokens_raw, *merges_raw, BYTE_TO_CHAR, first_wins)
        except (ValueError, TypeError):
            # the string-based constructor decides, exactly as without the raw arrays
            return _merger_from_strings(accel, merges, ids, first_wins)
    return _merger_from_strings(accel, merges, ids, first_wins)


def _merger_from_strings(accel, merges: object, ids: Mapping[str, int], first_wins: bool):
    strings = merges() if callable(merges) else merges
    if not isinstance(strings, list):
        return None
    try:
        return accel.Merger(strings, ids if isinstance(ids, dict) else dict(ids), BYTE_TO_CHAR, first_wins)
    except (ValueError, TypeError):
        return None


def fragment_encoder(merger: Callable[[], Any], c_mode: int, caches: list[PieceCache], llama: bool = True,
                     whole: dict[str, int] | None = None) -> Callable[[str], list[int] | None] | None:
    """Split and merge a whole fragment in C (``tokenizer._accel.encode_text``), or None without the accelerator.

    ``merger`` returns the model's merger (built on first use); ``c_mode`` is
    the C splitter's mode and ``llama`` its classes (:func:`tokenizer.accel.flag_table`);
    ``whole``: the vocabulary when a piece that is a token is that token (``ignore_merges``).  The returned function gives the ids that splitting
    with ``tokenizer._accel.split`` and merging each piece with
    ``Merger.encode`` give, or None where that path leaves a piece to Python
    (the caller then encodes piece by piece).  Its piece cache, kept in C, is
    added to ``caches`` so that ``Tokenizer.clear_cache`` empties it.

    Why: per piece, a Python string, a set entry, a dict entry and a list
    extend cost about as much as merging it; on multilingual text (few
    repeated pieces) they were half of a cold encode.
    """
    accel = accel_module()
    if accel is None:
        return None
    cache = accel.PieceCache()
    caches.append(cache)
    encode_text, merger_type = accel.encode_text, accel.Merger

    def encode(text: str) -> list[int] | None:
        m = merger()
        if type(m) is not merger_type:  # the pure-Python IdMerger: merges C could not express
            return None
        return encode_text(m, text, c_mode, flag_table(llama), cache, whole)

    return encode
