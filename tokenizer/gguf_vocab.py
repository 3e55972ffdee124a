"""Build a :class:`Tokenizer` from GGUF metadata, following llama.cpp's loader.

What llama.cpp does on load, and so do we (``llama-vocab.cpp``, ``load``):

* token types become attributes; empty tokens are renamed ``[EMPTY_<id>]``;
  a text that appears twice maps to its last id;
* merges rank by first occurrence; each is split at its first space after
  position 0;
* default special ids per model type (SentencePiece: BOS 1, EOS 2, UNK 0;
  GPT-2 BPE: BOS = EOS = 11), overridden by ``tokenizer.ggml.*_token_id`` keys
  that are in range;
* end-of-turn / FIM tokens are found by their text when no key names them,
  and such tokens are forced to "control";
* control tokens whose text contains "unused" are also marked unused;
* end-of-generation ids = FIM pad/repo/sep + known end-of-turn texts + EOS,
  EOT, EOM, with the o200k "<|end|>" and Gemma 4 "</s>" exceptions;
* model-specific strip flags (Phi-3 specials eat the spaces after them).

Where llama.cpp iterates a hash map and keeps the first hit, we take the
lowest id, which is deterministic; it only matters for vocabularies holding
two alternative spellings of one FIM role.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from itertools import compress, repeat
from typing import Any

from tokenizer.core import (
    ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN, ATTR_UNUSED,
    ATTR_USER_DEFINED, TokenizerParts,
)
from tokenizer.errors import TokenizerError
from tokenizer.gguf import MAX_MERGES, MAX_VOCAB, GGUFFile

# GGUF token type -> llama.cpp attribute (LLAMA_TOKEN_TYPE_* -> LLAMA_TOKEN_ATTR_*)
_TYPE_ATTR = {1: ATTR_NORMAL, 2: ATTR_UNKNOWN, 3: ATTR_CONTROL, 4: ATTR_USER_DEFINED, 5: ATTR_UNUSED, 6: ATTR_BYTE}
MERGES = "tokenizer.ggml.merges"
#: the big arrays kept out of ``Tokenizer.metadata``
BIG_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
            "tokenizer.ggml.merges", "tokenizer.ggml.precompiled_charsmap")

_EOT_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
              "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
_FIM_TEXTS = {
    "eom": {"<|eom_id|>"},
    "fim_pre": {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"},
    "fim_suf": {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"},
    "fim_mid": {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"},
    "fim_pad": {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
    "fim_rep": {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
    "fim_sep": {"<|file_sep|>"},
}
_EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
              "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
              "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
              "<｜end▁of▁sentence｜>", "[e~["}
#: llama.cpp's default special ids per tokenizer model (before the GGUF keys override them)
_DEFAULT_IDS: dict[str, dict[str, int]] = {
    "llama": {"bos": 1, "eos": 2, "unk": 0},
    "gpt2": {"bos": 11, "eos": 11},
    "bert": {"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103},
    "t5": {"eos": 1, "unk": 2, "pad": 0},
}
#: special id role -> GGUF keys that set it (later keys win, like llama.cpp's list order)
_ID_KEYS = {
    "bos": ("tokenizer.ggml.bos_token_id",), "eos": ("tokenizer.ggml.eos_token_id",),
    "eot": ("tokenizer.ggml.eot_token_id",), "eom": ("tokenizer.ggml.eom_token_id",),
    "unk": ("tokenizer.ggml.unknown_token_id",), "sep": ("tokenizer.ggml.seperator_token_id",),
    "pad": ("tokenizer.ggml.padding_token_id",), "mask": ("tokenizer.ggml.mask_token_id",),
    "fim_pre": ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
    "fim_suf": ("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
    "fim_mid": ("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
    "fim_pad": ("tokenizer.ggml.fim_pad_token_id",), "fim_rep": ("tokenizer.ggml.fim_rep_token_id",),
    "fim_sep": ("tokenizer.ggml.fim_sep_token_id",),
}


def _array(kv: dict[str, Any], types: dict[str, str], key: str, want: tuple[str, ...], n: int | None) -> list | None:
    if key not in kv:
        return None
    if types.get(key) not in want:
        raise TokenizerError(f"{key} has type {types.get(key)}, expected {' or '.join(want)}")
    value = kv[key]
    if n is not None and len(value) < n:
        raise TokenizerError(f"{key} has {len(value)} entries for {n} tokens")
    return value


def read_vocab(g: GGUFFile) -> dict[str, Any]:
    """Tokens, attributes, scores, special ids and flags, as llama.cpp's loader leaves them; ``kv`` (the header's
    key/values with the vocabulary's arrays), ``raw`` (:class:`tokenizer.gguf.RawStrings` by key) and
    ``merges`` (the merge strings, None when they were left as bytes in ``raw``)."""
    # a header read for its facts left the arrays undecoded: decoded here, they are this vocabulary's and not
    # the header's (which lives as long as the chat); the merges stay bytes for the C merge table
    arrays = g.vocab_arrays(leave_raw=(MERGES,))
    kv, types = ({**g.kv, **arrays.kv} if arrays.kv else g.kv), g.types
    raw = {**g.raw, **arrays.raw}
    model = kv.get("tokenizer.ggml.model")
    if not isinstance(model, str):
        raise TokenizerError(f"{g.path.name}: no tokenizer.ggml.model key; this GGUF has no tokenizer")
    if model not in ("gpt2", "llama", "gemma4", "bert", "t5"):
        raise TokenizerError(f"{g.path.name}: tokenizer model {model!r} is not supported "
                             "(gpt2, llama, gemma4, bert, t5 are)")
    tokens = _array(kv, types, "tokenizer.ggml.tokens", ("array[string]",), None)
    if not tokens:
        raise TokenizerError(f"{g.path.name}: tokenizer.ggml.tokens is missing or empty")
    n = len(tokens)
    if n > MAX_VOCAB:
        raise TokenizerError(f"{g.path.name}: {n} tokens, over the limit of {MAX_VOCAB} (tokenizer.gguf)")
    merges = kv.get(MERGES)
    n_merges = len(merges) if isinstance(merges, list) else raw[MERGES].n_strings if MERGES in raw else None
    if n_merges is not None and n_merges > MAX_MERGES:
        raise TokenizerError(f"{g.path.name}: {n_merges} merges, over the limit of {MAX_MERGES} (tokenizer.gguf)")
    if "" in tokens:
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    scores = _array(kv, types, "tokenizer.ggml.scores", ("array[float32]", "array[int32]"), n)
    if scores is not None and model in ("llama", "t5") and not all(map(math.isfinite, scores)):
        # merge order and Viterbi compare scores: with NaN (or inf - inf) the order is undefined,
        # and llama.cpp's, ours and our C twin's would each differ (found by tests/fuzz)
        bad = next(i for i, x in enumerate(scores) if not math.isfinite(x))
        raise TokenizerError(f"{g.path.name}: tokenizer.ggml.scores[{bad}] is {scores[bad]}, not a finite number; "
                             "the file is damaged (re-convert the model)")
    toktypes = _array(kv, types, "tokenizer.ggml.token_type", ("array[int32]",), n)
    attrs = list(map(_TYPE_ATTR.get, toktypes[:n], repeat(0))) if toktypes is not None else [ATTR_NORMAL] * n
    ids = token_ids(tokens)
    pre = kv.get("tokenizer.ggml.pre") if model != "gemma4" else "gemma4"
    spm = model == "llama"
    special: dict[str, int | None] = dict.fromkeys(_ID_KEYS)
    special.update(_DEFAULT_IDS.get(model, {}))
    for role, keys in _ID_KEYS.items():
        known = special[role]
        if known is not None and known >= n:
            special[role] = None
        for key in keys:
            value = kv.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n:
                special[role] = value
    add_bos = spm or pre in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                             "lfm2", "jina-v5-nano", "tekken", "chameleon")
    add_bos = add_bos or model == "bert"
    add_eos, add_sep = model == "t5", model == "bert"
    if isinstance(kv.get("tokenizer.ggml.add_bos_token"), bool):
        add_bos = kv["tokenizer.ggml.add_bos_token"]
    if isinstance(kv.get("tokenizer.ggml.add_eos_token"), bool):
        add_eos = kv["tokenizer.ggml.add_eos_token"]
    if isinstance(kv.get("tokenizer.ggml.add_sep_token"), bool):
        add_sep = kv["tokenizer.ggml.add_sep_token"]
    if model == "gemma4":
        add_bos = True
    if pre in ("chatglm-bpe", "glm4", "glm5"):
        special["bos"] = None

    # roles found by text, forcing "control"
    by_role_text = {"eot": _EOT_TEXTS, **_FIM_TEXTS}
    for role, texts in by_role_text.items():
        if special[role] is None:
            hits = sorted(ids[t] for t in texts if t in ids)
            if hits:
                special[role] = hits[0]
                attrs[hits[0]] |= ATTR_CONTROL
    for i in ids_with(attrs, ATTR_CONTROL):
        if not attrs[i] & ATTR_UNUSED and "unused" in tokens[i]:
            attrs[i] |= ATTR_UNUSED
    eog = {tid for r in ("fim_pad", "fim_rep", "fim_sep") if (tid := special[r]) is not None}
    for tid in eog_by_text(ids):
        eog.add(tid)
        attrs[tid] |= ATTR_CONTROL
    for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
        if text in ids:
            attrs[ids[text]] = ATTR_USER_DEFINED
    eog.update(tid for r in ("eos", "eot", "eom") if (tid := special[r]) is not None)
    eog_texts = {tokens[t]: t for t in eog}
    if "<|end|>" in eog_texts and (
        ("<|return|>" in eog_texts and "<|call|>" in eog_texts)
        or ({"<|call|>", "<|calls|>"} & eog_texts.keys() and "<|flush|>" in eog_texts)
    ):
        eog.discard(eog_texts["<|end|>"])
        attrs[eog_texts["<|end|>"]] = ATTR_USER_DEFINED
    if "</s>" in eog_texts and ({"<|tool_response>", "<|plamo:eos|>"} & eog_texts.keys()):
        eog.discard(eog_texts["</s>"])
        attrs[eog_texts["</s>"]] = ATTR_NORMAL
    _model_strip_flags(kv, pre, tokens, ids, attrs)
    return {
        "kv": kv, "raw": raw, "merges": merges if isinstance(merges, list) else None,
        "model": model, "pre": pre, "tokens": tokens, "ids": ids, "attrs": attrs,
        "scores": scores, "special": special, "eog": frozenset(eog), "add_bos": add_bos,
        "add_eos": add_eos, "add_sep": add_sep,
        "add_space_prefix": kv.get("tokenizer.ggml.add_space_prefix", spm) is True,
        "remove_extra_whitespaces": kv.get("tokenizer.ggml.remove_extra_whitespaces") is True,
    }


def _model_strip_flags(kv: dict[str, Any], pre: Any, tokens: list[str], ids: dict[str, int], attrs: list[int]) -> None:
    """llama.cpp's per-model attribute patches (its "TODO: extract from GGUF")."""
    name = str(kv.get("general.name", "")).lower()
    arch = str(kv.get("general.architecture", ""))
    pre = str(pre or "")
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in ids:
            attrs[ids["<mask>"]] |= ATTR_LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for i in ids_with(attrs, ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN):
            attrs[i] |= ATTR_RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if text not in ids:
                raise TokenizerError(f"Phi-3 vocabulary lacks {text!r}")
            tid = ids[text]
            attrs[tid] = attrs[tid] | ATTR_RSTRIP if on else attrs[tid] & ~ATTR_RSTRIP
    elif "modern-bert" in name and "[MASK]" in ids:
        attrs[ids["[MASK]"]] |= ATTR_LSTRIP


