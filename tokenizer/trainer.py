"""Learn a byte-level BPE vocabulary from a text corpus; save it as tokenizer.json.

The pipeline is GPT-2's: split the text with a pre-tokenizer regex, turn each
piece into UTF-8 bytes (ids 0-255 are the bytes themselves), then repeatedly
merge the most frequent adjacent pair of tokens into a new token.

Why it is fast enough in pure Python: identical pieces are counted once
(a word table weighted by frequency), and each merge touches only the words
that hold the pair (``where``), adjusting pair counts by the difference
between the word before and after the merge.  The best pair comes from a
heap with lazy invalidation: every count change pushes a fresh entry, and an
entry whose count no longer matches is dropped when it surfaces.  Nothing is
ever recounted in full.

Tie-breaks (so two runs give byte-identical files): the highest count wins;
among equal counts, the pair whose (left bytes, right bytes) is smallest in
byte order.  Pairs seen fewer than ``min_frequency`` times are never merged.
A merge whose result already exists as a token (``a+bc`` after ``ab+c``)
reuses that token's id, as Hugging Face's trainer does.

Output: a ``tokenizer.json`` with a BPE model, a ``Split`` (regex, Isolated)
plus ``ByteLevel`` pre-tokenizer and a ``ByteLevel`` decoder, the layout of
Qwen2's file; special tokens follow the learned vocabulary as added tokens.
:meth:`TrainedBPE.encode` is a small reference encoder with Hugging Face's
semantics (lowest merge rank first, leftmost on ties) used to check the file.

Not handled: normalization (NFC etc.), corpora larger than memory, training
in several processes, SentencePiece-style (``▁``) vocabularies.
"""
from __future__ import annotations

import heapq
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import regex

#: pre-tokenizer name -> regex, exactly as GPT-2's and Qwen2's tokenizer.json write it
PATTERNS: dict[str, str] = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

#: where a corpus may be cut without changing any pre-token, for both patterns:
#: after a lone "\n" between two non-space characters (no piece crosses it,
#: and no lookahead sees past it)
_SAFE_CUT = regex.compile(r"(?<=\S\n)(?=\S)")

#: Progress callback: (stage "pretokenize" | "merge", done, total)
Progress = Callable[[str, int, int], None]


def bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character map (byte value -> character).

    Printable Latin-1 bytes stand for themselves; the others (controls,
    space, soft hyphen) are shifted to U+0100 and up, in byte order, so every
    token is a visible string without whitespace.
    """
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS = bytes_to_unicode()


@dataclass(frozen=True)
class TrainerConfig:
    """What to learn.  ``vocab_size`` counts the 256 bytes, merges and specials."""

    vocab_size: int
    pattern: str = "qwen2"
    special_tokens: tuple[str, ...] = ()
    min_frequency: int = 2

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"unknown pattern {self.pattern!r}; choose one of {', '.join(PATTERNS)}")
        if len(set(self.special_tokens)) != len(self.special_tokens) or "" in self.special_tokens:
            raise ValueError("special tokens must be distinct non-empty strings")
        floor = 256 + len(self.special_tokens) + 1
        if self.vocab_size < floor:
            raise ValueError(f"vocab size {self.vocab_size} leaves no room for merges (minimum {floor})")
        if self.min_frequency < 1:
            raise ValueError("min frequency must be at least 1")


@dataclass
class TrainStats:
    """What training saw and how long it took (seconds)."""

    corpus_bytes: int = 0
    pretokens: int = 0
    unique_words: int = 0
    merges: int = 0
    pretokenize_s: float = 0.0
    merge_s: float = 0.0
    stopped_early: bool = False  # no pair left at min_frequency before vocab_size


def split_specials(text: str, specials: Iterable[str]) -> list[tuple[str, str | None]]:
    """Cut special-token literals out of text: [(segment, None) | (special, special)].

    Longest first at each position, as Hugging Face's added-token matcher does.
    """
    ordered = sorted(specials, key=lambda s: (-len(s), s))
    if not ordered:
        return [(text, None)] if text else []
    out: list[tuple[str, str | None]] = []
    start = 0
    for match in regex.finditer("|".join(regex.escape(s) for s in ordered), text):
        if match.start() > start:
            out.append((text[start : match.start()], None))
        out.append((match.group(), match.group()))
        start = match.end()
    if start < len(text):
        out.append((text[start:], None))
    return out


def pretokenize(text: str, compiled: regex.Pattern) -> list[str]:
    """Pieces of ``text`` as a ``Split(behavior=Isolated)`` pre-tokenizer gives them."""
    pieces = compiled.findall(text)
    if sum(map(len, pieces)) == len(text):
        return pieces
    pieces, start = [], 0  # some text matched no alternative: keep the gaps as pieces
    for match in compiled.finditer(text):
        if match.start() > start:
            pieces.append(text[start : match.start()])
        pieces.append(match.group())
        start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def safe_chunks(text: str, size: int = 1 << 20) -> list[str]:
    """Cut ``text`` into pieces of about ``size`` chars that pre-tokenize independently."""
    chunks, start = [], 0
    while len(text) - start > size:
        cut = _SAFE_CUT.search(text, start + size)
        if cut is None:
            break
        chunks.append(text[start : cut.start()])
        start = cut.start()
    chunks.append(text[start:])
    return chunks


class PairCounts:
    """Weighted pair counts over a word table, updated per merge, with a lazy max-heap."""

    def __init__(self, words: list[list[int]], freqs: list[int], token_bytes: list[bytes]) -> None:
        self.words = words  # word index -> its current token ids
        self.freqs = freqs  # word index -> how often the word occurs in the corpus
        self.token_bytes = token_bytes  # token id -> bytes (grows as merges add tokens)
        self.counts: dict[tuple[int, int], int] = {}  # pair -> weighted occurrences
        self.where: dict[tuple[int, int], set[int]] = {}  # pair -> word indices that may hold it
        for index, word in enumerate(words):
            freq = freqs[index]
            for pair in zip(word, word[1:]):
                self.counts[pair] = self.counts.get(pair, 0) + freq
                self.where.setdefault(pair, set()).add(index)
        # heap of (-count, left bytes, right bytes, left id, right id): the tie-break is in the key
        self.heap = [self._entry(pair, count) for pair, count in self.counts.items()]
        heapq.heapify(self.heap)

    def _entry(self, pair: tuple[int, int], count: int) -> tuple[int, bytes, bytes, int, int]:
        return (-count, self.token_bytes[pair[0]], self.token_bytes[pair[1]], pair[0], pair[1])

    def pop_best(self) -> tuple[tuple[int, int], int] | None:
        """The most frequent pair and its count, or None when no pair is left."""
        while self.heap:
            neg_count, _, _, left, right = heapq.heappop(self.heap)
            if self.counts.get((left, right), 0) == -neg_count:
                return (left, right), -neg_count
            # stale: the count changed since this entry was pushed (a newer entry exists)
        return None

    def merge(self, pair: tuple[int, int], new_id: int) -> None:
        """Replace every ``pair`` in every word holding it by ``new_id``; update the counts."""
        left, right = pair
        delta: dict[tuple[int, int], int] = {}  # pair -> change of its weighted count
        for index in self.where.pop(pair, ()):
            word = self.words[index]
            merged = _merge_word(word, left, right, new_id)
            if len(merged) == len(word):
                continue  # stale index: the pair left this word through an earlier merge
            freq = self.freqs[index]
            for old in zip(word, word[1:]):
                delta[old] = delta.get(old, 0) - freq
            for new in zip(merged, merged[1:]):
                delta[new] = delta.get(new, 0) + freq
                if new_id in new:  # only pairs with the new token are new to this word
                    self.where.setdefault(new, set()).add(index)
            self.words[index] = merged
        for changed, change in delta.items():
            count = self.counts.get(changed, 0) + change
            if count and change:
                self.counts[changed] = count
                heapq.heappush(self.heap, self._entry(changed, count))
            elif not count:
                self.counts.pop(changed, None)


def _merge_word(word: list[int], left: int, right: int, new_id: int) -> list[int]:
    """``word`` with each non-overlapping (left, right), scanned left to right, replaced."""
    out: list[int] = []
    i, n = 0, len(word)
    while i < n:
        if i + 1 < n and word[i] == left and word[i + 1] == right:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


@dataclass
class TrainedBPE:
    """A learned vocabulary: token bytes by id, merges by rank, specials after them."""

    token_bytes: list[bytes]  # id -> bytes, ids 0-255 are the single bytes
    merges: list[tuple[int, int]]  # rank -> (left id, right id)
    pattern: str  # a name in PATTERNS
    special_tokens: dict[str, int] = field(default_factory=dict)  # text -> id
    stats: TrainStats = field(default_factory=TrainStats)

    def __post_init__(self) -> None:
        ids = {tb: i for i, tb in enumerate(self.token_bytes)}
        # (left id, right id) -> (rank, merged id)
        self._ranks = {
            pair: (rank, ids[self.token_bytes[pair[0]] + self.token_bytes[pair[1]]])
            for rank, pair in enumerate(self.merges)
        }
        self._regex = regex.compile(PATTERNS[self.pattern])
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes) + len(self.special_tokens)

    def token_str(self, token_id: int) -> str:
        """The byte-level string tokenizer.json uses for a learned token."""
        return "".join(BYTE_CHARS[b] for b in self.token_bytes[token_id])

    def encode(self, text: str) -> list[int]:
        """Reference encode (specials carved out first), for checking the saved file."""
        ids: list[int] = []
        for segment, special in split_specials(text, self.special_tokens):
            if special is not None:
                ids.append(self.special_tokens[special])
                continue
            for piece in pretokenize(segment, self._regex):
                cached = self._cache.get(piece)
                if cached is None:
                    cached = self._cache[piece] = self._encode_piece(piece.encode("utf-8"))
                ids.extend(cached)
        return ids

    def _encode_piece(self, data: bytes) -> list[int]:
        """Merge the lowest-ranked adjacent pair, leftmost first, one at a time (quadratic; fine here)."""
        word = list(data)
        ranks = self._ranks
        while len(word) > 1:
            best = min(
                ((ranks[p][0], i) for i, p in enumerate(zip(word, word[1:])) if p in ranks),
                default=None,
            )
            if best is None:
                break
            i = best[1]
            word[i : i + 2] = [ranks[(word[i], word[i + 1])][1]]
        return word

    def decode(self, ids: Iterable[int]) -> str:
        names = {i: s.encode("utf-8") for s, i in self.special_tokens.items()}
        data = b"".join(names[i] if i in names else self.token_bytes[i] for i in ids)
        return data.decode("utf-8", errors="replace")

    def to_json(self) -> dict:
        """The Hugging Face ``tokenizer.json`` structure."""
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [
                {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
                for s, i in sorted(self.special_tokens.items(), key=lambda item: item[1])
            ],
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": PATTERNS[self.pattern]},
                     "behavior": "Isolated", "invert": False},
                    byte_level,
                ],
            },
            "post_processor": None,
            "decoder": byte_level,
            "model": {
                "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                "vocab": {self.token_str(i): i for i in range(len(self.token_bytes))},
                "merges": [[self.token_str(a), self.token_str(b)] for a, b in self.merges],
            },
        }

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` (directory created if needed); return its path.

        Written to a temporary name first, so an interrupted save never leaves half a file.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        target = path / "tokenizer.json"
        partial = path / "tokenizer.json.partial"
        partial.write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, target)
        return target


def count_words(texts: Iterable[str], config: TrainerConfig, progress: Progress | None = None) -> tuple[Counter, TrainStats]:
    """Pre-tokenize the corpus: piece -> occurrences (special-token literals left out)."""
    compiled = regex.compile(PATTERNS[config.pattern])
    counts: Counter = Counter()
    stats = TrainStats()
    chunks = [c for text in texts for c in safe_chunks(text)]
    total, done = sum(map(len, chunks)), 0
    if progress:
        progress("pretokenize", 0, total)
    for chunk in chunks:
        stats.corpus_bytes += len(chunk.encode("utf-8"))
        for segment, special in split_specials(chunk, config.special_tokens):
            if special is None:
                counts.update(pretokenize(segment, compiled))
        done += len(chunk)
        if progress:
            progress("pretokenize", done, total)
    stats.pretokens = sum(counts.values())
    stats.unique_words = len(counts)
    return counts, stats


def train_bpe(texts: Iterable[str], config: TrainerConfig, progress: Progress | None = None) -> TrainedBPE:
    """Learn merges from ``texts`` (documents) until ``config.vocab_size`` tokens exist."""
    started = time.perf_counter()
    counts, stats = count_words(texts, config, progress)
    stats.pretokenize_s = time.perf_counter() - started

    started = time.perf_counter()
    token_bytes = [bytes([b]) for b in range(256)]
    ids = {tb: i for i, tb in enumerate(token_bytes)}  # bytes -> id
    words = [list(piece.encode("utf-8")) for piece in counts]
    state = PairCounts(words, list(counts.values()), token_bytes)
    target = config.vocab_size - len(config.special_tokens)
    merges: list[tuple[int, int]] = []
    merged: set[tuple[int, int]] = set()
    while len(token_bytes) < target:
        best = state.pop_best()
        if best is None or best[1] < config.min_frequency:
            stats.stopped_early = True
            break
        pair = best[0]
        new_bytes = token_bytes[pair[0]] + token_bytes[pair[1]]
        new_id = ids.get(new_bytes)
        if new_id is None:
            new_id = ids[new_bytes] = len(token_bytes)
            token_bytes.append(new_bytes)
        if pair not in merged:  # a pair can only come back when a merge reused an id
            merged.add(pair)
            merges.append(pair)
        state.merge(pair, new_id)
        if progress:
            progress("merge", len(token_bytes) - 256, target - 256)
    stats.merges = len(merges)
    stats.merge_s = time.perf_counter() - started

    learned = {"".join(BYTE_CHARS[b] for b in tb) for tb in token_bytes}
    for special in config.special_tokens:
        if special in learned:
            raise ValueError(f"special token {special!r} is also a learned token; use a marker that "
                             "cannot occur in text, like <|endoftext|>")
    specials = {s: len(token_bytes) + i for i, s in enumerate(config.special_tokens)}
    return TrainedBPE(token_bytes, merges, config.pattern, specials, stats)
