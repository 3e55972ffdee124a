"""Incremental detokenization for streamed replies.

A model emits ids one at a time and a character may be split across ids
(an emoji is often four byte tokens).  :class:`StreamDecoder` keeps the
incomplete tail of the UTF-8 stream and hands out only complete text, so
the UI never shows U+FFFD for a character that is still arriving.  Bytes
that can never become valid UTF-8 are replaced exactly as
``Tokenizer.decode`` replaces them, so for any id sequence the joined pieces
equal ``decode(all ids)``.
"""
from __future__ import annotations

import codecs
from typing import Protocol


class TokenBytes(Protocol):
    """What the decoder needs of a tokenizer (a :class:`tokenizer.core.Tokenizer` is one): no import of core."""

    def token_bytes(self, tid: int) -> bytes: ...

    def is_special(self, tid: int) -> bool: ...


class StreamDecoder:
    """``feed(id) -> str`` with complete characters only; ``finalize() -> str`` flushes."""

    def __init__(self, tokenizer: TokenBytes, skip_special: bool = False) -> None:
        self._tok = tokenizer
        self._skip = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.ids: list[int] = []

    def feed(self, tid: int) -> str:
        """Add one id; return the text it completes (possibly "")."""
        data = self._tok.token_bytes(tid)
        self.ids.append(tid)
        if self._skip and self._tok.is_special(tid):
            return ""
        return self._utf8.decode(data)

    def feed_many(self, ids: list[int]) -> str:
        """Add several ids at once."""
        return "".join(self.feed(t) for t in ids)

    def finalize(self, *, continuable: bool = False) -> str:
        """Flush: an incomplete character left at the end becomes U+FFFD (as in ``decode``).

        ``continuable``: the reply was cut (by ``max_tokens``, a cancel or a
        failure) and may be continued.  The bytes of a character still arriving are then
        dropped, not turned into U+FFFD: they stay in the reply's ids, a
        decoder fed the same ids holds them again, and the continuation
        completes the character, so cut + continuation is, byte for byte, the
        text of the reply generated in one go.
        """
        tail = "" if continuable else self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return tail
