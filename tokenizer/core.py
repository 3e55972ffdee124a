"""The :class:`Tokenizer` every loader returns: encode, decode, specials.

A loader (GGUF or tokenizer.json) supplies the vocabulary, llama.cpp-style
token attributes, a special-token splitter and a function that encodes one
plain-text fragment.  This module only glues them together and renders
tokens back to bytes; it knows nothing about file formats.

Rendering (``token_bytes``): normal tokens go through the vocabulary's own
byte scheme (GPT-2 byte map, or ``▁`` -> space), ``<0xXX>`` byte tokens are
one byte, and control / user-defined / unknown / unused tokens are their text.
``decode`` is the concatenation of those bytes, so it is lossless for ids
that ``encode`` produced.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, Callable, Mapping, Protocol, Sequence

from tokenizer.errors import TokenizerError
from tokenizer.stream import StreamDecoder

# llama.cpp's token attribute bits (llama.h, LLAMA_TOKEN_ATTR_*)
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
ATTR_SINGLE_WORD = 1 << 9
#: attributes that make a token "special" for ``skip_special`` and ``is_special``
SPECIAL_ATTRS = ATTR_CONTROL | ATTR_UNKNOWN | ATTR_UNUSED


class PieceCache(Protocol):
    """A model's per-piece cache: a dict, or the C accelerator's ``tokenizer._accel.PieceCache``."""

    def clear(self) -> None: ...


@dataclass
class TokenizerParts:
    """Everything a loader hands to :class:`Tokenizer`.

    ``render(id) -> bytes`` renders a *normal* token; ``encode_fragment``
    encodes one plain-text fragment; ``splitter.split(text, special, spans)``
    carves special tokens into a list of ``str | int`` fragments.
    ``space_prefix``: SentencePiece's leading space before each text fragment.
    """

    kind: str
    pre: str | None
    tokens: list[str]
    attrs: list[int]
    render: Callable[[str], bytes]
    encode_fragment: Callable[[str], list[int]]
    splitter: Any
    bos_id: int | None = None
    eos_id: int | None = None
    add_bos: bool = False
    #: llama.cpp's add_eos / add_sep flags and SEP id (what ``with_special`` appends)
    add_eos: bool = False
    add_sep: bool = False
    sep_id: int | None = None
    eog_ids: frozenset[int] = frozenset()
    chat_template: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    token_to_id: Mapping[str, int] | None = None
    source: str = ""
    #: the per-piece caches the model keeps (cleared by ``Tokenizer.clear_cache``)
    caches: list[PieceCache] = field(default_factory=list)


class Tokenizer:
    """Text <-> token ids for one model, matching llama.cpp / Hugging Face id for id."""

    def __init__(self, parts: TokenizerParts) -> None:
        self.kind = parts.kind
        self.pre = parts.pre
        self._tokens = parts.tokens
        self._attrs = parts.attrs
        self._render = parts.render
        self._encode_fragment = parts.encode_fragment
        self._splitter = parts.splitter
        self._ids = parts.token_to_id if parts.token_to_id is not None else dict(
            zip(parts.tokens, range(len(parts.tokens)))
        )
        self._bytes_cache: dict[int, bytes] = {}
        self.bos_id = parts.bos_id
        self.eos_id = parts.eos_id
        self.add_bos = parts.add_bos
        self.add_eos = parts.add_eos
        self.add_sep = parts.add_sep
        self.sep_id = parts.sep_id
        self.eog_ids = frozenset(parts.eog_ids)
        self.chat_template = parts.chat_template
        self.metadata = parts.metadata
        self.source = parts.source
        self._caches = parts.caches
        self.vocab_size = len(parts.tokens)
        self.bos_token = self._text_or_none(self.bos_id)
        self.eos_token = self._text_or_none(self.eos_id)
        mask = ATTR_CONTROL | ATTR_USER_DEFINED
        self.special_tokens: dict[str, int] = {
            parts.tokens[i]: i for i in compress(range(len(parts.attrs)), map(mask.__and__, parts.attrs))
        }

    def __repr__(self) -> str:
        return f"<Tokenizer {self.kind} pre={self.pre!r} vocab={self.vocab_size} from {self.source!r}>"

    def _text_or_none(self, tid: int | None) -> str | None:
        return self._tokens[tid] if tid is not None and 0 <= tid < len(self._tokens) else None

    # -- encoding ---------------------------------------------------------
    def encode(self, text: str, special: bool = False, literal_spans: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Token ids for ``text``; never adds BOS.

        ``special=True`` turns control-token text (``<|im_end|>``) into its id;
        user-defined tokens (``<think>``) are matched either way, as llama.cpp
        does.  Nothing inside ``literal_spans`` (char offsets) is ever carved.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"encode() takes text (str), not {type(text).__name__}")
        out: list[int] = []
        for frag in self._splitter.split(text, special, literal_spans):
            if type(frag) is int:
                out.append(frag)
            else:
                out.extend(self._encode_fragment(frag))
        return out

    def with_special(self, ids: list[int]) -> list[int]:
        """``ids`` framed as llama.cpp's ``add_special=True`` frames them.

        WordPiece (BERT): ``[CLS] ... [SEP]`` always; other models: BOS when
        ``add_bos`` and EOS when ``add_eos`` (T5 / nomic: ``<s> ... </s>``).
        """
        if self.kind == "wpm":
            return [t for t in (self.bos_id,) if t is not None] + list(ids) + (
                [self.sep_id] if self.sep_id is not None else [])
        head = [self.bos_id] if self.add_bos and self.bos_id is not None else []
        tail = [self.eos_id] if self.add_eos and self.eos_id is not None else []
        return head + list(ids) + tail

    def clear_cache(self) -> None:
        """Forget cached piece encodings (benchmarks use this to measure a cold start)."""
        for cache in self._caches:
            cache.clear()

    # -- decoding ---------------------------------------------------------
    def _check(self, tid: int) -> int:
        """``tid`` as a plain int, or a TokenizerError naming it (bools and floats are not ids)."""
        try:
            value = operator.index(tid) if not isinstance(tid, bool) else -1
        except TypeError:
            value = -1
        if not 0 <= value < len(self._tokens):
            raise TokenizerError(
                f"token id {tid!r} is out of range for this {len(self._tokens)}-token vocabulary"
            )
        return value

    def token_bytes(self, tid: int) -> bytes:
        """The exact bytes token ``tid`` stands for."""
        if type(tid) is not int:
            tid = self._check(tid)
        cached = self._bytes_cache.get(tid)
        if cached is not None:
            return cached
        self._check(tid)
        text, attr = self._tokens[tid], self._attrs[tid]
        if attr & ATTR_BYTE and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            data = bytes([int(text[3:5], 16)])
        elif attr & ATTR_NORMAL and not attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN):
            data = self._render(text)
        else:
            data = text.encode("utf-8", "surrogatepass")
        self._bytes_cache[tid] = data
        return data

    def decode_bytes(self, ids: Sequence[int], skip_special: bool = False) -> bytes:
        """The bytes of ``ids`` joined (special tokens dropped with ``skip_special``)."""
        tb = self.token_bytes
        if skip_special:
            attrs = self._attrs
            return b"".join(tb(i) for i in ids if not attrs[self._check(i)] & SPECIAL_ATTRS)
        return b"".join(map(tb, ids))

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text for ``ids``; invalid UTF-8 (a split character at the end) becomes U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", "replace")

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        """An incremental decoder: ``feed(id)`` returns only complete characters."""
        return StreamDecoder(self, skip_special=skip_special)

    # -- vocabulary -------------------------------------------------------
    def token_to_id(self, text: str) -> int | None:
        """The id of the vocabulary entry spelled exactly ``text`` (raw vocabulary form)."""
        return self._ids.get(text)

    def id_to_token(self, tid: int) -> str:
        """The raw vocabulary entry for ``tid`` (e.g. ``Ġhello`` in byte-level vocabularies)."""
        return self._tokens[self._check(tid)]

    def is_special(self, tid: int) -> bool:
        """True for control, unknown and unused tokens (what ``skip_special`` drops)."""
        return bool(self._attrs[self._check(tid)] & SPECIAL_ATTRS)

    def token_attr(self, tid: int) -> int:
        """llama.cpp's attribute bits for ``tid`` (``ATTR_*`` in this module)."""
        return self._attrs[self._check(tid)]
