"""tokenizer.json files with a ``WordPiece`` or ``Unigram`` model, as Hugging Face ``tokenizers`` runs them.

Pieces (each as the Rust crate does it, which is not always llama.cpp's way):

* ``BertNormalizer``: clean_text drops NUL, U+FFFD and "other" characters
  (Cc Cf Cs Co, not tab/CR/LF; unassigned ones stay, as in HF) and maps whitespace to a space;
  CJK ideographs get spaces around them; accents are stripped by real NFD
  minus non-spacing marks (Mn); lower-casing is per character (so no
  final-sigma rule, unlike ``str.lower``).
* ``BertPreTokenizer``: split at whitespace, each punctuation character
  (ASCII punctuation or ``\\p{P}``) its own piece.
* ``WordPiece``: greedy longest match with ``##`` continuations; a word
  longer than ``max_input_chars_per_word`` or with an unmatched position is
  ``[UNK]``.
* ``Metaspace`` (``prepend_scheme`` always/never, ``split``) and
  ``WhitespaceSplit`` / ``Whitespace`` pre-tokenizers.
* ``Unigram``: Viterbi over UTF-8 positions with every vocabulary piece
  (HF's trie holds them all), unknown characters at ``min_score - 10``
  fused into one piece, then ``byte_fallback`` to ``<0xXX>`` tokens.
* ``Replace`` normalizers (string or regex) besides NFC/NFD/NFKC/NFKD/Lowercase.

* ``Precompiled`` (T5, XLM-R, ...): the SentencePiece charsmap per grapheme
  cluster, as ``spm_precompiled`` does it.

Not supported (refused by name): Metaspace's ``prepend_scheme: first``,
``Split``/``ByteLevel`` pre-tokenizers with these models.
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any, Callable

import regex

from tokenizer.core import ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_USER_DEFINED, Tokenizer, TokenizerParts
from tokenizer.errors import TokenizerError
from tokenizer.gguf_vocab import eog_by_text
from tokenizer.hf_config import chat_template_of, post_processor_adds_bos, token_text
from tokenizer.specials import HFSpecialSplitter, SpecialToken

_SPACE = "\u2581"
#: Rust's ``char::is_whitespace`` (the Unicode White_Space property)
_WS = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_ASCII_PUNCT = r"!-/:-@\[-`{-~"
_BERT_SPLIT = regex.compile(f"[{_ASCII_PUNCT}\\p{{P}}]|[^{_WS}{_ASCII_PUNCT}\\p{{P}}]+")
_WS_RUN = regex.compile(f"[^{_WS}]+")
_WHITESPACE_PRE = regex.compile(r"\w+|[^\w\s]+")
_CJK = "\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f" \
       "\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f"
_CJK_RX = regex.compile(f"([{_CJK}])")
# NUL, U+FFFD and "other" minus tab/CR/LF; HF's tables leave unassigned code points (Cn) alone
_OTHER_RX = regex.compile(r"[\x00\ufffd]|[[\p{Cc}\p{Cf}\p{Co}\p{Cs}]--[\t\n\r]]", regex.V1)
_WS_RX = regex.compile(f"[{_WS}]")
_MN_RX = regex.compile(r"\p{Mn}")


def _lower_per_char(text: str) -> str:
    """Rust's per-character ``to_lowercase``: like ``str.lower`` but Σ is always σ."""
    return text.lower() if "\u03a3" not in text else "".join(c.lower() for c in text)


def bert_normalizer(spec: dict) -> Callable[[str], str]:
    clean, chinese = spec.get("clean_text", True), spec.get("handle_chinese_chars", True)
    lowercase = spec.get("lowercase", True)
    strip = spec.get("strip_accents")
    strip = lowercase if strip is None else strip

    def run(s: str) -> str:
        if clean:
            s = _WS_RX.sub(" ", _OTHER_RX.sub("", s))
        if chinese:
            s = _CJK_RX.sub(r" \1 ", s)
        if strip:
            s = _MN_RX.sub("", unicodedata.normalize("NFD", s))
        if lowercase:
            s = _lower_per_char(s)
        return s

    return run


