"""Derived tables kept on disk between runs, checked before they are trusted.

Some tables cost more to build than to read: the C splitter's 1.1 MB
code-point class table takes 0.05 to 0.1 s of ``regex`` scans per process,
while its compressed file reads in about 2 ms.  One file per table lives in
the cache directory (``$TOKCHAT_CACHE_DIR``, else the platform's user cache
directory, e.g. ``~/.cache/tokchat``).

A file is used only when all of these hold, otherwise the table is rebuilt
and the file rewritten:

* the magic and format version match;
* the key digest matches: the key names everything the table is derived
  from (library versions, the source tables' digest), so a table built by
  another ``regex`` or another tokchat is never read back (stale);
* the payload decompresses and its SHA-256 matches (corrupt, truncated).

Writes go to a temporary file that is renamed into place, so a reader sees
an old file or a new one, never half of one.  A cache directory that cannot
be written is not an error: the table is just built each time.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import zlib
from pathlib import Path
from typing import Callable

MAGIC = b"TOKCHAT-TABLE\x01"
_DIGEST = 32


def cache_dir() -> Path:
    """``$TOKCHAT_CACHE_DIR``, else the platform's user cache directory for tokchat."""
    override = os.environ.get("TOKCHAT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("tokchat", appauthor=False))


def _encode(key: str, payload: bytes) -> bytes:
    return (MAGIC + hashlib.sha256(key.encode()).digest() + hashlib.sha256(payload).digest()
            + zlib.compress(payload, 6))


def _decode(key: str, data: bytes) -> bytes | None:
    """The payload stored in ``data`` for ``key``, or None when it is foreign, stale or damaged."""
    head = len(MAGIC)
    if len(data) < head + 2 * _DIGEST or not data.startswith(MAGIC):
        return None
    if data[head : head + _DIGEST] != hashlib.sha256(key.encode()).digest():
        return None
    want = data[head + _DIGEST : head + 2 * _DIGEST]
    try:
        payload = zlib.decompress(data[head + 2 * _DIGEST :])
    except zlib.error:
        return None
    return payload if hashlib.sha256(payload).digest() == want else None


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
