"""The GPT-2 byte <-> character map used by byte-level BPE vocabularies.

Byte-level BPE never sees raw bytes: each of the 256 byte values is shown as
one printable character (printable Latin-1 bytes as themselves, the rest
shifted to U+0100 and up, so a space becomes ``Ġ`` and a newline ``Ċ``).
Encoding a piece is then ``piece.encode().decode("latin-1").translate(...)``,
all in C; decoding is the reverse dictionary lookup per character.
"""
from __future__ import annotations


def _byte_chars() -> list[str]:
    """``chars[b]`` is the character that stands for byte ``b``."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = [""] * 256
    for b in printable:
        chars[b] = chr(b)
    shifted = 0
    for b in range(256):
        if not chars[b]:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return chars


#: byte value -> stand-in character
BYTE_TO_CHAR: list[str] = _byte_chars()
#: stand-in character -> byte value
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
#: str.translate table from latin-1-decoded text to stand-in characters
_TRANSLATE = {b: c for b, c in enumerate(BYTE_TO_CHAR) if chr(b) != c}


def to_byte_chars(text: str) -> str:
    """The byte-level form of ``text`` (lone surrogates pass through as their UTF-8-like bytes)."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(_TRANSLATE)


def from_byte_chars(token: str) -> bytes | None:
    """The bytes a byte-level token stands for, or None if it holds other characters."""
    try:
        return bytes([CHAR_TO_BYTE[c] for c in token])
    except KeyError:
        return None
