"""A GGUF metadata reader: header and every key/value, never tensor data.

Why our own: the ``gguf`` package takes seconds to turn a 150k-token
vocabulary into Python objects, and llama.cpp's loader is not something we
can call without a backend.  This reader maps the file, walks the key/value
section once and decodes string arrays in a tight loop, so Qwen's vocabulary
plus merges (about 300k strings) load in well under 0.3 s.

With the C accelerator built, string arrays are walked and decoded by
``_accel.gguf_strings`` (same checks, no per-string Python loop), and the
raw bytes of the tokenizer's two big arrays are kept (``GGUFFile.raw``) so the
C merge table can be built from them without a Python string per merge.
Whenever the C walk finds anything wrong, the Python walk below runs and
reports it.

A header read for its facts (``defer=VOCAB_ARRAYS``: a chat's first read,
before its engine's load request) walks over the vocabulary's arrays,
checked, and :meth:`GGUFFile.vocab_arrays` decodes them for the tokenizer,
which keeps them; the merges may stay bytes there (:class:`RawStrings`).

It is written for hostile input.  Every length and count is checked against
the bytes that are actually left in the file *before* anything is allocated
and against the limits stated once, below the type ids (``MAX_*``),
nesting depth is capped, and every problem becomes a :class:`GGUFError`
naming the byte offset and what was wrong.  Memory use is therefore bounded
by the file size and a malformed file can neither hang the reader nor raise
anything but ``GGUFError``.

Not handled (on purpose): tensor infos (:mod:`tokenizer.gguf_extents` reads them on from
``GGUFFile.kv_end`` when a file's extent is checked) and tensor data, big-endian files
(rejected with a clear message) and GGUF v1 (llama.cpp dropped it too).
"""
from __future__ import annotations

import mmap
import os
import struct
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Container, NamedTuple

from tokenizer.errors import GGUFError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

# ---- limits: every size a file states is checked against the bytes present *and* these --------
# They sit far above any real model (largest today: 262,144 tokens and 514,906 merges in Gemma 4,
# chat templates of about 20 kB, a 237 kB precompiled charsmap, a few dozen keys) and far below what
# would hurt; a file beyond them is refused with one GGUFError (TokenizerError for the vocabulary
# limits, which a well-formed file can break) before anything is built.
#: arrays may hold arrays; real files nest at most one level
MAX_NESTING = 8
#: key/value pairs in one file
MAX_KV_COUNT = 1 << 16
#: bytes of one string: a key, a value, one element of a string array
MAX_STRING_LEN = 1 << 24
#: elements of one array (tokens, scores, token types, merges, charsmap bytes)
MAX_ARRAY_LEN = 1 << 26
#: tokens of a vocabulary (ids must fit the 21-bit packed pairs of tokenizer.bpe_ids)
MAX_VOCAB = 1 << 21
#: merges of a BPE vocabulary
MAX_MERGES = 1 << 24

# value type ids from the GGUF spec
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32 = 0, 1, 2, 3, 4, 5, 6
T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 7, 8, 9, 10, 11, 12

#: type id -> (name, struct format, size) for fixed-size scalars
_SCALARS: dict[int, tuple[str, str, int]] = {
    T_UINT8: ("uint8", "B", 1),
    T_INT8: ("int8", "b", 1),
    T_UINT16: ("uint16", "H", 2),
    T_INT16: ("int16", "h", 2),
    T_UINT32: ("uint32", "I", 4),
    T_INT32: ("int32", "i", 4),
    T_FLOAT32: ("float32", "f", 4),
    T_BOOL: ("bool", "B", 1),
    T_UINT64: ("uint64", "Q", 8),
    T_INT64: ("int64", "q", 8),
    T_FLOAT64: ("float64", "d", 8),
}
TYPE_NAMES = {t: spec[0] for t, spec in _SCALARS.items()} | {T_STRING: "string", T_ARRAY: "array"}

