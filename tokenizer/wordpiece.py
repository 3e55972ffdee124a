"""WordPiece (BERT) as llama.cpp runs it: ``tokenizer.ggml.model = bert`` (``LLAMA_VOCAB_TYPE_WPM``).

llama.cpp's ``llm_tokenizer_wpm_session``, step by step:

1. pre-processing, one code point at a time (its own Unicode tables, see
   :mod:`tokenizer.llama_unicode`): with ``strip_accents`` each code point is
   replaced by the first code point of its NFD and marks are dropped;
   whitespace ends a word; NUL, U+FFFD and control characters vanish;
   punctuation, ASCII symbols and CJK ideographs become one-character words;
   everything else is lower-cased (with ``lowercase``) and appended.
2. each word gets a leading ``▁`` (the GGUF stores word starts as ``▁word``
   and continuations without BERT's ``##``), then greedy longest match from
   the left; if some position matches nothing, the whole word is ``[UNK]``.

Step 1 is a ``str.translate`` table filled lazily (one computation per
distinct character), step 2 is cached per word.  The C accelerator's
``WordPiece`` (``_accel_merge_free.c``) does step 2 over the same vocabulary.

Not handled: HF's ``max_input_chars_per_word`` (llama.cpp has none); the
tokenizer.json flavour lives in :mod:`tokenizer.hf_merge_free`.
"""
from __future__ import annotations

from typing import Any, Callable

from tokenizer import llama_unicode as lu

_SPACE = "\u2581"
#: the word cache is dropped when it grows past this many words
CACHE_LIMIT = 200_000


def is_chinese_char(cp: int) -> bool:
    """llama.cpp's ``is_chinese_char`` (with its 0x2B920 lower bound, copied from HF)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class LlamaWordChars(dict):
    """A ``str.translate`` table: code point -> its replacement in llama.cpp's WPM pre-processing.

    Whitespace becomes " ", dropped characters ``None``, one-character words
    " x ", others their (lower-cased) text; so ``text.translate(t).split()``
    gives llama.cpp's words.  Entries are computed on first sight.
    """

    def __init__(self, lowercase: bool, strip_accents: bool) -> None:
        super().__init__()
        self.lowercase = lowercase
        self.strip_accents = strip_accents

    def __missing__(self, cp: int) -> str | None:
        value = self.compute(cp)
        self[cp] = value
        return value

    def compute(self, cp: int) -> str | None:
        if self.strip_accents:
            cp = lu.nfd_first(cp)
        if lu.is_whitespace(cp):
            return " "
        f = lu.flags(cp)
        if cp == 0 or cp == 0xFFFD or f & lu.CONTROL or (self.strip_accents and f & lu.MARK):
            return None
        s = chr(lu.to_lower(cp) if self.lowercase else cp)
        if f & lu.PUNCTUATION or (cp < 0x7F and f & lu.SYMBOL) or is_chinese_char(cp):
            return f" {s} "
        return s


def greedy_longest(word: str, vocab: dict[str, int], max_len: int) -> list[int] | None:
    """Greedy longest-match-first over ``word``; None when some position matches no token."""
    out: list[int] = []
    i, n = 0, len(word)
    get = vocab.get
    while i < n:
        for j in range(min(n, i + max_len), i, -1):
            tid = get(word[i:j])
            if tid is not None:
                out.append(tid)
                i = j
                break
        else:
            return None
    return out


class LlamaWordPiece:
    """Text fragment -> ids, exactly as llama.cpp's WPM session."""

    def __init__(self, vocab: dict[str, int], unk_id: int | None, lowercase: bool, strip_accents: bool,
                 matcher: Callable[[], Any] | None = None) -> None:
        self.vocab = vocab
        self.unk = [unk_id] if unk_id is not None else [-1]
        self.chars = LlamaWordChars(lowercase, strip_accents)
        self.max_len = max(map(len, vocab), default=1)
        self.cache: dict[str, list[int]] = {}
        #: builds the C accelerator's longest-match (same ids) on first use
        self._matcher_factory = matcher
        self._matcher: Any = None

    def word_ids(self, word: str) -> list[int]:
        """Ids for one pre-processed word (uncached)."""
        if self._matcher is not None:
            ids = self._matcher.match(_SPACE + word)
        else:
            ids = greedy_longest(_SPACE + word, self.vocab, self.max_len)
        return ids if ids is not None else self.unk

    def encode_fragment(self, text: str) -> list[int]:
        words = text.translate(self.chars).split()
        cache = self.cache
        missing = set(words).difference(cache)
        if missing:
            if self._matcher_factory is not None:
                self._matcher, self._matcher_factory = self._matcher_factory(), None
            if len(cache) + len(missing) > CACHE_LIMIT:
                cache.clear()
            word_ids = self.word_ids
            fresh = {w: word_ids(w) for w in missing}
            cache.update(fresh)
            get = lambda w: fresh.get(w) or cache.get(w) or word_ids(w)  # noqa: E731 (cache may be cleared)
            out: list[int] = []
            for w in words:
                out.extend(get(w))
            return out
        out = []
        extend = out.extend
        try:
            for ids in map(cache.__getitem__, words):
                extend(ids)
        except KeyError:  # another thread cleared the cache: redo without it
            out = [t for w in words for t in self.word_ids(w)]
        return out
