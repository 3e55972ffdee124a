"""Cached tables are read back only when intact and current; anything else is rebuilt and rewritten."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenizer import accel, table_cache
from tokenizer.table_cache import cached_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TOKCHAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class Builder:
    """A table builder that counts its calls."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.payload


def test_built_once_then_read_back(cache):
    build = Builder(bytes(range(256)) * 100)
    assert cached_table("t", "key 1", build) == build.payload
    assert cached_table("t", "key 1", build) == build.payload
    assert build.calls == 1
    assert (cache / "t.bin").stat().st_size < len(build.payload)  # stored compressed


@pytest.mark.parametrize("damage", ["flip a payload byte", "truncate", "empty", "other magic", "flip the checksum"])
def test_a_corrupt_cache_file_is_detected_and_rebuilt(cache, damage):
    build = Builder(b"0123456789" * 1000)
    cached_table("t", "key", build)
    path = cache / "t.bin"
    data = bytearray(path.read_bytes())
    crc_at = len(table_cache.MAGIC) + 4 + len("key")
    if damage == "flip a payload byte":
        data[-5] ^= 0xFF
    elif damage == "truncate":
        del data[len(data) // 2 :]
    elif damage == "empty":
        data = bytearray()
    elif damage == "other magic":
        data[:4] = b"JUNK"
    else:
        data[crc_at] ^= 0x01
    path.write_bytes(bytes(data))
    assert cached_table("t", "key", build) == build.payload
    assert build.calls == 2
    assert table_cache._decode("key", path.read_bytes()) == build.payload  # rewritten, intact again


def test_a_zlib_stream_that_decodes_to_other_bytes_is_caught_by_the_checksum(cache):
    build = Builder(b"the real table")
    cached_table("t", "key", build)
    path = cache / "t.bin"
    forged = table_cache._encode("key", b"another table")
    good = path.read_bytes()
    stream_at = len(table_cache.MAGIC) + 4 + len("key") + 8
    path.write_bytes(good[:stream_at] + forged[stream_at:])  # a valid stream, but not what the checksum says
    assert cached_table("t", "key", build) == b"the real table"
    assert build.calls == 2


def test_a_stale_key_is_never_read_back(cache):
    old, new = Builder(b"built by regex 1"), Builder(b"built by regex 2")
    cached_table("t", "regex=1", old)
    assert cached_table("t", "regex=2", new) == b"built by regex 2"
    assert new.calls == 1
    assert cached_table("t", "regex=2", new) == b"built by regex 2" and new.calls == 1


def test_an_unwritable_cache_directory_still_gives_the_table(tmp_path, monkeypatch):
    blocker = tmp_path / "a file, not a directory"
    blocker.write_text("")
    monkeypatch.setenv("TOKCHAT_CACHE_DIR", str(blocker / "cache"))
    build = Builder(b"table")
    assert cached_table("t", "key", build) == b"table"
    assert cached_table("t", "key", build) == b"table"
    assert build.calls == 2


def test_flag_table_from_the_cache_equals_the_built_one(cache):
    expected = accel.build_flag_table(True)
    assert expected[ord("a")] == accel.FLAG_L and expected[ord("7")] == accel.FLAG_N
    accel._tables.clear()
    assert accel.flag_table(True) == expected
    assert (cache / "flags-llama.bin").is_file()
    # a fresh process reads the file back and encodes with it exactly as with the built table
    code = ("from tokenizer import accel; import sys; "
            "t = accel.flag_table(True); sys.stdout.write(str(t == accel.build_flag_table(True)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                          env={**os.environ, "TOKCHAT_CACHE_DIR": str(cache)})
    assert done.stdout == "True"
    accel._tables.clear()
