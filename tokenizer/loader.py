"""``load_tokenizer(path)``: a GGUF file, a tokenizer.json, or a folder holding one.

For GGUF files this wires llama.cpp's pieces together: the vocabulary and
special-token rules from :mod:`tokenizer.gguf_vocab`, the pre-tokenizer named
by ``tokenizer.ggml.pre``, and the model (byte-level BPE, Gemma 4's
``▁``-BPE, or SentencePiece-style BPE).  tokenizer.json files go to
:mod:`tokenizer.hf_json`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from tokenizer.bpe import BPEModel
from tokenizer.bytelevel import from_byte_chars, to_byte_chars
from tokenizer.core import (
    ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN, ATTR_USER_DEFINED, PieceCache, Tokenizer,
    TokenizerParts,
)
from tokenizer.errors import TokenizerError
from tokenizer.gguf import RAW_KEYS, GGUFFile, read_gguf
from tokenizer.gguf_vocab import MERGES, TokenIds, ids_with, metadata_without_arrays, parse_merges, read_vocab
from tokenizer.merger import fragment_encoder, make_merger
from tokenizer.pretokenize import make_pretokenizer, resolve_pre
from tokenizer.specials import LlamaSpecialSplitter, SpecialToken
from tokenizer.spm import SPMModel

_SPACE = "\u2581"  # ▁, SentencePiece's visible space
#: what a vocabulary kind gives the Tokenizer: (encode one plain-text fragment, render one token's text as bytes)
_Parts = tuple[Callable[[str], list[int]], Callable[[str], bytes]]


def load_tokenizer(path: str | os.PathLike[str], *, gguf: GGUFFile | None = None) -> Tokenizer:
    """Load the tokenizer stored in ``path`` (.gguf, tokenizer.json, or a directory with one).

    ``gguf``: the file's header when the caller has already parsed it (so a
    chat reads its model's metadata once); it must have been read from ``path``.
    """
    p = Path(path)
    if gguf is not None:
        return load_gguf_tokenizer(p, gguf)
    if p.is_dir():
        if not (p / "tokenizer.json").is_file():
            raise TokenizerError(f"{p} is a directory without a tokenizer.json")
        from tokenizer.hf_json import load_tokenizer_json

        return load_tokenizer_json(p / "tokenizer.json")
    if not p.exists():
        raise TokenizerError(f"no such file: {p}")
    with open(p, "rb") as fh:
        head = fh.read(4)
    if head == b"GGUF":
        return load_gguf_tokenizer(p)
    if p.suffix == ".json" or head[:1] in (b"{", b" ", b"\n", b"\t", b"\r"):
        from tokenizer.hf_json import load_tokenizer_json

        return load_tokenizer_json(p)
    raise TokenizerError(f"{p} is neither a GGUF file nor a tokenizer.json")


def _special_splitter(tokens: list[str], attrs: list[int]) -> LlamaSpecialSplitter:
    specials = [
        SpecialToken(
            text=tokens[i], id=i, control=bool(attrs[i] & (ATTR_CONTROL | ATTR_UNKNOWN)),
            lstrip=bool(attrs[i] & ATTR_LSTRIP), rstrip=bool(attrs[i] & ATTR_RSTRIP),
        )
        for i in ids_with(attrs, ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)
    ]
    return LlamaSpecialSplitter(specials)


def load_gguf_tokenizer(path: str | os.PathLike[str], gguf: GGUFFile | None = None) -> Tokenizer:
    """A tokenizer that matches llama.cpp's for the GGUF file at ``path`` (its header: ``gguf``, if read)."""
    g = gguf if gguf is not None else read_gguf(path)
    v = read_vocab(g)
    tokens, attrs = v["tokens"], v["attrs"]
    model = v["model"]
    caches: list[PieceCache] = []
    if model == "llama":
        kind, pre, encode_fragment, render = "spm", None, *_spm_parts(v)
    elif model == "gpt2":
        pre = v["pre"] or None
        kind, encode_fragment, render = "bpe", *_bpe_parts(v, g.types, caches)
    elif model in ("bert", "t5"):
        from tokenizer.merge_free import gguf_parts

        kind, pre = ("wpm" if model == "bert" else "ugm"), None
        encode_fragment, render = gguf_parts(model, v, v["kv"], caches)
    else:  # gemma4: BPE over raw UTF-8 with ▁ for spaces
        kind, pre = "bpe", "gemma4"
        encode_fragment, render = _gemma4_parts(v, _merge_strings(v)(), caches)
    special = v["special"]
    template = g.kv.get("tokenizer.chat_template")
    return Tokenizer(
        TokenizerParts(
            kind=kind, pre=pre, tokens=tokens, attrs=attrs, render=render,
            encode_fragment=encode_fragment, splitter=_special_splitter(tokens, attrs),
            bos_id=special["bos"], eos_id=special["eos"], add_bos=v["add_bos"], eog_ids=v["eog"],
            add_eos=v["add_eos"], add_sep=v["add_sep"], sep_id=special["sep"],
            chat_template=template if isinstance(template, str) else None,
            metadata=metadata_without_arrays(g.kv), token_to_id=v["ids"], source=str(path), caches=caches,
        )
    )