def replace_normalizer(spec: dict) -> Callable[[str], str]:
    pattern, content = spec.get("pattern") or {}, spec.get("content", "")
    if not isinstance(content, str):
        raise TokenizerError("tokenizer.json Replace needs a string content")
    if "String" in pattern and isinstance(pattern["String"], str):
        old = pattern["String"]
        return lambda s: s.replace(old, content)
    if "Regex" in pattern and isinstance(pattern["Regex"], str):
        try:
            rx = regex.compile(pattern["Regex"])
        except regex.error as exc:
            raise TokenizerError(f"tokenizer.json Replace regex does not compile: {exc}") from None
        return lambda s: rx.sub(lambda m: content, s)
    raise TokenizerError("tokenizer.json Replace without a String or Regex pattern")


_GRAPHEME = regex.compile(r"\X")


def precompiled_normalizer(spec: dict) -> Callable[[str], str]:
    """HF's ``Precompiled``: SentencePiece's charsmap applied per grapheme cluster.

    A cluster shorter than 6 UTF-8 bytes is replaced whole when some key
    starts it (the shortest such key's replacement, as ``spm_precompiled``
    does, even if that key covers only part of the cluster); otherwise each
    character is looked up on its own.
    """
    import base64
    import binascii

    from tokenizer.unigram import CharsMap

    try:
        blob = base64.b64decode(spec.get("precompiled_charsmap") or "", validate=True)
        charsmap = CharsMap(blob) if blob else None
    except (binascii.Error, ValueError) as exc:
        raise TokenizerError(f"tokenizer.json Precompiled charsmap is unreadable: {exc}") from None
    if charsmap is None:
        return lambda s: s
    cache: dict[str, str] = {}

    def cluster(g: str) -> str:
        out = cache.get(g)
        if out is None:
            whole = charsmap.shortest_prefix(g) if len(g.encode("utf-8", "surrogatepass")) < 6 else None
            if whole is not None:
                out = whole
            else:
                parts = []
                for ch in g:
                    r = charsmap.shortest_prefix(ch)
                    parts.append(ch if r is None else r)
                out = "".join(parts)
            if len(cache) < 100_000:
                cache[g] = out
        return out

    def run(s: str) -> str:
        try:
            return "".join(map(cluster, _GRAPHEME.findall(s)))
        except ValueError as exc:
            raise TokenizerError(f"this tokenizer.json's precompiled_charsmap is damaged ({exc})") from None

    return run


# -- pre-tokenizers ------------------------------------------------------------------

