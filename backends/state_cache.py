"""The local engine's KV state on disk, keyed by what makes it valid: a conversation is never read twice.

After a reply the llama.cpp engine hands its cache (the keys and values of the
ids it holds, :meth:`backends.llama_engine.LlamaEngine.state_bytes`) to a
:class:`StateCache`; before the next prompt is evaluated, in any later process,
the longest saved prefix of that prompt's ids is loaded and only the rest is
evaluated (:mod:`backends.state_restore`).

A cache, never the truth: the history's SQLite rows are the record.  A file is
written to a temporary name, fsynced and renamed, so a reader sees a whole file
or none.  Every part of it is checked before llama.cpp sees a byte (llama.cpp
checks only the shape of what it reads, and a flipped bit in a position or a
cell count is not a shape error), and a file that fails a check is refused with
its reason and deleted.

Layout, under ``~/.cache/tokchat/state/`` (:func:`default_root`, XDG_CACHE_HOME
applies)::

    <key digest>/<n ids>-<digest of the ids>.kv      one saved state
    <key digest>/.<name>.<pid>.tmp                   a write under way (or one a killed process left)

A file::

    MAGIC                                   b"TOKCHAT-KV\\n"
    <u32 format> <u32 header length> <32-byte sha256 of the header>
    header                                  JSON: key, model name, n_ids, sizes and sha256 of ids and payload
    ids                                     n_ids little-endian int32
    payload                                 the engine's state of those ids (llama.cpp: sequence 0)

The key (:class:`StateKey`) is the model file's identity (its size and a hash of
its first MiB and of 64 samples through the rest: no full read; not its mtime, see
:func:`model_identity`), the engine
build (``build.json`` beside libllama) and the context parameters that change
the state's layout or its numbers (KV types, flash attention, offloaded layers,
weight repacking).  The context size is no part of it: a state of N ids loads
into any context of more than N.

Bounded: after each write the least recently used files go until the total is
under ``max_bytes`` (a load counts as a use: it touches the file's mtime).  A
file whose ids are a prefix of a newer file's of the same key is deleted when
the newer one is written: the newer one serves every prompt the older did.

The payload is whatever the engine serialises its cache to: llama.cpp's sequence state, or for MLX
mlx-lm's own prompt-cache file (:mod:`backends.mlx_cache`); the key's build tells them apart.

Not handled: llama-server slots, several sequences.
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import time
from array import array
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from backends.base import common_prefix_length

if TYPE_CHECKING:
    import hashlib

MAGIC = b"TOKCHAT-KV\n"
FORMAT = 1
#: format, header length, sha256 of the header
_PREFIX = struct.Struct("<II32s")
SUFFIX = ".kv"
#: a temporary file older than this was left by a process that died mid-write
_STALE_TMP_S = 3600.0
#: the model file's bytes hashed for its identity: its first MiB (the header) and 64 samples of 16 KiB
_HEAD_BYTES = 1 << 20
_SAMPLES = 64
_SAMPLE_BYTES = 16 << 10


def _sha256(data: bytes | bytearray | memoryview = b"") -> hashlib._Hash:
    """``hashlib.sha256(data)``, imported when a state is keyed or checked: OpenSSL's libcrypto is 3 MiB of
    every process that imports hashlib, and the chat's process imports this module for its paths only."""
    import hashlib

    return hashlib.sha256(data)


class StateRefused(Exception):
    """A saved state that must not be loaded; the message is the reason, in a few words."""


