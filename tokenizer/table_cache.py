"""Derived tables kept on disk between runs, checked before they are trusted.

Some tables cost more to build than to read: the C splitter's 1.1 MB
code-point class table takes 0.05 to 0.1 s of ``regex`` scans per process,
while its compressed file reads in about 2 ms.  One file per table lives in
the cache directory (``$TOKCHAT_CACHE_DIR``, else the platform's user cache
directory, e.g. ``~/.cache/tokchat``).

A file is used only when all of these hold, otherwise the table is rebuilt
and the file rewritten:

* the magic and format version match;
* the stored key equals the key asked for: the key names everything the
  table is derived from (library versions, the builder's fingerprint), so a
  table built by another ``regex`` or another tokchat is never read back
  (stale);
* the payload decompresses to the stored length and CRC-32 (corrupt,
  truncated).  CRC-32, not a cryptographic hash: this guards against
  damage, not against someone who can write to the cache directory (who
  could as well replace the code), and ``hashlib`` alone would cost a
  ``tokchat tokenize`` run 5 to 10 ms of OpenSSL start-up.

Writes go to a temporary file that is renamed into place, so a reader sees
an old file or a new one, never half of one.  A cache directory that cannot
be written is not an error: the table is just built each time.
"""
from __future__ import annotations

import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Callable

MAGIC = b"TOKCHAT-TABLE\x02"
#: after MAGIC: key length, then the key; then payload CRC-32 and length, then the zlib stream
_LEN = struct.Struct("<I")
_CHECK = struct.Struct("<II")


def cache_dir() -> Path:
    """``$TOKCHAT_CACHE_DIR``, else the platform's user cache directory for tokchat."""
    override = os.environ.get("TOKCHAT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("tokchat", appauthor=False))


def _encode(key: str, payload: bytes) -> bytes:
    raw_key = key.encode()
    return (MAGIC + _LEN.pack(len(raw_key)) + raw_key + _CHECK.pack(zlib.crc32(payload), len(payload))
            + zlib.compress(payload, 6))


def _decode(key: str, data: bytes) -> bytes | None:
    """The payload stored in ``data`` for ``key``, or None when it is foreign, stale or damaged."""
    raw_key = key.encode()
    off = len(MAGIC)
    if not data.startswith(MAGIC) or len(data) < off + _LEN.size:
        return None
    (key_len,) = _LEN.unpack_from(data, off)
    off += _LEN.size
    if data[off : off + key_len] != raw_key or key_len != len(raw_key):
        return None
    off += key_len
    if len(data) < off + _CHECK.size:
        return None
    crc, size = _CHECK.unpack_from(data, off)
    try:
        payload = zlib.decompress(data[off + _CHECK.size :])
    except zlib.error:
        return None
    return payload if len(payload) == size and zlib.crc32(payload) == crc else None


def cached_table(name: str, key: str, build: Callable[[], bytes]) -> bytes:
    """The table ``name`` for ``key``: read from the cache when intact and current, else built and stored."""
    path = cache_dir() / f"{name}.bin"
    try:
        payload = _decode(key, path.read_bytes())
    except OSError:
        payload = None
    if payload is not None:
        return payload
    payload = build()
    _store(path, _encode(key, payload))
    return payload


def _store(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; False when the cache directory cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False  # read-only or full: the table is built again next time
    return True
