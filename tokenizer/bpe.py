"""Rank-based BPE merging for one pre-tokenized piece, with a per-piece cache.

The rule (llama.cpp's and Hugging Face's alike): among all adjacent symbol
pairs that have a merge rule, apply the one with the lowest rank; on ties
the leftmost; repeat until no pair has a rule.  Symbols start as single
characters of the (byte-level) piece.

Two implementations of that one rule:

* ``_merge_short``: a list of pair ranks scanned with C-level ``min`` and
  ``index``; cheapest for the short pieces that make up real text.
* ``_merge_long``: a heap over a linked list, O(n log n), so a 10,000-char
  piece ("a" * 10000, a base64 blob) stays fast.

Pieces are cached (piece -> ids), which is what makes warm encoding cheap.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable

#: pieces longer than this (in symbols) use the heap merge
LONG_PIECE = 64
#: the cache is dropped when it grows past this many pieces
CACHE_LIMIT = 200_000
_NO_RANK = 1 << 62


class BPEModel:
    """Merges pieces with a rank table and maps the resulting symbols to ids.

    ``ranks`` maps "left right" -> rank (symbols never hold a space), or is a
    function that builds that dict on first use (only the pure-Python merge
    needs it; the C merger has its own table); ``vocab`` maps symbol text -> id.
    ``prepare`` turns a raw piece into the symbol string BPE works on (the
    GPT-2 byte map, or identity).  ``unknown`` handles a final symbol that is
    not in the vocabulary (llama.cpp and HF differ, so the loader decides).
    ``ignore_merges``: a piece that is itself a token is emitted whole.
    """

    def __init__(
        self,
        vocab: dict[str, int],
        ranks: dict[str, int] | Callable[[], dict[str, int]],
        prepare: Callable[[str], str],
        unknown: Callable[[str], list[int]],
        ignore_merges: bool = False,
        special_piece: Callable[[str], list[int] | None] | None = None,
        merger: Callable[[], Any] | None = None,
    ) -> None:
        self.vocab = vocab
        self._ranks = ranks
        self.prepare = prepare
        self.unknown = unknown
        self.ignore_merges = ignore_merges
        self.special_piece = special_piece
        #: builds the C accelerator's Merger (same rule on token ids) on first use; without it,
        #: the pure-Python :class:`tokenizer.bpe_ids.IdMerger` (same rule, integer pairs)
        self._merger_factory: Callable[[], Any] | None = merger if merger is not None else (lambda: None)
        if special_piece is not None:
            self._merger_factory = None  # Gemma 4's newline runs need the string path
        self.merger: Any = None
        self.cache: dict[str, list[int]] = {}

    @property
    def ranks(self) -> dict[str, int]:
        """"left right" -> rank, built on first use when it was given as a function."""
        ranks = self._ranks
        if callable(ranks):
            ranks = self._ranks = ranks()
        return ranks

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """Ids for a list of pieces, in order (the hot path of ``Tokenizer.encode``).

        Safe to call from several threads: another thread may clear the
        shared cache at any moment, so new pieces are also kept locally.
        """
        cache = self.cache
        missing = set(pieces).difference(cache)
        fresh: dict[str, list[int]] = {}
        if missing:
            self.built_merger()
            piece_ids = self.piece_ids
            fresh = {piece: piece_ids(piece) for piece in missing}
            if len(cache) + len(fresh) > CACHE_LIMIT:
                cache.clear()
            cache.update(fresh)
        out: list[int] = []
        extend = out.extend
        try:
            for ids in map(cache.__getitem__, pieces):
                extend(ids)
        except KeyError:  # the cache was cleared under us: redo this call without it
            out = []
            for piece in pieces:
                known = fresh.get(piece)
                out.extend(known if known is not None else self.piece_ids(piece))
        return out

    def built_merger(self) -> Any:
        """The merger on token ids (the C one, else :class:`tokenizer.bpe_ids.IdMerger`, else None).

        Built on first use, not at load: ``tokchat info`` never pays for it.
        """
        if self._merger_factory is not None:
            self.merger, self._merger_factory = self._merger_factory() or self._id_merger(), None
        return self.merger

    def _id_merger(self) -> Any:
        from tokenizer.bpe_ids import IdMerger

        try:
            return IdMerger(self.vocab, self.ranks, self.prepare, self.unknown)
        except ValueError:
            return None

    def piece_ids(self, piece: str) -> list[int]:
        """Ids for one piece, uncached."""
        merger = self.merger
        if merger is not None and not self.ignore_merges and self.special_piece is None:
            ids = merger.encode(piece)
            if ids is not None:
                return ids
        symbols = self.prepare(piece)
        vocab = self.vocab
        if self.special_piece is not None:
            ids = self.special_piece(symbols)
            if ids is not None:
                return ids
        if self.ignore_merges:
            whole = vocab.get(symbols)
            if whole is not None:
                return [whole]
            if merger is not None:
                ids = merger.encode(piece)
                if ids is not None:
                    return ids
        if len(symbols) > LONG_PIECE:
            parts = _merge_long(symbols, self.ranks)
        else:
            parts = _merge_short(symbols, self.ranks)
        out: list[int] = []
        for part in parts:
            tid = vocab.get(part)
            if tid is None:
                out.extend(self.unknown(part))
            else:
                out.append(tid)
        return out


def _merge_short(symbols: str, ranks: dict[str, int]) -> list[str]:
    parts = list(symbols)
    if len(parts) < 2:
        return parts
    get = ranks.get
    # pair_ranks[i] is the rank of (parts[i], parts[i + 1])
    pair_ranks = [get(a + " " + b, _NO_RANK) for a, b in zip(parts, parts[1:])]
    while True:
        best = min(pair_ranks)
        if best == _NO_RANK:
            return parts
        i = pair_ranks.index(best)  # leftmost among equal ranks
        merged = parts[i] + parts[i + 1]
        parts[i : i + 2] = [merged]
        del pair_ranks[i]
        if i:
            pair_ranks[i - 1] = get(parts[i - 1] + " " + merged, _NO_RANK)
        if i < len(pair_ranks):
            pair_ranks[i] = get(merged + " " + parts[i + 1], _NO_RANK)
        if not pair_ranks:
            return parts


def _merge_long(symbols: str, ranks: dict[str, int]) -> list[str]:
    """Same rule as ``_merge_short`` on a linked list with a lazy-deletion heap."""
    text = list(symbols)
    n = len(text)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    get = ranks.get
    # heap entries: (rank, left index, left text, right text); stale when texts changed
    heap = []
    for i in range(n - 1):
        r = get(text[i] + " " + text[i + 1])
        if r is not None:
            heap.append((r, i, text[i], text[i + 1]))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        r, i, left, right = pop(heap)
        j = nxt[i]
        if j < 0 or text[i] != left or text[j] != right:
            continue
        merged = left + right
        text[i] = merged
        text[j] = ""
        k = nxt[j]
        nxt[i] = k
        if k >= 0:
            prv[k] = i
        p = prv[i]
        if p >= 0:
            r2 = get(text[p] + " " + merged)
            if r2 is not None:
                push(heap, (r2, p, text[p], merged))
        if k >= 0:
            r2 = get(merged + " " + text[k])
            if r2 is not None:
                push(heap, (r2, i, merged, text[k]))
    out = []
    i = 0
    while i >= 0:
        out.append(text[i])
        i = nxt[i]
    return out