class TokenIds(Mapping[str, int]):
    """text -> id over a token list (:func:`token_ids`), built when first asked.

    The byte-level BPE tokenizer with the C merge table looks a text up only on
    its rare fallbacks (a piece the C path leaves to Python, ``token_to_id``),
    and the dict is 9 MiB for Qwen's 151,936 tokens, int objects and all: most
    of what the chat's process held beyond a bare script (docs/engine.md)."""

    def __init__(self, tokens: list[str]) -> None:
        self._tokens = tokens
        self._built: dict[str, int] | None = None

    def built(self) -> dict[str, int]:
        if self._built is None:
            self._built = token_ids(self._tokens)
        return self._built

    def __getitem__(self, text: str) -> int:
        return self.built()[text]

    def get(self, text: str, default: Any = None) -> Any:
        return self.built().get(text, default)

    def __contains__(self, text: object) -> bool:
        return text in self.built()

    def __iter__(self) -> Iterator[str]:
        return iter(self.built())

    def __len__(self) -> int:
        return len(self.built())


def token_ids(tokens: list[str]) -> dict[str, int]:
    """text -> id, the last id winning for a text seen twice (the C accelerator sizes the dict once)."""
    from tokenizer.accel import accel_module

    build = getattr(accel_module(), "token_ids", None)
    return build(tokens) if build is not None else dict(zip(tokens, range(len(tokens))))


