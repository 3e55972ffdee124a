"""The C accelerator's id-based BPE merger, built from a vocabulary's merges.

Shared by the two BPE loaders (GGUF in :mod:`tokenizer.loader`, ``tokenizer.json`` in
:mod:`tokenizer.hf_json`), so it sits below both of them.
"""
from __future__ import annotations

from tokenizer.accel import accel_module
from tokenizer.bytelevel import BYTE_TO_CHAR


def make_merger(merges: object, ids: dict[str, int], first_wins: bool, raw: dict | None = None):
    """The C accelerator's id-based merger, or None (not built, or merges it cannot express).

    ``raw``: the GGUF's stored token and merge arrays (``GGUFFile.raw``); the
    table is then built from their bytes in C (about 20x faster than from the
    Python strings), falling back to the strings where the bytes cannot say
    the same (an empty token, which the vocabulary renames).
    """
    accel = accel_module()
    if accel is None or not isinstance(merges, list):
        return None
    tokens_raw = (raw or {}).get("tokenizer.ggml.tokens")
    merges_raw = (raw or {}).get("tokenizer.ggml.merges")
    build = getattr(accel, "merger_from_gguf", None)
    if build is not None and tokens_raw is not None and merges_raw is not None and merges_raw[1] == len(merges):
        try:
            return build(*tokens_raw, *merges_raw, BYTE_TO_CHAR, first_wins)
        except (ValueError, TypeError):
            # the string-based constructor decides, exactly as without the raw arrays
            return _merger_from_strings(accel, merges, ids, first_wins)
    return _merger_from_strings(accel, merges, ids, first_wins)


def _merger_from_strings(accel, merges: list, ids: dict[str, int], first_wins: bool):
    try:
        return accel.Merger(merges, ids, BYTE_TO_CHAR, first_wins)
    except (ValueError, TypeError):
        return None
