"""SentencePiece-style BPE (``tokenizer.ggml.model = llama``) as llama.cpp runs it.

There is no pre-tokenizer: a whole text fragment (spaces already turned into
``▁``) starts as one symbol per character, and the pair whose concatenation
is a vocabulary token with the highest score merges first (leftmost on
ties), until no adjacent pair forms a token.  A final symbol that is not a
token falls back to its UTF-8 bytes as ``<0xXX>`` tokens.

Because merges may cross any boundary, nothing is cached per word; the heap
keeps a fragment of n characters at O(n log n).
"""
from __future__ import annotations

import heapq
from typing import Any

from tokenizer.accel import accel_module
from tokenizer.errors import TokenizerError


def _make_merger(tokens: list[str], scores: list[float]) -> Any:
    accel = accel_module()
    if accel is None or not hasattr(accel, "SPMMerger"):
        return None
    try:
        return accel.SPMMerger(tokens, list(scores))
    except (ValueError, TypeError, UnicodeError):
        return None


class SPMModel:
    """Score-driven merging over whole fragments; ``vocab`` maps text -> id, ``scores[id]`` its score."""

    def __init__(self, vocab: dict[str, int], scores: list[float], tokens: list[str] | None = None) -> None:
        self.vocab = vocab
        self.scores = scores
        self._byte_ids: dict[int, int] = {}
        #: the C accelerator's SPMMerger (same procedure), built on first use when available
        self._tokens = tokens
        self.merger: Any = None

    def encode_fragment(self, text: str) -> list[int]:
        """Ids for ``text`` (already escaped: spaces are ``▁``)."""
        if self._tokens is not None:
            self.merger, self._tokens = _make_merger(self._tokens, self.scores), None
        if self.merger is not None:
            ids = self.merger.encode(text)
            if ids is not None:
                return ids
        n = len(text)
        if n == 0:
            return []
        vocab, scores = self.vocab, self.scores
        sym = list(text)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        # heap entries: (-score, left index, size of merged text); llama.cpp's order
        heap = []
        for i in range(n - 1):
            tid = vocab.get(sym[i] + sym[i + 1])
            if tid is not None:
                heap.append((-scores[tid], i, 2))
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        lens = [1] * n
        while heap:
            _, i, size = pop(heap)
            j = nxt[i]
            if j < 0 or not lens[i] or lens[i] + lens[j] != size:
                continue
            merged = sym[i] + sym[j]
            sym[i] = merged
            lens[i] = size
            lens[j] = 0
            k = nxt[j]
            nxt[i] = k
            if k >= 0:
                prv[k] = i
            p = prv[i]
            if p >= 0:
                tid = vocab.get(sym[p] + merged)
                if tid is not None:
                    push(heap, (-scores[tid], p, lens[p] + size))
            if k >= 0:
                tid = vocab.get(merged + sym[k])
                if tid is not None:
                    push(heap, (-scores[tid], i, size + lens[k]))
        out: list[int] = []
        i = 0
        while i >= 0:
            piece = sym[i]
            tid = vocab.get(piece)
            if tid is None:
                out.extend(self.byte_ids(piece))
            else:
                out.append(tid)
            i = nxt[i]
        return out

    def byte_ids(self, piece: str) -> list[int]:
        """``<0xXX>`` tokens for each UTF-8 byte (or the one-byte token when there is no ``<0xXX>``)."""
        out = []
        for b in piece.encode("utf-8", "surrogatepass"):
            tid = self._byte_ids.get(b)
            if tid is None:
                tid = self.vocab.get(f"<0x{b:02X}>")
                if tid is None:
                    tid = self.vocab.get(chr(b)) if b < 0x80 else None
                if tid is None:
                    raise TokenizerError(f"the vocabulary has no token for byte 0x{b:02X} (no <0x{b:02X}> token)")
                self._byte_ids[b] = tid
            out.append(tid)
        return out