def default_root() -> Path:
    """``~/.cache/tokchat/state`` (the user's cache dir: XDG_CACHE_HOME and platformdirs apply)."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("tokchat", appauthor=False)) / "state"


def model_identity(path: Path) -> str:
    """The model file's identity: its size and a hash of its header and of samples spread through its tensors.

    Reads about 2 MiB whatever the file's size.  Not its mtime: a package reinstalled, a file copied or
    downloaded again, or touched, changes the mtime and not a byte, and a state that would still be exact
    would be thrown away; a file rewritten with other weights differs in the sampled bytes.

    A model directory (MLX's: ``config.json`` and ``*.safetensors``) is the identities of those files, by name."""
    if os.path.isdir(path):
        files = sorted(p for p in Path(path).iterdir() if p.name == "config.json" or p.suffix == ".safetensors")
        if not files:
            raise FileNotFoundError(f"no config.json or .safetensors file in {path}")
        joined = "\0".join(f"{p.name}={model_identity(p)}" for p in files)
        return _sha256(joined.encode()).hexdigest()[:32]
    size = os.stat(path).st_size
    digest = _sha256(f"{size}".encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(_HEAD_BYTES))
        rest = size - _HEAD_BYTES
        if rest > 0:
            for i in range(_SAMPLES):
                fh.seek(_HEAD_BYTES + rest * i // _SAMPLES)
                digest.update(fh.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:32]


def engine_build_key() -> str:
    """The loaded llama.cpp build: ``build.json``'s key and libllama's sha256 (backends/engine_build.py), else
    the bindings' version and libllama's size and mtime (a build tokchat did not make)."""
    from backends.llama_lib import llama_bindings

    llama_cpp = llama_bindings()

    lib = Path(llama_cpp.__file__).parent / "lib"
    # no build.json (a build tokchat did not make) or an unreadable one: the library files name the build
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        info = json.loads((lib / "build.json").read_text())
        return f"{info['key']}-{str(info.get('libllama_sha256', ''))[:16]}"
    for name in ("libllama.so", "libllama.dylib", "llama.dll"):
        try:
            stat = (lib / name).stat()
        except OSError:
            continue
        return f"{llama_cpp.__version__}-{name}-{stat.st_size}-{stat.st_mtime_ns}"
    return f"{llama_cpp.__version__}-unknown"


@dataclass(frozen=True)
class StateKey:
    """What a saved state is valid for; see the module docstring."""

    #: :func:`model_identity` of the model file
    model: str
    #: :func:`engine_build_key`
    build: str
    #: the context parameters that change the state's layout or numbers, as text ("flash_attn=auto ...")
    layout: str

    def digest(self) -> str:
        return _sha256(f"{self.model}\0{self.build}\0{self.layout}".encode()).hexdigest()[:24]

    def difference(self, other: "StateKey") -> str:
        """Why a file saved under ``other`` does not fit this key ("" if it does)."""
        if other.model != self.model:
            return "saved for another model file"
        if other.build != self.build:
            return "saved by another engine build"
        if other.layout != self.layout:
            return f"saved with other context parameters ({other.layout})"
        return ""


def ids_digest(ids: Sequence[int]) -> str:
    return _sha256(_id_bytes(ids)).hexdigest()[:32]


def _id_bytes(ids: Sequence[int]) -> bytes:
    data = array("i", ids)
    if sys.byteorder != "little":
        data.byteswap()
    return data.tobytes()


@dataclass(frozen=True)
class SavedState:
    """One state file's header and ids, read without its payload (:meth:`StateCache.read_payload` reads that)."""

    path: Path
    key: StateKey
    ids: tuple[int, ...]
    model_name: str
    payload_bytes: int
    payload_sha256: str
    #: where the payload starts in the file
    payload_offset: int
    #: when it was written (time.time())
    created: float

    @property
    def size(self) -> int:
        return self.payload_offset + self.payload_bytes


def read_saved(path: Path) -> SavedState:
    """A state file's header and ids, checked (magic, format, header hash, ids hash, file size); raises
    :class:`StateRefused` with the reason."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(MAGIC) + _PREFIX.size)
            if len(head) < len(MAGIC) + _PREFIX.size or not head.startswith(MAGIC):
                raise StateRefused("not a tokchat state file" if len(head) >= len(MAGIC) else "truncated")
            fmt, header_len, header_sha = _PREFIX.unpack(head[len(MAGIC):])
            if fmt != FORMAT:
                raise StateRefused(f"state format {fmt}, this tokchat reads {FORMAT}")
            if header_len > 1 << 20:
                raise StateRefused("corrupt header")
            header_bytes = fh.read(header_len)
            if len(header_bytes) < header_len:
                raise StateRefused("truncated")
            if _sha256(header_bytes).digest() != header_sha:
                raise StateRefused("corrupt header (checksum)")
            header = json.loads(header_bytes)
            n_ids = int(header["n_ids"])
            id_bytes = fh.read(4 * n_ids)
            if len(id_bytes) < 4 * n_ids:
                raise StateRefused("truncated")
            if _sha256(id_bytes).hexdigest() != header["ids_sha256"]:
                raise StateRefused("corrupt ids (checksum)")
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise StateRefused(f"unreadable: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise StateRefused("corrupt header") from exc
    ids = array("i")
    ids.frombytes(id_bytes)
    if sys.byteorder != "little":
        ids.byteswap()
    offset = len(MAGIC) + _PREFIX.size + header_len + 4 * n_ids
    payload_bytes = int(header["payload_bytes"])
    if size < offset + payload_bytes:
        raise StateRefused(f"truncated ({size} of {offset + payload_bytes} bytes)")
    if size > offset + payload_bytes:
        raise StateRefused("corrupt (bytes past the end)")
    try:
        key = StateKey(**header["key"])
    except TypeError as exc:
        raise StateRefused("corrupt header") from exc
    return SavedState(path, key, tuple(ids), str(header.get("model_name", "")), payload_bytes,
                      str(header["payload_sha256"]), offset, float(header.get("created", 0.0)))


@dataclass(frozen=True)
class Match:
    """The saved state that serves a prompt best: ``usable`` of its ids are the prompt's first ids."""

    saved: SavedState
    usable: int


class StateCache:
    """The state files under ``root``; see the module docstring.  One process writes at a time per file name
    (each write has its own temporary name), any number read."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def folder(self, key: StateKey) -> Path:
        return self.root / key.digest()

    # -- finding and reading ---------------------------------------------------------------------------
    def best(self, key: StateKey, prompt: Sequence[int], limit: int) -> tuple[Match | None, str]:
        """The saved state sharing the longest prefix with ``prompt`` (at most ``limit`` ids of it), and the
        reason of the last file refused on the way ("" if none was): a refused file is deleted."""
        found: Match | None = None
        refused = ""
        for path in self._files(self.folder(key)):
            try:
                saved = read_saved(path)
                why = key.difference(saved.key)
                if why:
                    raise StateRefused(why)
            except StateRefused as exc:
                refused = str(exc)
                _remove(path)
                continue
            usable = min(common_prefix_length(saved.ids, prompt), limit)
            if usable > 0 and (found is None or usable > found.usable):
                found = Match(saved, usable)
        return found, refused

    def read_payload(self, saved: SavedState) -> bytearray:
        """The payload of a file :meth:`best` chose, checked against its sha256; a file that fails is deleted.
        The file counts as used now (least recently used goes first)."""
        try:
            with open(saved.path, "rb") as fh:
                fh.seek(saved.payload_offset)
                data = bytearray(saved.payload_bytes)
                got = fh.readinto(data)
        except OSError as exc:
            raise StateRefused(f"unreadable: {exc.strerror or exc}") from exc
        if got != saved.payload_bytes:
            _remove(saved.path)
            raise StateRefused("truncated")
        if _sha256(data).hexdigest() != saved.payload_sha256:
            _remove(saved.path)
            raise StateRefused("corrupt state (checksum)")
        # a read-only cache still serves; its order of use is then its order of writing
        with contextlib.suppress(OSError):
            os.utime(saved.path)
        return data

    def refuse(self, saved: SavedState) -> None:
        """Delete a file llama.cpp itself refused."""
        _remove(saved.path)

    # -- writing ------------------------------------------------------------------------------------------
    def write(self, key: StateKey, ids: Sequence[int], payload: bytes | bytearray, model_name: str = "") -> Path:
        """Save ``payload`` (the state of ``ids``) atomically; then drop what it supersedes and what is over the
        size cap.  Raises OSError (a full disk, a read-only cache) with nothing half-written left behind."""
        folder = self.folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        id_bytes = _id_bytes(ids)
        header = json.dumps({
            "key": asdict(key), "model_name": model_name, "n_ids": len(ids), "created": time.time(),
            "ids_sha256": _sha256(id_bytes).hexdigest(),
            "payload_bytes": len(payload), "payload_sha256": _sha256(payload).hexdigest(),
        }, separators=(",", ":")).encode()
        name = f"{len(ids)}-{ids_digest(ids)}{SUFFIX}"
        path = folder / name
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + _PREFIX.pack(FORMAT, len(header), _sha256(header).digest()))
                fh.write(header)
                fh.write(id_bytes)
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            _remove(tmp)
            raise
        _fsync_dir(folder)
        self._drop_superseded(folder, path, tuple(ids))
        self.evict(keep=path)
        return path

    def _drop_superseded(self, folder: Path, newest: Path, ids: tuple[int, ...]) -> None:
        for path in self._files(folder):
            if path == newest:
                continue
            try:
                saved = read_saved(path)
            except StateRefused:
                continue  # a reader refuses (and deletes) it when it meets it
            if len(saved.ids) <= len(ids) and ids[:len(saved.ids)] == saved.ids:
                _remove(path)

    def evict(self, keep: Path | None = None) -> None:
        """Delete least recently used files until the total is at most ``max_bytes`` (``keep`` last of all),
        and temporary files a killed writer left."""
        files = []
        now = time.time()
        for folder in self._folders():
            for entry in os.scandir(folder):
                try:
                    stat = entry.stat()
                except OSError:
                    continue
                if entry.name.endswith(".tmp"):
                    if now - stat.st_mtime > _STALE_TMP_S:
                        _remove(Path(entry.path))
                elif entry.name.endswith(SUFFIX):
                    files.append((Path(entry.path) == keep, stat.st_mtime, stat.st_size, Path(entry.path)))
        total = sum(size for _, _, size, _ in files)
        for _, _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            _remove(path)
            total -= size

    # -- listing ------------------------------------------------------------------------------------------
    def entries(self) -> list[tuple[SavedState | None, Path, str]]:
        """Every state file: (its header or None, its path, why it is refused or "")."""
        out: list[tuple[SavedState | None, Path, str]] = []
        for folder in self._folders():
            for path in self._files(folder):
                try:
                    out.append((read_saved(path), path, ""))
                except StateRefused as exc:
                    out.append((None, path, str(exc)))
        return out

    def total_bytes(self) -> int:
        return sum(_size(path) for folder in self._folders() for path in self._files(folder))

    def clear(self) -> tuple[int, int]:
        """Delete every state file (and temporary one); (files, bytes) deleted."""
        count = size = 0
        for folder in self._folders():
            for entry in os.scandir(folder):
                if entry.name.endswith((SUFFIX, ".tmp")):
                    size += _size(Path(entry.path))
                    count += entry.name.endswith(SUFFIX)
                    _remove(Path(entry.path))
            with contextlib.suppress(OSError):  # something else is in it (a write under way): left as it is
                folder.rmdir()
        return count, size

    def _folders(self) -> list[Path]:
        try:
            return [Path(e.path) for e in os.scandir(self.root) if e.is_dir()]
        except OSError:
            return []

    @staticmethod
    def _files(folder: Path) -> list[Path]:
        try:
            return [Path(e.path) for e in os.scandir(folder) if e.name.endswith(SUFFIX) and not e.name.startswith(".")]
        except OSError:
            return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _remove(path: Path) -> None:
    """Delete a cache file.  Gone already (another process cleaned up first) or undeletable (a read-only cache:
    the file stays and is refused again next time, which costs a read): nothing more to do either way."""
    with contextlib.suppress(OSError):
        path.unlink()


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a platform without directory fds skips it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # a filesystem that cannot sync a directory: as durable as it allows
            os.fsync(fd)
    finally:
        os.close(fd)
