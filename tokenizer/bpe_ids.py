"""The pure-Python BPE merge on integer symbol ids: what runs when the C accelerator is absent.

:mod:`tokenizer.bpe` states the rule (lowest-rank adjacent pair first,
leftmost on ties) on strings: every candidate pair costs a string
concatenation ``a + " " + b`` and the hashing of that new string.  Here the
same rule runs on ids: symbols are numbered once (vocabulary ids, plus fresh
ids for merge results that are not tokens), and a pair is the integer
``left << 21 | right`` looked up in one dict whose value packs
``rank << 21 | merged id``.  ``min`` over packed values orders by rank, and
two pairs of equal rank are the same pair, so ``list.index`` still picks the
leftmost.  Ids come out identical to the string version (the tests compare
both on every corpus).
"""
from __future__ import annotations

import heapq
from typing import Callable

from tokenizer.bytelevel import BYTE_TO_CHAR, to_byte_chars

_BITS = 21
_MASK = (1 << _BITS) - 1
_NONE = 1 << 62
#: pieces longer than this (in symbols) use the heap merge
LONG_PIECE = 64


class IdMerger:
    """``encode(piece) -> ids`` (or None when the piece needs the string path)."""

    def __init__(self, vocab: dict[str, int], ranks: dict[str, int], prepare: Callable[[str], str],
                 unknown: Callable[[str], list[int]]) -> None:
        self.prepare = prepare
        self.unknown = unknown
        sym: dict[str, int] = dict(vocab)
        texts: dict[int, str] = {}  # extra id -> its text (merge results outside the vocabulary)
        next_id = max(vocab.values(), default=-1) + 1
        self.first_extra = next_id
        pairs: dict[int, int] = {}
        for key, rank in ranks.items():
            parts = key.split(" ")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                continue  # never reachable: symbols hold no spaces
            ids = []
            for text in (parts[0], parts[1], parts[0] + parts[1]):
                tid = sym.get(text)
                if tid is None:
                    tid = sym[text] = next_id
                    texts[tid] = text
                    next_id += 1
                ids.append(tid)
            if next_id > _MASK or rank >= 1 << 40:
                raise ValueError("vocabulary too large for the packed pair table")
            pairs[ids[0] << _BITS | ids[1]] = rank << _BITS | ids[2]
        self.sym = sym
        self.texts = texts
        self.pairs = pairs
        #: byte-level vocabularies: byte value -> symbol id (-1: none), skipping the str byte map
        self.byte_ids: list[int] | None = None
        if prepare is to_byte_chars:
            self.byte_ids = [sym.get(BYTE_TO_CHAR[b], -1) for b in range(256)]

    def encode(self, piece: str) -> list[int] | None:
        byte_ids = self.byte_ids
        if byte_ids is not None:
            ids = list(map(byte_ids.__getitem__, piece.encode("utf-8", "surrogatepass")))
            if -1 in ids:
                return None
        else:
            symbols = self.prepare(piece)
            if " " in symbols:
                return None
            sym = self.sym
            try:
                ids = [sym[c] for c in symbols]
            except KeyError:
                return None  # a character that is no symbol at all: the string path handles it
        if len(ids) > 1:
            ids = self._merge_long(ids) if len(ids) > LONG_PIECE else self._merge_short(ids)
        elif not ids:
            return ids
        first_extra = self.first_extra
        if max(ids) < first_extra:
            return ids
        out: list[int] = []
        for tid in ids:
            if tid < first_extra:
                out.append(tid)
            else:
                out.extend(self.unknown(self.texts[tid]))
        return out

    def _merge_short(self, ids: list[int]) -> list[int]:
        get = self.pairs.get
        # packed[i]: rank << 21 | merged id of the pair (ids[i], ids[i + 1])
        packed = [get(a << _BITS | b, _NONE) for a, b in zip(ids, ids[1:])]
        while True:
            best = min(packed)
            if best == _NONE:
                return ids
            i = packed.index(best)
            merged = best & _MASK
            ids[i] = merged
            del ids[i + 1]
            del packed[i]
            if i:
                packed[i - 1] = get(ids[i - 1] << _BITS | merged, _NONE)
            if i < len(packed):
                packed[i] = get(merged << _BITS | ids[i + 1], _NONE)
            if not packed:
                return ids

    def _merge_long(self, ids: list[int]) -> list[int]:
        """The same rule on a linked list with a lazy-deletion heap, O(n log n).

        Heap entries are plain ints, ``rank << 24 | left index`` (cheap to
        compare); an entry is stale when the pair now at that index has
        another rank, and ranks are unique per pair, so that check is exact.
        """
        n = len(ids)
        if n >= 1 << 24:
            return self._merge_short(ids)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        get = self.pairs.get
        heap = []
        for i in range(n - 1):
            p = get(ids[i] << _BITS | ids[i + 1])
            if p is not None:
                heap.append((p >> _BITS) << 24 | i)
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        low = (1 << 24) - 1
        while heap:
            key = pop(heap)
            i = key & low
            left = ids[i]
            j = nxt[i]
            if left < 0 or j < 0:
                continue
            p = get(left << _BITS | ids[j])
            if p is None or p >> _BITS != key >> 24:
                continue
            merged = p & _MASK
            ids[i] = merged
            ids[j] = -1
            k = nxt[j]
            nxt[i] = k
            if k >= 0:
                prv[k] = i
            q = prv[i]
            if q >= 0:
                p2 = get(ids[q] << _BITS | merged)
                if p2 is not None:
                    push(heap, (p2 >> _BITS) << 24 | q)
            if k >= 0:
                p2 = get(merged << _BITS | ids[k])
                if p2 is not None:
                    push(heap, (p2 >> _BITS) << 24 | i)
        out = []
        i = 0
        while i >= 0:
            out.append(ids[i])
            i = nxt[i]
        return out