#: string arrays whose stored bytes are kept beside their decoded lists (the C merge table reads them)
RAW_KEYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
#: the vocabulary's big arrays: a header read for its facts (``defer``) walks over them, checked, and
#: :meth:`GGUFFile.vocab_arrays` decodes them when the tokenizer is built
VOCAB_ARRAYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.merges", "tokenizer.ggml.precompiled_charsmap"})

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class RawStrings(NamedTuple):
    """A string array's bytes as stored (a u64 length, then UTF-8, for each of ``n_strings`` strings).

    Kept beside the decoded list for :data:`RAW_KEYS` (the C merge table is built from them), or
    instead of it when :meth:`GGUFFile.vocab_arrays` was told to leave an array as its bytes: then the
    lengths and the UTF-8 were checked as a decode checks them, and :meth:`decode` gives the list."""

    data: bytes
    n_strings: int

    def decode(self, what: str = "string array") -> list[str]:
        return _Reader(self.data, len(self.data)).string_array(self.n_strings, what)


@dataclass
class GGUFFile:
    """What :func:`read_gguf` found: the header and all key/values.

    ``kv`` maps key -> value (str, int, float, bool or list); ``types`` maps
    key -> the GGUF type name ("array[string]" for arrays) so callers can
    insist on a type, as llama.cpp does.
    """

    path: Path
    version: int
    tensor_count: int
    kv: dict[str, Any] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    #: offset just past the key/value section (where tensor infos start)
    kv_end: int = 0
    #: key -> the string array's bytes as stored, for :data:`RAW_KEYS` (beside its list in ``kv``)
    raw: dict[str, RawStrings] = field(default_factory=dict, repr=False)
    #: key -> (value type, offset of the value) of the arrays a read with ``defer`` walked over (not in ``kv``:
    #: :meth:`vocab_arrays` decodes them)
    deferred: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    #: (size, mtime in ns) of the file as it was read: :meth:`vocab_arrays` decodes at the offsets found only
    #: in the same file
    stamp: tuple[int, int] = (0, 0)

    def vocab_arrays(self, leave_raw: Container[str] = ()) -> VocabArrays:
        """The arrays the read deferred, decoded (the same checks, the same errors), handed over rather than
        kept: the header of a chat lives as long as the chat, the tokenizer keeps only what it uses.

        Why deferred: the chat reads the header for its facts (preset, context length, the engine's
        load request) before anything else, and Qwen's 151,936 tokens and as many merges took 60 ms of
        that read, on the way to the engine's start (docs/engine.md, "Figures behind the code's choices").

        A string array named in ``leave_raw`` is checked (lengths and UTF-8) and handed over as its bytes
        only (with the C accelerator; without it, it is decoded): Qwen's 151,387 merges are 14 MiB as
        Python strings, and the C merge table reads the bytes.  A file changed since it was read is read
        again whole, as it is now, and this header with it."""
        out = VocabArrays({}, {})
        if not self.deferred:
            return out
        with open(self.path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if (st.st_size, st.st_mtime_ns) != self.stamp:
                fresh = read_gguf(self.path)
                self.version, self.tensor_count, self.kv_end = fresh.version, fresh.tensor_count, fresh.kv_end
                self.kv.clear()
                self.kv.update(fresh.kv)  # in place: a ModelMeta holds this very dict
                self.types, self.raw, self.stamp = fresh.types, fresh.raw, fresh.stamp
                self.deferred = {}
                return out
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                r = _Reader(mm, st.st_size)
                for key, (vtype, offset) in self.deferred.items():
                    r.off = offset
                    if key in leave_raw and self.types[key] == "array[string]" and r.c_strings is not None:
                        _, _, count = r.array_header(key, 0)
                        start = r.off
                        checked = r.c_strings(mm, start, count, 2)
                        # all strings together within the per-string limit: none of them can break it
                        if checked is not None and checked[0] - start - 8 * count <= MAX_STRING_LEN:
                            out.raw[key] = RawStrings(bytes(mm[start:checked[0]]), count)
                            continue
                        r.off = offset  # something is wrong: the whole decode below names it
                    out.kv[key] = r.value(vtype, key)
                    if key in RAW_KEYS and self.types[key] == "array[string]":
                        start, end = r.last_strings
                        out.raw[key] = RawStrings(bytes(mm[start:end]), len(out.kv[key]))
        return out


@dataclass
class VocabArrays:
    """The vocabulary's arrays decoded from a header read for its facts (:meth:`GGUFFile.vocab_arrays`)."""

    #: key -> value, as ``GGUFFile.kv`` would hold it
    kv: dict[str, Any]
    #: key -> the array's bytes: :data:`RAW_KEYS` beside their ``kv`` entry, an array left as bytes instead of one
    raw: dict[str, RawStrings]


class _Reader:
    """Bounds-checked cursor over the mapped file."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.off = 0
        #: the C walker (``_accel.gguf_strings``), or None
        self.c_strings = _c_strings()
        #: (start, end) of the last string array read
        self.last_strings = (0, 0)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.off + n > self.size:
            raise GGUFError(
                self.off, f"{what} needs {n} bytes but only {self.size - self.off} are left in the file"
            )

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.off)
        self.off += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.off)
        self.off += 8
        return v

    def string(self, what: str) -> str:
        start = self.off
        n = self.u64(f"length of {what}")
        if n > MAX_STRING_LEN:
            raise GGUFError(start, f"{what} claims {n} bytes, over the {MAX_STRING_LEN}-byte limit on a string")
        if n > self.size - self.off:
            raise GGUFError(start, f"{what} claims {n} bytes but only {self.size - self.off} are left in the file")
        raw = self.buf[self.off : self.off + n]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(self.off + exc.start, f"{what} is not valid UTF-8") from None
        self.off += n
        return text

    def string_array(self, count: int, what: str) -> list[str]:
        """Decode ``count`` consecutive strings: the hot loop for vocabularies.

        Pass 1 walks the 8-byte lengths (bounds-checked) and notes where each
        header sits.  Pass 2 copies the array, overwrites every header with
        eight NUL bytes, decodes the whole run once and splits it on the NUL
        runs: several times faster than slicing and decoding 150k strings one
        by one.  It is only trusted when the strings themselves hold no NUL
        (checked by counting) and decode strictly; otherwise the careful
        per-string path runs, which also names the offending offset.
        """
        start = self.off
        if self.c_strings is not None:
            found = self.c_strings(self.buf, start, count, True)
            # all strings together within the per-string limit: none of them can break it
            if found is not None and found[0] - start - 8 * count <= MAX_STRING_LEN:
                self.off, strings = found
                self.last_strings = (start, self.off)
                return strings
        headers, long_headers = self._walk_strings(count, what, record=True)
        off = self.off
        region = bytearray(self.buf[start:off])
        if start:
            headers = [h - start for h in headers]
        for h in headers:
            region[h] = 0
        zeros = bytes(8)
        for h in long_headers:
            region[h - start : h - start + 8] = zeros
        if region.count(0) == 8 * count:
            try:
                parts = region.decode("utf-8").split("\x00" * 8)
            except UnicodeDecodeError:
                parts = []
            if len(parts) == count + 1 and not parts[0]:
                del parts[0]
                self.last_strings = (start, off)
                return parts
        parts = self._strings_slow(start, count, 0, what)
        self.last_strings = (start, off)
        return parts

    def _walk_strings(self, count: int, what: str, record: bool = False) -> tuple[list[int], list[int]]:
        """Check and step over ``count`` strings; optionally note each length header's offset."""
        # each string needs at least its 8-byte length, so this bounds memory
        if count * 8 > self.size - self.off:
            raise GGUFError(self.off, f"{what}: {count} strings cannot fit in the {self.size - self.off} bytes left")
        buf, size, unpack = self.buf, self.size, _U64.unpack_from
        off = self.off
        headers: list[int] = []
        note = headers.append
        long_headers: list[int] = []  # lengths >= 256 have a second non-zero byte
        i = hdr = 0
        n = 0
        try:
            for i in range(count):
                hdr = off
                (n,) = unpack(buf, off)
                if record:
                    note(off)
                if n > 255:
                    long_headers.append(off)
                if n > MAX_STRING_LEN:
                    break
                off += 8 + n
                if off > size:
                    break
        except struct.error:
            raise GGUFError(off, f"{what}[{i}]: file ends inside a string length") from None
        if n > MAX_STRING_LEN:
            raise GGUFError(hdr, f"{what}[{i}] claims {n} bytes, over the {MAX_STRING_LEN}-byte limit on a string")
        if off > size:
            raise GGUFError(hdr, f"{what}[{i}] claims {off - hdr - 8} bytes but only {size - hdr - 8} are left in the file")
        self.off = off
        return headers, long_headers

    def _strings_slow(self, off: int, k: int, first: int, what: str) -> list[str]:
        """One string at a time; lengths were already bounds-checked by the walk."""
        buf, unpack = self.buf, _U64.unpack_from
        out: list[str] = [""] * k
        for j in range(k):
            (n,) = unpack(buf, off)
            off += 8
            try:
                out[j] = buf[off : off + n].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise GGUFError(off + exc.start, f"{what}[{first + j}] is not valid UTF-8") from None
            off += n
        return out

    def scalar_array(self, vtype: int, count: int, what: str) -> list[Any]:
        name, fmt, width = _SCALARS[vtype]
        if count > (self.size - self.off) // width:
            raise GGUFError(self.off, f"{what}: {count} {name} values cannot fit in the {self.size - self.off} bytes left")
        nbytes = count * width
        chunk = self.buf[self.off : self.off + nbytes]
        self.off += nbytes
        if vtype == T_BOOL:
            return [b != 0 for b in chunk]
        values = array(_ARRAY_CODES[vtype])
        if values.itemsize != width:  # exotic platform: fall back to struct
            return list(struct.unpack(f"<{count}{fmt}", chunk))
        values.frombytes(chunk)
        return values.tolist()

    def array_header(self, what: str, depth: int) -> tuple[int, int, int]:
        """(offset, element type, count) of an array, the count within :data:`MAX_ARRAY_LEN`."""
        if depth >= MAX_NESTING:
            raise GGUFError(self.off, f"{what}: arrays nested deeper than {MAX_NESTING} levels")
        start = self.off
        etype = self.u32(f"element type of {what}")
        count = self.u64(f"element count of {what}")
        if count > MAX_ARRAY_LEN:
            raise GGUFError(start + 4, f"{what} claims {count} elements, over the {MAX_ARRAY_LEN}-element limit "
                                       "on an array")
        return start, etype, count

    def skip(self, vtype: int, what: str, depth: int = 0) -> None:
        """Move past a value without building it (bounds are still checked)."""
        if vtype == T_STRING:
            start = self.off
            n = self.u64(f"length of {what}")
            if n > MAX_STRING_LEN:
                raise GGUFError(start, f"{what} claims {n} bytes, over the {MAX_STRING_LEN}-byte limit on a string")
            if n > self.size - self.off:
                raise GGUFError(start, f"{what} claims {n} bytes but only {self.size - self.off} are left in the file")
            self.off += n
        elif vtype == T_ARRAY:
            start, etype, count = self.array_header(what, depth)
            walked = self.c_strings(self.buf, self.off, count, False) if etype == T_STRING and self.c_strings else None
            if walked is not None and walked[0] - self.off - 8 * count > MAX_STRING_LEN:
                walked = None  # some string may break the limit: the Python walk says which
            if walked is not None:
                self.off = walked[0]
            elif etype == T_STRING:
                self._walk_strings(count, what)
            elif etype == T_ARRAY:
                if count * 12 > self.size - self.off:
                    raise GGUFError(start, f"{what}: {count} nested arrays cannot fit in the file")
                for i in range(count):
                    self.skip(etype, f"{what}[{i}]", depth + 1)
            elif etype in _SCALARS:
                width = _SCALARS[etype][2]
                if count > (self.size - self.off) // width:
                    raise GGUFError(start, f"{what}: {count} values cannot fit in the {self.size - self.off} bytes left")
                self.off += count * width
            else:
                raise GGUFError(start, f"{what}: unknown array element type {etype}")
        else:
            self.value(vtype, what, depth)

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype == T_STRING:
            return self.string(what)
        if vtype == T_ARRAY:
            start, etype, count = self.array_header(what, depth)
            if etype == T_STRING:
                return self.string_array(count, what)
            if etype == T_ARRAY:
                # a nested array needs at least its own 12-byte header
                if count * 12 > self.size - self.off:
                    raise GGUFError(start, f"{what}: {count} nested arrays cannot fit in the file")
                return [self.value(T_ARRAY, f"{what}[{i}]", depth + 1) for i in range(count)]
            if etype not in _SCALARS:
                raise GGUFError(start, f"{what}: unknown array element type {etype}")
            return self.scalar_array(etype, count, what)
        spec = _SCALARS.get(vtype)
        if spec is None:
            raise GGUFError(self.off, f"{what}: unknown value type {vtype}")
        name, fmt, width = spec
        self.need(width, what)
        (v,) = struct.unpack_from("<" + fmt, self.buf, self.off)
        self.off += width
        if vtype == T_BOOL:
            if v > 1:
                raise GGUFError(self.off - 1, f"{what}: bool byte is {v}, not 0 or 1")
            return bool(v)
        return v


_ARRAY_CODES = {
    T_UINT8: "B", T_INT8: "b", T_UINT16: "H", T_INT16: "h", T_UINT32: "I", T_INT32: "i",
    T_FLOAT32: "f", T_UINT64: "Q", T_INT64: "q", T_FLOAT64: "d",
}
if struct.pack("=I", 1) != struct.pack("<I", 1):  # pragma: no cover - big-endian host
    raise ImportError("tokenizer.gguf reads little-endian files on little-endian hosts only")


def parse_gguf(buf: Any, size: int, path: Path | str = "<memory>", keys: Container[str] | None = None,
               defer: Container[str] = ()) -> GGUFFile:
    """Parse the header and key/values of a GGUF image held in ``buf``.

    With ``keys``, only those values are built; the others are walked over
    (still bounds-checked) and appear in ``types`` but not in ``kv``.  Arrays
    named in ``defer`` are walked over too and noted in ``deferred``, for
    :meth:`GGUFFile.vocab_arrays` to decode.
    """
    r = _Reader(buf, size)
    r.need(4, "magic")
    magic = bytes(buf[0:4])
    if magic != GGUF_MAGIC:
        raise GGUFError(0, f"not a GGUF file (magic {magic!r}, expected b'GGUF')")
    r.off = 4
    version = r.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and version >> 16:
            raise GGUFError(4, "big-endian GGUF files are not supported")
        if version == 1:
            raise GGUFError(4, "GGUF version 1 is not supported (re-convert the model)")
        raise GGUFError(4, f"unknown GGUF version {version} (supported: 2, 3)")
    tensor_count = r.u64("tensor count")
    kv_count = r.u64("key/value count")
    if kv_count > MAX_KV_COUNT:
        raise GGUFError(16, f"key/value count {kv_count} is over the limit of {MAX_KV_COUNT}")
    # a key/value needs at least 8 (key length) + 4 (type) + 1 bytes
    if kv_count * 13 > size - r.off:
        raise GGUFError(16, f"key/value count {kv_count} cannot fit in a {size}-byte file")
    out = GGUFFile(path=Path(path), version=version, tensor_count=tensor_count)
    for i in range(kv_count):
        key_off = r.off
        key = r.string(f"key #{i}")
        if key in out.types:
            raise GGUFError(key_off, f"duplicate key {key!r}")
        vtype_off = r.off
        vtype = r.u32(f"type of {key!r}")
        if vtype not in TYPE_NAMES:
            raise GGUFError(vtype_off, f"{key!r} has unknown value type {vtype}")
        if vtype == T_ARRAY:
            r.need(4, f"element type of {key!r}")
            (etype,) = _U32.unpack_from(buf, r.off)
            tname = f"array[{TYPE_NAMES.get(etype, str(etype))}]"
        else:
            tname = TYPE_NAMES[vtype]
        if vtype == T_ARRAY and key in defer and (keys is None or key in keys):
            out.deferred[key] = (vtype, r.off)
            r.skip(vtype, key)
        elif keys is None or key in keys:
            out.kv[key] = r.value(vtype, key)
            if key in RAW_KEYS and tname == "array[string]":
                start, end = r.last_strings
                out.raw[key] = RawStrings(bytes(buf[start:end]), len(out.kv[key]))
        else:
            r.skip(vtype, key)
        out.types[key] = tname
    out.kv_end = r.off
    return out


def _c_strings() -> Any:
    """``_accel.gguf_strings`` when the accelerator is built and allowed, else None."""
    from tokenizer.accel import accel_module

    accel = accel_module()
    return getattr(accel, "gguf_strings", None)


def read_gguf(path: str | os.PathLike[str], keys: Container[str] | None = None,
              defer: Container[str] = ()) -> GGUFFile:
    """Read the header and all key/values (or only ``keys``) of the GGUF file at ``path``; the arrays named
    in ``defer`` are checked and left for :meth:`GGUFFile.vocab_arrays`.

    Raises :class:`GGUFError` (offset + problem) for anything malformed and
    ``FileNotFoundError``/``IsADirectoryError`` for a path that is not a file.
    """
    p = Path(path)
    with open(p, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        if size < 24:
            data = fh.read()
            found = parse_gguf(data, len(data), p, keys, defer)
        else:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                found = parse_gguf(mm, size, p, keys, defer)
    found.stamp = (st.st_size, st.st_mtime_ns)
    return found
