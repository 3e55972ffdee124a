"""Carving special tokens out of text before the model tokenizer sees it.

Two rule sets, because the two oracles differ:

* :class:`LlamaSpecialSplitter` (GGUF files): llama.cpp takes the special
  tokens longest first and, for each in turn, splits every remaining text
  fragment at all its occurrences.  So in "abcd" with tokens "bcd" and "ab",
  "bcd" wins although "ab" starts earlier.  Tokens flagged ``lstrip`` /
  ``rstrip`` swallow the ASCII whitespace next to them.  Control and unknown
  tokens are only carved when ``special=True``; user-defined ones always.
* :class:`HFSpecialSplitter` (tokenizer.json): Hugging Face's added-token
  matcher, leftmost-longest, with ``lstrip`` / ``rstrip`` / ``single_word``.

Both honour ``literal_spans``: an occurrence overlapping a span is left as
text, which is what keeps user text from smuggling in control tokens.  Text
around and inside spans stays one fragment, so ids equal a plain encode
whenever the spans hold no special-token text.

Output: a list of fragments, each a ``str`` (text for the model) or an
``int`` (a carved token id).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

import regex

_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale: what llama.cpp strips


@dataclass(frozen=True)
class SpecialToken:
    """One carvable token: ``control`` ones need ``special=True``."""

    text: str
    id: int
    control: bool
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


def _overlaps(starts: list[int], ends: list[int], lo: int, hi: int) -> bool:
    """Does [lo, hi) intersect any of the sorted, disjoint intervals?"""
    return _blocked_until(starts, ends, lo, hi) >= 0


def _blocked_until(starts: list[int], ends: list[int], lo: int, hi: int) -> int:
    """End of the leftmost interval intersecting [lo, hi), or -1.

    Every same-length occurrence starting before that end also intersects
    it, so a search can resume there instead of at ``lo + 1``.
    """
    k = bisect.bisect_right(starts, lo) - 1
    if k >= 0 and ends[k] > lo:
        return ends[k]
    k += 1
    return ends[k] if k < len(starts) and starts[k] < hi else -1


def _normalize_spans(spans: Sequence[tuple[int, int]], n: int) -> tuple[list[int], list[int]]:
    merged: list[list[int]] = []
    for lo, hi in sorted((max(0, int(a)), min(n, int(b))) for a, b in spans):
        if hi <= lo:
            continue
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [a for a, _ in merged], [b for _, b in merged]


class LlamaSpecialSplitter:
    """llama.cpp's ``tokenizer_st_partition``: longest token first, all occurrences."""

    def __init__(self, tokens: list[SpecialToken]) -> None:
        # longest first; equal lengths by id (llama.cpp leaves ties unspecified)
        self.tokens = sorted(tokens, key=lambda t: (-len(t.text), t.id))
        # cheap presence test: tokens grouped by their first two characters
        self._groups: dict[str, list[SpecialToken]] = {}
        for tok in self.tokens:
            self._groups.setdefault(tok.text[:2], []).append(tok)

    def _present(self, text: str, special: bool) -> list[SpecialToken]:
        found: list[SpecialToken] = []
        for prefix, group in self._groups.items():
            if prefix in text:
                found.extend(t for t in group if (special or not t.control) and t.text in text)
        found.sort(key=lambda t: (-len(t.text), t.id))
        return found

    def split(self, text: str, special: bool, literal_spans: Sequence[tuple[int, int]] = ()) -> list:
        if not text:
            return []
        present = self._present(text, special)
        if not present:
            return [text]
        span_starts, span_ends = _normalize_spans(literal_spans, len(text))
        # carved intervals, sorted and disjoint: token id, or None for stripped whitespace
        starts: list[int] = []
        ends: list[int] = []
        what: list[int | None] = []

        def carve(lo: int, hi: int, tid: int | None) -> None:
            k = bisect.bisect_left(starts, lo)
            starts.insert(k, lo)
            ends.insert(k, hi)
            what.insert(k, tid)

        for tok in present:
            t, size = tok.text, len(tok.text)
            pos = 0
            while True:
                m = text.find(t, pos)
                if m < 0:
                    break
                end = m + size
                blocked = _blocked_until(starts, ends, m, end)
                if blocked < 0 and span_starts:
                    blocked = _blocked_until(span_starts, span_ends, m, end)
                if blocked >= 0:
                    pos = blocked
                    continue
                if tok.lstrip:
                    # strip back to the start of this fragment (previous carve or text start)
                    k = bisect.bisect_left(starts, m) - 1
                    floor = ends[k] if k >= 0 else 0
                    lo = m
                    while lo > floor and text[lo - 1] in _C_SPACE:
                        lo -= 1
                    if lo < m:
                        carve(lo, m, None)
                carve(m, end, tok.id)
                pos = end
                if tok.rstrip:
                    k = bisect.bisect_right(starts, end)
                    ceiling = starts[k] if k < len(starts) else len(text)
                    hi = end
                    while hi < ceiling and text[hi] in _C_SPACE:
                        hi += 1
                    if hi > end:
                        carve(end, hi, None)
                    pos = hi
        out: list = []
        pos = 0
        for lo, hi, tid in zip(starts, ends, what):
            if lo > pos:
                out.append(text[pos:lo])
            if tid is not None:
                out.append(tid)
            pos = hi
        if pos < len(text):
            out.append(text[pos:])
        return out


class HFSpecialSplitter:
    """Hugging Face ``AddedVocabulary``: leftmost-longest over all added tokens."""

    def __init__(self, tokens: list[SpecialToken]) -> None:
        self.by_text = {t.text: t for t in tokens}
        self._patterns: dict[bool, regex.Pattern[str] | None] = {}
        for special in (False, True):
            texts = sorted(
                (t.text for t in tokens if special or not t.control), key=lambda s: (-len(s), s)
            )
            self._patterns[special] = (
                regex.compile("|".join(regex.escape(s) for s in texts)) if texts else None
            )

    def split(self, text: str, special: bool, literal_spans: Sequence[tuple[int, int]] = ()) -> list:
        pattern = self._patterns[special]
        if not text:
            return []
        if pattern is None:
            return [text]
        span_starts, span_ends = _normalize_spans(literal_spans, len(text))
        out: list = []
        done = 0  # end of the last match (start of pending text)
        pos = 0
        while True:
            m = pattern.search(text, pos)
            if m is None:
                break
            lo, hi = m.span()
            tok = self.by_text[m.group()]
            if span_starts and _overlaps(span_starts, span_ends, lo, hi):
                pos = lo + 1
                continue
            if tok.single_word and not _single_word_ok(text, lo, hi):
                pos = hi  # like HF: the matcher has moved past this match
                continue
            if tok.lstrip:
                while lo > done and text[lo - 1].isspace():
                    lo -= 1
            if tok.rstrip:
                while hi < len(text) and text[hi].isspace():
                    hi += 1
            if lo > done:
                out.append(text[done:lo])
            out.append(tok.id)
            done = pos = hi
        if done < len(text):
            out.append(text[done:])
        return out


_WORD = regex.compile(r"\w")


def _single_word_ok(text: str, lo: int, hi: int) -> bool:
    before = lo == 0 or not _WORD.match(text[lo - 1])
    after = hi == len(text) or not _WORD.match(text[hi])
    return before and after