def eog_by_text(ids: dict[str, int]) -> set[int]:
    """Ids of the tokens llama.cpp treats as end-of-generation by their text alone."""
    return {ids[t] for t in _EOG_TEXTS if t in ids}


def ids_with(attrs: list[int], mask: int) -> list[int]:
    """Ids whose attributes share a bit with ``mask`` (C-speed scan)."""
    return list(compress(range(len(attrs)), map(mask.__and__, attrs)))


def parse_merges(merges: list[str]) -> dict[str, int]:
    """"left right" -> rank, the first occurrence winning.

    The merge strings are the keys as they are: BPE symbols never contain a
    space (it is ``Ġ`` or ``▁`` by then), so looking up ``left + " " + right``
    finds exactly the merge llama.cpp splits at its first space after
    position 0, and merges it could never apply stay unreachable here too.
    """
    n = len(merges)
    # dict() keeps the last duplicate, so feed it back to front
    return dict(zip(reversed(merges), range(n - 1, -1, -1)))


def metadata_without_arrays(kv: dict[str, Any]) -> dict[str, Any]:
    """GGUF key/values minus the big tokenizer arrays (what ``Tokenizer.metadata`` shows)."""
    return {k: v for k, v in kv.items() if k not in BIG_KEYS}


def special_id_names() -> tuple[str, ...]:
    return tuple(_ID_KEYS)


__all__ = ["read_vocab", "parse_merges", "ids_with", "metadata_without_arrays", "TokenizerParts", "special_id_names"]
