"""Is a history write failing because the disk is full?  SQLite does not always say so.

SQLite reports a full disk as ``SQLITE_FULL`` ("database or disk is full") when a write
comes up short, but as ``SQLITE_IOERR`` ("disk I/O error") when the space runs out while
it extends the WAL or maps its shared-memory file (measured on a 1 MiB tmpfs: a new
database with 16 KiB left fails so).  Python does not expose the ``errno`` behind an
I/O error, so an I/O error on a disk with almost no room left is taken as a full disk;
an ``OSError`` carries its ``ENOSPC`` itself.
"""
from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

#: an I/O error with less room than this left on the disk is read as the disk being full
NEARLY_FULL_BYTES = 1 << 20
#: SQLite's primary result codes (sqlite3.h)
_SQLITE_IOERR, _SQLITE_FULL = 10, 13


def free_bytes(path: Path) -> int | None:
    """The bytes free on the filesystem holding ``path`` (its nearest existing folder), None if unknown."""
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def disk_is_full(exc: BaseException, path: Path) -> bool:
    """Whether ``exc``, raised writing ``path``, means its disk is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary == _SQLITE_FULL or "disk is full" in str(exc):
        return True
    if primary == _SQLITE_IOERR or "disk I/O error" in str(exc):
        free = free_bytes(path)
        return free is not None and free < NEARLY_FULL_BYTES
    return False


def full_disk_reason(path: Path) -> str:
    """``the disk holding FOLDER is full (N bytes free)``: where, and how full."""
    free = free_bytes(path.parent)
    left = "" if free is None else f" ({free:,} bytes free)"
    return f"the disk holding {path.parent} is full{left}"