def _merges(v: dict, merges: object) -> dict[str, int]:
    return parse_merges(_check_merges(merges))


def _check_merges(merges: object) -> list[str]:
    """``merges`` as the string list it must be (its first entry checked), else a TokenizerError."""
    if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges[:1]):
        raise TokenizerError("BPE vocabulary has no tokenizer.ggml.merges string array")
    return merges


def _merge_strings(v: dict) -> Callable[[], list[str]]:
    """The merge strings, decoded once when something asks (from ``v["raw"]`` when left as bytes); the function
    holds the merges alone, not the vocabulary's other arrays."""
    merges, stored = v["merges"], v["raw"].get(MERGES)
    decoded: list[list[str]] = [merges] if merges is not None else []

    def strings() -> list[str]:
        if not decoded:
            decoded.append(_check_merges(stored.decode(MERGES) if stored is not None else None))
        return decoded[0]

    return strings


def _bpe_parts(v: dict, types: dict[str, str], caches: list[PieceCache]) -> _Parts:
    """The byte-level BPE's parts; ``v["ids"]`` becomes a :class:`TokenIds` (the dict built when first asked)
    unless the C encoder looks whole pieces up in it (``ignore_merges``)."""
    pre_type, ignore_merges = resolve_pre(v["pre"])
    pretok = make_pretokenizer(pre_type)
    if not ignore_merges and pretok.c_mode is not None:
        v["ids"] = TokenIds(v["tokens"])  # read_vocab's dict goes: only fallbacks look texts up
    ids = v["ids"]

    def unknown(part: str) -> list[int]:
        # llama.cpp looks up each UTF-8 byte of the symbol as a one-byte token
        found = (ids.get(chr(b)) for b in part.encode("utf-8") if b < 0x80)
        return [t for t in found if t is not None]

    if types.get(MERGES) != "array[string]":
        raise TokenizerError("BPE vocabulary has no tokenizer.ggml.merges string array")
    if v["merges"] is not None:
        _check_merges(v["merges"])
    merges = _merge_strings(v)
    # the token and merge arrays' bytes, for the C table: held until it is built (BPEModel drops the factory)
    raw = {key: v["raw"][key] for key in RAW_KEYS if key in v["raw"]}
    # the rank dict serves only the pure-Python merge (no accelerator, or pieces it leaves to Python)
    bpe = BPEModel(ids, lambda: parse_merges(merges()), to_byte_chars, unknown, ignore_merges=ignore_merges,
                   merger=lambda: make_merger(merges, ids, first_wins=True, raw=raw))
    caches.append(bpe.cache)
    split, encode_pieces = pretok.split, bpe.encode_pieces
    # split and merged in C when the splitter is C's (ignore_merges: a piece that is a token is that token)
    whole = (fragment_encoder(bpe.built_merger, pretok.c_mode, caches, whole=ids if ignore_merges else None)
             if pretok.c_mode is not None else None)

    def encode_fragment(text: str) -> list[int]:
        if whole is not None:
            found = whole(text)
            if found is not None:
                return found
        return encode_pieces(split(text))

    def render(text: str) -> bytes:
        data = from_byte_chars(text)
        return data if data is not None else text.encode("utf-8")

    return encode_fragment, render


def _hex_byte_ids(ids: dict[str, int]):
    def unknown(part: str) -> list[int]:
        found = (ids.get(f"<0x{b:02X}>") for b in part.encode("utf-8", "surrogatepass"))
        return [t for t in found if t is not None]

    return unknown


def _gemma4_parts(v: dict, merges: object, caches: list[PieceCache]):
    ids = v["ids"]
    pretok = make_pretokenizer("gemma4")

    def newline_run(piece: str) -> list[int] | None:
        if piece and piece.strip("\n") == "":
            tid = ids.get(piece)
            return [tid] if tid is not None else None
        return None

    bpe = BPEModel(ids, _merges(v, merges), lambda s: s, _hex_byte_ids(ids), special_piece=newline_run)
    caches.append(bpe.cache)
    split, encode_pieces = pretok.split, bpe.encode_pieces

    def encode_fragment(text: str) -> list[int]:
        return encode_pieces(split(text.replace(" ", _SPACE)))

    return encode_fragment, _unescape


def _unescape(text: str) -> bytes:
    return text.replace(_SPACE, " ").encode("utf-8")


def _spm_parts(v: dict) -> _Parts:
    scores = v["scores"]
    if scores is None:
        scores = [0.0] * len(v["tokens"])
    spm = SPMModel(v["ids"], scores, tokens=v["tokens"])
    prefix = " " if v["add_space_prefix"] else ""

    def encode_fragment(text: str) -> list[int]:
        return spm.encode_fragment((prefix + text).replace(" ", _SPACE))

    return encode_fragment, _unescape
