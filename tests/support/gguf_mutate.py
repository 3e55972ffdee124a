"""Test-only GGUF surgery: a writer, and a map of every length/count/type field of a real header.

The fuzz tests need two kinds of hostile file:

* byte-level damage at the places a reader trusts: ``field_map`` walks a real
  header (independently of ``tokenizer.gguf``) and records the offset of every
  key length, value type, array element type, array count and string length,
  so a mutation can inflate exactly those;
* well-formed files with wrong meaning (a key of the wrong type, ids out of
  range, arrays of the wrong length): ``write_gguf`` serializes a key/value
  dict with explicit GGUF type names, as ``read_gguf`` reports them.

Nothing here is shared with the code under test, so a bug in the reader
cannot hide itself in the test's view of the file.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

# GGUF value type ids (spec)
TYPE_IDS = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5, "float32": 6,
            "bool": 7, "string": 8, "array": 9, "uint64": 10, "int64": 11, "float64": 12}
_FMT = {"uint8": "B", "int8": "b", "uint16": "H", "int16": "h", "uint32": "I", "int32": "i",
        "float32": "f", "bool": "?", "uint64": "Q", "int64": "q", "float64": "d"}
_WIDTH = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _value(tname: str, value: Any) -> bytes:
    if tname == "string":
        return _string(value)
    if tname.startswith("array["):
        etype = tname[6:-1]
        head = struct.pack("<IQ", TYPE_IDS[etype], len(value))
        if etype == "string":
            return head + b"".join(_string(v) for v in value)
        return head + struct.pack(f"<{len(value)}{_FMT[etype]}", *value)
    return struct.pack("<" + _FMT[tname], value)


def write_gguf(items: list[tuple[str, str, Any]], version: int = 3, tensor_count: int = 0) -> bytes:
    """A GGUF image holding ``items`` = [(key, type name, value)], type names as ``read_gguf`` gives them."""
    parts = [b"GGUF", struct.pack("<IQQ", version, tensor_count, len(items))]
    for key, tname, value in items:
        vtype = TYPE_IDS["array"] if tname.startswith("array[") else TYPE_IDS[tname]
        parts += [_string(key), struct.pack("<I", vtype), _value(tname, value)]
    return b"".join(parts)


@dataclass
class FieldMap:
    """Offsets of the fields a reader must not trust, by kind."""

    top: list[tuple[int, str]] = field(default_factory=list)  # (offset, "len"|"count"|"type"|"etype")
    inner: list[int] = field(default_factory=list)  # u64 string lengths inside string arrays
    kv_end: int = 0


def field_map(data: bytes) -> FieldMap:
    """Walk a well-formed header and note where every trusted number sits."""
    fm = FieldMap()
    off = 24
    (kv_count,) = struct.unpack_from("<Q", data, 16)
    fm.top.append((16, "count"))

    def string(off: int, inner: bool) -> int:
        (n,) = struct.unpack_from("<Q", data, off)
        if inner:
            fm.inner.append(off)
        else:
            fm.top.append((off, "len"))
        return off + 8 + n

    def value(off: int, vtype: int) -> int:
        if vtype == 8:
            return string(off, inner=False)
        if vtype == 9:
            fm.top.append((off, "etype"))
            etype, count = struct.unpack_from("<IQ", data, off)
            fm.top.append((off + 4, "count"))
            off += 12
            if etype == 8:
                for _ in range(count):
                    off = string(off, inner=True)
                return off
            if etype == 9:
                for _ in range(count):
                    off = value(off, 9)
                return off
            return off + _WIDTH[etype] * count
        return off + _WIDTH[vtype]

    for _ in range(kv_count):
        off = string(off, inner=False)
        fm.top.append((off, "type"))
        (vtype,) = struct.unpack_from("<I", data, off)
        off = value(off + 4, vtype)
    fm.kv_end = off
    return fm


def header_bytes(path, extra: int = 4096) -> bytes:
    """The key/value section of a real GGUF (plus ``extra`` bytes of what follows)."""
    with open(path, "rb") as fh:
        head = fh.read(64 << 20)
    end = field_map(head).kv_end
    return head[: end + extra]