def _metaspace(spec: dict) -> Callable[[list[tuple[str, bool]]], list[tuple[str, bool]]]:
    rep = spec.get("replacement", _SPACE)
    scheme = spec.get("prepend_scheme")
    if scheme is None:  # older files: add_prefix_space
        scheme = "always" if spec.get("add_prefix_space", True) else "never"
    split = spec.get("split", True)
    if scheme not in ("always", "never"):
        # "first" depends on where a fragment sits in the whole text, which fragments do not know
        raise TokenizerError(f"tokenizer.json Metaspace prepend_scheme {scheme!r} is not supported")
    splitter = re.compile(f"(?={re.escape(rep)})")

    def step(pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        for text, first in pieces:
            text = text.replace(" ", rep)
            if scheme == "always" and not text.startswith(rep):
                text = rep + text
            if split:
                out.extend((p, False) for p in splitter.split(text) if p)
            else:
                out.append((text, False))
        return out

    return step


def _findall(rx: regex.Pattern[str]):
    return lambda pieces: [(p, False) for text, _ in pieces for p in rx.findall(text)]


def pre_tokenizer(spec: Any) -> Callable[[list[tuple[str, bool]]], list[tuple[str, bool]]]:
    """Pieces as (text, starts the original text) pairs -> pieces."""
    if spec is None:
        return lambda pieces: pieces
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [pre_tokenizer(s) for s in spec.get("pretokenizers", [])]

        def run(pieces):
            for step in steps:
                pieces = step(pieces)
            return pieces

        return run
    if kind == "BertPreTokenizer":
        return _findall(_BERT_SPLIT)
    if kind == "WhitespaceSplit":
        return _findall(_WS_RUN)
    if kind == "Whitespace":
        return _findall(_WHITESPACE_PRE)
    if kind == "Metaspace":
        return _metaspace(spec)
    raise TokenizerError(f"tokenizer.json pre-tokenizer {kind!r} is not supported with this model")


# -- models -----------------------------------------------------------------------------

#: distinct pieces a model keeps encoded before its cache starts over
PIECE_CACHE_LIMIT = 200_000


def _cached_ids(cache: dict[str, list[int]], pieces: list[str], ids_of: Callable[[str], list[int]]) -> list[int]:
    """The ids of ``pieces``, each distinct piece encoded once by ``ids_of`` (text repeats its words)."""
    if len(cache) > PIECE_CACHE_LIMIT:
        cache.clear()
    out: list[int] = []
    for p in pieces:
        ids = cache.get(p)
        if ids is None:
            ids = cache[p] = ids_of(p)
        out.extend(ids)
    return out


class HFWordPiece:
    """HF ``WordPiece``: ``vocab`` text -> id, ``##`` continuations, per-word cache."""

    def __init__(self, vocab: dict[str, int], unk_id: int, prefix: str, max_chars: int) -> None:
        self.vocab, self.unk, self.prefix, self.max_chars = vocab, [unk_id], prefix, max_chars
        self.max_len = max(map(len, vocab), default=1)
        self.cache: dict[str, list[int]] = {}
        self._matcher: Any = _c_wordpiece(vocab, prefix)

    def word_ids(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return self.unk
        if self._matcher is not None:
            return self._matcher.match(word) or self.unk
        get, prefix, out = self.vocab.get, self.prefix, []
        i, n = 0, len(word)
        while i < n:
            for j in range(min(n, i + self.max_len), i, -1):
                tid = get(word[i:j] if i == 0 else prefix + word[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                return self.unk
        return out

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        return _cached_ids(self.cache, pieces, self.word_ids)


def _c_wordpiece(vocab: dict[str, int], prefix: str) -> Any:
    """The C accelerator's greedy matcher (same ids), or None without it."""
    from tokenizer.accel import accel_module

    accel = accel_module()
    if accel is None or not hasattr(accel, "WordPiece"):
        return None
    try:
        return accel.WordPiece(vocab, prefix)
    except (ValueError, TypeError, UnicodeError, OverflowError):
        return None


class HFUnigram:
    """HF ``Unigram``: Viterbi over UTF-8 byte positions, unknowns fused, then byte fallback."""

    def __init__(self, pieces: list[tuple[str, float]], unk_id: int | None, byte_fallback: bool) -> None:
        self.ids = {text: i for i, (text, _) in enumerate(pieces)}
        self.scores = [score for _, score in pieces]
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.unk_score = min(self.scores, default=0.0) - 10.0
        self.max_len = max((len(t) for t, _ in pieces), default=1)
        self.cache: dict[str, list[int]] = {}
        self._c: Any = None
        self._c_pending = True

    def _c_viterbi(self) -> Any:
        """The C accelerator's Unigram with no normalization: the same Viterbi over all pieces.

        HF fuses unknown characters into one string and looks that up (then byte fallback),
        so a C result holding the unknown id is recomputed here.
        """
        from tokenizer.accel import accel_module

        accel = accel_module()
        if accel is None or not hasattr(accel, "Unigram"):
            return None
        items = list(self.ids.items())
        try:
            return accel.Unigram([t for t, _ in items], [i for _, i in items], [self.scores[i] for _, i in items],
                                 [], None, -1 if self.unk_id is None else self.unk_id, self.unk_score,
                                 False, False, False)
        except (ValueError, TypeError, UnicodeError, OverflowError):
            return None

    def pieces_of(self, s: str) -> list[str]:
        """The best segmentation of ``s`` into strings (unknown runs fused)."""
        n = len(s)
        get, scores, max_len = self.ids.get, self.scores, self.max_len
        best = [0.0] * (n + 1)
        start = [-1] * (n + 1)
        unk = [False] * (n + 1)
        start[0] = 0
        for i in range(n):
            here = best[i]
            single = False
            for j in range(i + 1, min(n, i + max_len) + 1):
                tid = get(s[i:j])
                if tid is None:
                    continue
                if j == i + 1:
                    single = True
                cand = scores[tid] + here
                if start[j] < 0 or cand > best[j]:
                    best[j], start[j], unk[j] = cand, i, tid == self.unk_id
            if not single:
                if self.unk_id is None:
                    raise TokenizerError("this Unigram tokenizer.json has no unk_id for unknown characters")
                cand = self.unk_score + here
                if start[i + 1] < 0 or cand > best[i + 1]:
                    best[i + 1], start[i + 1], unk[i + 1] = cand, i, True
        out: list[str] = []
        fused: list[str] = []
        end = n
        while end > 0:
            i = start[end]
            if unk[end]:
                fused.append(s[i:end])
            else:
                if fused:
                    out.append("".join(reversed(fused)))
                    fused = []
                out.append(s[i:end])
            end = i
        if fused:
            out.append("".join(reversed(fused)))
        out.reverse()
        return out

    def piece_ids(self, piece: str) -> list[int]:
        if self._c_pending:
            self._c, self._c_pending = self._c_viterbi(), False
        if self._c is not None and self.unk_id is not None:
            ids = self._c.encode(piece)
            if ids is not None and self.unk_id not in ids:
                return ids
        out: list[int] = []
        for text in self.pieces_of(piece):
            tid = self.ids.get(text)
            if tid is not None:
                out.append(tid)
                continue
            if self.byte_fallback:
                found = [self.ids.get(f"<0x{b:02X}>") for b in text.encode("utf-8", "surrogatepass")]
                if all(t is not None for t in found):
                    out.extend(found)  # type: ignore[arg-type]
                    continue
            out.append(self.unk_id)  # type: ignore[arg-type]
        return out

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        return _cached_ids(self.cache, pieces, self._ids_of_piece)

    def _ids_of_piece(self, piece: str) -> list[int]:
        return self.piece_ids(piece) if piece else []


def _wordpiece_render(prefix: str):
    def render(text: str) -> bytes:
        return (text[len(prefix):] if text.startswith(prefix) else " " + text).encode("utf-8")

    return render


def _unigram_render(text: str) -> bytes:
    return text.replace(_SPACE, " ").encode("utf-8")


def load_merge_free(path: Path, data: dict, normalize: Callable[[str], str] | None, config: dict) -> Tokenizer:
    """A :class:`Tokenizer` for a WordPiece or Unigram ``tokenizer.json`` (``data`` already parsed)."""
    model = data["model"]
    kind = model.get("type")
    added = data.get("added_tokens") or []
    if not isinstance(added, list) or not all(
        isinstance(a, dict) and isinstance(a.get("id"), int) and a["id"] >= 0 and isinstance(a.get("content"), str)
        and a["content"] for a in added
    ):
        raise TokenizerError(f"{path}: added_tokens entries need an integer id and non-empty content")
    if kind == "WordPiece":
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not vocab or not all(
            isinstance(k, str) and isinstance(v, int) and 0 <= v < 4 * len(vocab) + 1024 for k, v in vocab.items()
        ):
            raise TokenizerError(f"{path}: WordPiece vocab must map strings to integer ids and not be empty")
        unk_text = model.get("unk_token", "[UNK]")
        if unk_text not in vocab:
            raise TokenizerError(f"{path}: WordPiece unk_token {unk_text!r} is not in the vocabulary")
        prefix = model.get("continuing_subword_prefix") or "##"
        algo: Any = HFWordPiece(vocab, vocab[unk_text], prefix, int(model.get("max_input_chars_per_word", 100)))
        ids = dict(vocab)
        render: Callable[[str], bytes] = _wordpiece_render(prefix)
        size = max(vocab.values()) + 1
    else:
        raw = model.get("vocab")
        if not isinstance(raw, list) or not raw or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (int, float))
            for p in raw
        ):
            raise TokenizerError(f"{path}: Unigram vocab must be a non-empty list of [piece, score] pairs")
        unk_id = model.get("unk_id")
        if unk_id is not None and not (isinstance(unk_id, int) and 0 <= unk_id < len(raw)):
            raise TokenizerError(f"{path}: Unigram unk_id {unk_id!r} is out of range")
        algo = HFUnigram([(p[0], float(p[1])) for p in raw], unk_id, bool(model.get("byte_fallback")))
        ids = dict(algo.ids)
        render = _unigram_render
        size = len(raw)
    size = max([size, *(a["id"] + 1 for a in added)])
    if size > 4 * (len(ids) + len(added)) + 1024:
        raise TokenizerError(f"{path}: token ids run far beyond the tokens listed")
    tokens = [f"[EMPTY_{i}]" for i in range(size)]
    for text, tid in ids.items():
        tokens[tid] = text
    attrs = [ATTR_NORMAL] * size
    if kind == "Unigram" and model.get("byte_fallback"):
        for b in range(256):
            tid = ids.get(f"<0x{b:02X}>")
            if tid is not None:
                attrs[tid] = ATTR_BYTE
    specials = []
    for a in added:
        tid, text = a["id"], a["content"]
        tokens[tid] = text
        ids[text] = tid
        attrs[tid] = ATTR_CONTROL if a.get("special") else ATTR_USER_DEFINED
        specials.append(SpecialToken(text, tid, control=bool(a.get("special")), lstrip=bool(a.get("lstrip")),
                                     rstrip=bool(a.get("rstrip")), single_word=bool(a.get("single_word"))))
    pre = pre_tokenizer(data.get("pre_tokenizer"))
    encode_pieces = algo.encode_pieces

    def encode_fragment(text: str) -> list[int]:
        if normalize is not None:
            text = normalize(text)
        if not text:
            return []
        return encode_pieces([p for p, _ in pre([(text, True)])])

    bos_text = token_text(config.get("bos_token") or config.get("cls_token"))
    eos_text = token_text(config.get("eos_token") or config.get("sep_token"))
    post = data.get("post_processor")
    single = (post or {}).get("single") if isinstance(post, dict) else None
    if isinstance(single, list) and single:
        first, last = single[0], single[-1]
        bos_text = bos_text or (first.get("SpecialToken") or {}).get("id")
        eos_text = eos_text or (last.get("SpecialToken") or {}).get("id")
    bos_id = ids.get(bos_text) if bos_text else None
    eos_id = ids.get(eos_text) if eos_text else None
    add_bos = config.get("add_bos_token")
    if not isinstance(add_bos, bool):
        add_bos = post_processor_adds_bos(post, bos_text)
    eog = eog_by_text({a["content"]: a["id"] for a in added})
    if eos_id is not None:
        eog.add(eos_id)
    splitter = HFSpecialSplitter(specials)
    return Tokenizer(
        TokenizerParts(
            kind="wordpiece" if kind == "WordPiece" else "unigram", pre=None, tokens=tokens, attrs=attrs,
            render=render, encode_fragment=encode_fragment, splitter=splitter,
            bos_id=bos_id, eos_id=eos_id, add_bos=add_bos,
            add_eos=bool(isinstance(single, list) and single and eos_text
                         and (single[-1].get("SpecialToken") or {}).get("id") == eos_text),
            eog_ids=frozenset(eog), chat_template=chat_template_of(config.get("chat_template")),
            metadata={}, token_to_id=ids, source=str(path), caches=[algo.cache],
        )
    )
