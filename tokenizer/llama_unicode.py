"""llama.cpp's per-code-point Unicode facts, from its own tables (:mod:`tokenizer.llama_unicode_data`).

WordPiece pre-processing in llama.cpp asks, for each code point, its
category (mark, punctuation, symbol, control), whether it is whitespace,
its simple lower-case mapping and its "NFD": llama.cpp's NFD maps a code
point to the *first* code point of its decomposition (``é`` -> ``e``, the
accent is simply gone), never to a sequence.  Python's ``unicodedata``
differs (full decompositions, another Unicode release, ``İ``.lower() is two
code points), so we read llama.cpp's tables and answer from them.

The tables are parsed on first use (a few milliseconds).
"""
from __future__ import annotations

import bisect
import functools

MARK, PUNCTUATION, SYMBOL, CONTROL = 0x10, 0x20, 0x40, 0x80


def _ints(text: str) -> list[int]:
    return [int(x, 16) for x in text.split()]


@functools.lru_cache(maxsize=1)
def _tables():
    from tokenizer import llama_unicode_data as d

    flags = _ints(d.FLAGS)
    lower = _ints(d.LOWER)
    nfd = _ints(d.NFD)
    return (
        flags[0::2], flags[1::2],                      # range starts, their flags
        frozenset(_ints(d.WHITESPACE)),
        dict(zip(lower[0::2], lower[1::2])),          # cp -> simple lower-case cp
        nfd[0::3], nfd[1::3], nfd[2::3],              # range first, last, first cp of NFD
    )


def flags(cp: int) -> int:
    """llama.cpp's category bits for ``cp`` (``MARK | PUNCTUATION | SYMBOL | CONTROL``)."""
    starts, values = _tables()[:2]
    return values[bisect.bisect_right(starts, cp) - 1] if cp < 0x110000 else 0


def is_whitespace(cp: int) -> bool:
    return cp in _tables()[2]


def to_lower(cp: int) -> int:
    """``unicode_tolower``: the simple lower-case mapping, or ``cp`` itself."""
    return _tables()[3].get(cp, cp)


def nfd_first(cp: int) -> int:
    """``unicode_cpts_normalize_nfd`` for one code point."""
    firsts, lasts, targets = _tables()[4:]
    k = bisect.bisect_right(firsts, cp) - 1
    return targets[k] if k >= 0 and firsts[k] <= cp <= lasts[k] else cp
