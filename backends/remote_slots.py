"""llama-server's slots kept on its disk between runs: a resumed conversation is not read twice there either.

llama-server saves a slot's KV cache and its ids to a file and restores it (``POST
/slots/<id>?action=save|restore`` with a ``filename``), but only when it was started with
``--slot-save-path DIR``, and only when asked.  Read from the server's sources (llama.cpp
as vendored in llama-cpp-python 0.3.36, ``tools/server/server-context.cpp``): ``/props``
does not say whether a save path was given, so :func:`server_state` asks ``POST
/slots/0?action=tokchat-probe``, which does nothing either way: a server without the path
answers 501 ("Start it with `--slot-save-path`"), one with it 400 ("Invalid action").
A save answers ``n_saved`` (the slot's ids) and a restore ``n_restored``; a restore that
fails (the file gone, another model's, a context too small) answers 400 and leaves the
slot empty.  The server restores the file's own ids with the cache, and compares them with
the next prompt itself, so nothing tokchat records can make it reuse a wrong cache.

:class:`SlotKeeper` (on a server with the path, and states on: ``[state] enabled``):

- **after a reply** it records which ids the slot holds (the prompt and the reply but its
  last id: the final event's ``tokens_cached``) and asks the server, on a thread of its own,
  to save the slot; the reply never waits for it, and closing the chat waits at most
  :data:`backends.remote.CLOSE_WAIT_S` (the server finishes a save it was sent either way);
- **before a prompt** in a later process (``--resume``, the TUI's history, a server
  restarted) it restores the saved file sharing the longest prefix with the prompt's ids
  into the slot it was saved from, and sends the prompt to that slot: the server evaluates
  only the rest.  The stats say ``state: loaded N ids from disk in T s``, or ``none (why)``.

The server only stores files, so the record of which file holds which ids is tokchat's
(:class:`SlotIndex`), under the state cache's folder (``~/.cache/tokchat/state/llama-server/``),
keyed like the local states by what makes a state valid, as the server reports it: the
model's path, size, parameters, type and the server's build (``ServerInfo.identity``).

A later save of ids that extend a saved file's ids writes over that same file (one file
per branch of a conversation on the server's disk, which tokchat cannot delete files on).

Not handled: a server that restores into a slot another client is using (the restore
waits for it), router-mode servers, multimodal slots.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from backends.base import BackendError, GenerationStats, common_prefix_length
from backends.remote_protocol import Request, SaidOnce, ServerCounts, ServerState, error_message
from backends.state_keeper import MIN_GAIN, MIN_IDS

#: the index's folder under the state cache's root
FOLDER = "llama-server"
#: an action no server knows: its answer says whether slots can be saved, and nothing is done
_PROBE = "tokchat-probe"


@dataclass(frozen=True)
class SlotEntry:
    """One file the server was asked to save: its name there, the slot it came from, the ids it holds."""

    #: the index's own file (``<server file name>.json``)
    path: Path
    #: the file's name in the server's --slot-save-path
    filename: str
    slot: int
    ids: tuple[int, ...]


def _digest(text: str | Sequence[int]) -> str:
    data = text.encode() if isinstance(text, str) else ",".join(map(str, text)).encode()
    return hashlib.sha256(data).hexdigest()


class SlotIndex:
    """tokchat's record of the slot files one served model has on the server's disk.

    Layout: ``<root>/<key digest>/<server file name>.json``, each ``{"key", "filename", "slot",
    "ids"}``, written to a temporary name and renamed.  An entry that cannot be read is deleted."""

    def __init__(self, root: Path, key: str) -> None:
        self.key = key
        self.folder = Path(root) / _digest(key)[:24]

    def entries(self) -> list[SlotEntry]:
        found = []
        for path in _listing(self.folder, (".json",)):
            try:
                entry, key = _read_entry(path)
                if key != self.key:
                    raise ValueError("another key")
                found.append(entry)
            except _UNREADABLE:
                _remove(path)  # torn or foreign: the server's file is then just not used
        return found

    def best(self, prompt: Sequence[int], limit: int) -> tuple[SlotEntry | None, int]:
        """The entry sharing the longest prefix with ``prompt`` (at most ``limit`` ids) and that length."""
        found, usable = None, 0
        for entry in self.entries():
            shared = min(common_prefix_length(entry.ids, prompt), limit)
            if shared > usable:
                found, usable = entry, shared
        return found, usable

    def record(self, ids: Sequence[int], slot: int) -> SlotEntry:
        """The entry for a save of ``ids`` from ``slot``: the file of a saved prefix of ``ids`` is written over
        (its entry goes), else a new file is named.  Raises OSError (a read-only cache)."""
        ids = tuple(ids)
        superseded = [e for e in self.entries() if len(e.ids) <= len(ids) and ids[:len(e.ids)] == e.ids]
        if superseded:
            filename = max(superseded, key=lambda e: len(e.ids)).filename
        else:
            filename = f"tokchat-{_digest(self.key)[:12]}-{_digest(ids)[:24]}.slot"
        entry = self.write(SlotEntry(self.folder / f"{filename}.json", filename, slot, ids))
        for old in superseded:
            if old.path != entry.path:
                _remove(old.path)
        return entry

    def write(self, entry: SlotEntry) -> SlotEntry:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = entry.path.with_name(f".{entry.path.name}.{os.getpid()}.tmp")
        body = {"key": self.key, "filename": entry.filename, "slot": entry.slot, "ids": list(entry.ids),
                "created": time.time()}
        try:
            tmp.write_text(json.dumps(body, separators=(",", ":")))
            os.replace(tmp, entry.path)
        except BaseException:
            _remove(tmp)
            raise
        return entry

    def forget(self, entry: SlotEntry) -> None:
        _remove(entry.path)


class SlotKeeper:
    """Saves the slot after a reply and restores the best saved one before a prompt; see the module docstring.
    ``prepare`` and ``after`` run on the turn's thread, the saves on a thread of their own."""

    def __init__(self, backend: Any, index: SlotIndex, slots: int) -> None:
        #: the backends.remote.RemoteBackend whose connection the slot requests use
        self._backend = backend
        self.index = index
        self._slots = max(1, slots)
        #: the ids the server's slot held after this process's last turn (its own cache serves those)
        self._held: tuple[int, ...] = ()
        #: the ids last recorded: not saved again
        self._saved: tuple[int, ...] = ()
        #: why the last save failed, said in the next turn's stats
        self._failed = ""
        self._lock = threading.Lock()
        self._pending: SlotEntry | None = None
        self._writer: threading.Thread | None = None

    # -- before a prompt ---------------------------------------------------------------------------------
    def prepare(self, prompt: list[int], request: Request, stats: GenerationStats) -> Request:
        stats.state, slot = self._restore(prompt)
        if slot is None:
            return request
        return Request(request.method, request.path, {**(request.body or {}), "id_slot": slot})

    def _restore(self, prompt: list[int]) -> tuple[str, int | None]:
        """The stats' note and the slot restored into (None: none was)."""
        failed, self._failed = self._failed, ""
        limit = len(prompt) - 1  # the last prompt id is always evaluated: its logits pick the first reply id
        held = common_prefix_length(self._held, prompt)
        if held >= MIN_GAIN and held + MIN_GAIN > limit:
            return (f"none ({failed})" if failed else ""), None  # a later turn: the server's own cache serves
        try:
            entry, usable = self.index.best(prompt, limit)
        except OSError as exc:
            return f"none (the slot index is unreadable: {exc.strerror or exc})", None
        if entry is None or usable < held + MIN_GAIN:
            if failed:
                return f"none ({failed})", None
            return ("" if held >= MIN_GAIN else "none (nothing saved for these ids)"), None
        slot = entry.slot if entry.slot < self._slots else 0
        started = time.perf_counter()
        status, body = _post(self._backend, f"/slots/{slot}?action=restore", {"filename": entry.filename})
        if status != 200 or not isinstance(body, dict):
            self.index.forget(entry)
            self._held = ()  # a failed restore empties the slot
            return f"none (llama-server could not restore {entry.filename}: {_why(status, body)})", None
        restored = int(body.get("n_restored") or 0)
        self._held = entry.ids[:restored]
        with contextlib.suppress(OSError):  # `tokchat cache` says when an entry was last used
            os.utime(entry.path)
        return f"loaded {min(usable, restored)} ids from disk in {time.perf_counter() - started:.2f} s", slot

    # -- after a reply -----------------------------------------------------------------------------------
    def after(self, ids: list[int], counts: ServerCounts) -> None:
        """Record what the slot holds now and hand its save to the writer thread."""
        n = counts.held if counts.held is not None else len(ids) - 1  # a stopped reply: its last id unevaluated
        kept = tuple(ids[:max(0, min(n, len(ids)))])
        self._held = kept
        if len(kept) < MIN_IDS or kept == self._saved:
            return
        slot = counts.slot if counts.slot is not None and 0 <= counts.slot < self._slots else 0
        try:
            # recorded before the save is sent: a chat that quits before the server answers still finds it (the
            # server saves what it was sent); a file that never came is a failed restore, said in one note
            entry = self.index.record(kept, slot)
        except OSError as exc:
            self._failed = f"not saved: the slot index is not writable ({exc.strerror or exc})"
            return
        self._saved = kept
        with self._lock:
            self._pending = entry
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._save, name="tokchat-slot-saver", daemon=True)
                self._writer.start()

    def _save(self) -> None:
        while True:
            with self._lock:
                entry, self._pending = self._pending, None
                if entry is None:
                    self._writer = None
                    return
            status, body = _post(self._backend, f"/slots/{entry.slot}?action=save", {"filename": entry.filename})
            if status != 200 or not isinstance(body, dict):
                self.index.forget(entry)
                self._failed = f"not saved: llama-server could not save {entry.filename} ({_why(status, body)})"
                continue
            saved = int(body.get("n_saved") or 0)
            if saved < len(entry.ids):  # the slot held fewer ids than recorded: record what the file holds
                with contextlib.suppress(OSError):  # unwritable now: the restore then finds less than recorded
                    self.index.write(SlotEntry(entry.path, entry.filename, entry.slot, entry.ids[:saved]))

    def flush(self, timeout: float) -> None:
        writer = self._writer
        if writer is not None:
            writer.join(timeout)


def _post(backend: Any, path: str, body: dict[str, Any], patience: float | None = None) -> tuple[int, Any]:
    """``POST path`` on ``backend``'s connection: (status, JSON or None); (0, the reason) when it failed.

    A save or restore waits in the server's queue behind other work, so it gets the turn's patience."""
    import httpx

    from backends.remote import _send

    settings = backend.settings
    total = patience if patience is not None else settings.first_token_timeout_s + settings.idle_timeout_s
    try:
        resp = _send(backend.client, Request("POST", path, body), settings.url, total,
                     None if patience is not None else backend.generation_timeout,
                     "server.connect_timeout" if patience is not None else
                     "server.first_token_timeout + server.idle_timeout")
    except (httpx.HTTPError, BackendError, RuntimeError) as exc:  # RuntimeError: the chat closed the client
        return 0, f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, None


def _why(status: int, body: Any) -> str:
    if status == 0:
        return str(body)
    return error_message(body) or f"HTTP {status}"


def server_state(backend: Any, state_dir: Path | None) -> ServerState:
    """What ``backend`` (a connected backends.remote.RemoteBackend) does about the server's state: nothing with
    states off (``state_dir`` None), slots saved and restored on a llama-server that can save them, else the
    adapter's one line (vLLM, SGLang, llama-server without --slot-save-path)."""
    adapter = backend.adapter
    if state_dir is None:
        return SaidOnce("")
    if adapter.kind != "llamacpp" or backend.server is None:
        return SaidOnce(adapter.state_note)
    status, body = _post(backend, f"/slots/0?action={_PROBE}", {}, patience=backend.settings.connect_timeout_s)
    if status != 400 or "action" not in _why(status, body):  # 501: no --slot-save-path; else: not one that can
        return SaidOnce(adapter.state_note)
    server = backend.server
    key = f"{server.model}\0{server.identity}"
    return SlotKeeper(backend, SlotIndex(Path(state_dir) / FOLDER, key), int(server.slots or 1))


@dataclass(frozen=True)
class IndexedSlot:
    """One slot file tokchat asked a llama-server to save, as ``tokchat cache`` lists it."""

    entry: SlotEntry
    #: the served model as the server named it (the first part of the index's key)
    model: str
    #: when tokchat last wrote or read the entry (its file's mtime)
    used: float


def indexed_slots(state_root: Path) -> list[IndexedSlot]:
    """Every entry of every server's slot index under ``state_root`` (the state cache's root), unreadable ones
    left out (a restore deletes them); [] without an index."""
    found: list[IndexedSlot] = []
    for folder in _index_folders(state_root):
        for path in _listing(folder, (".json",)):
            try:
                entry, key = _read_entry(path)
                found.append(IndexedSlot(entry, key.split("\0", 1)[0], path.stat().st_mtime))
            except _UNREADABLE:
                continue
    return found


def forget_slots(state_root: Path) -> int:
    """Delete every server's slot index under ``state_root``: the number of entries forgotten.  The servers' own
    files stay in their ``--slot-save-path`` (tokchat has no way to delete files there); unindexed, tokchat never
    asks for them again."""
    count = 0
    for folder in _index_folders(state_root):
        for path in _listing(folder, (".json", ".tmp")):
            count += path.suffix == ".json"
            _remove(path)
        with contextlib.suppress(OSError):  # a write under way left a file: the folder stays
            folder.rmdir()
    return count


#: what reading an index file can raise: gone, torn, not JSON, a field missing or of the wrong type
_UNREADABLE = (OSError, ValueError, KeyError, TypeError)


def _read_entry(path: Path) -> tuple[SlotEntry, str]:
    """One index file: its entry and the key it was written under (raises one of :data:`_UNREADABLE`)."""
    data = json.loads(path.read_text())
    return SlotEntry(path, str(data["filename"]), int(data["slot"]), tuple(int(t) for t in data["ids"])), \
        str(data["key"])


def _listing(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files in ``folder`` whose names end with one of ``suffixes``; [] for a folder gone or unreadable."""
    try:
        return [Path(e.path) for e in os.scandir(folder) if e.name.endswith(suffixes)]
    except OSError:
        return []


def _index_folders(state_root: Path) -> list[Path]:
    """One folder per served model (its key's digest) under the state cache's root."""
    try:
        return [Path(e.path) for e in os.scandir(Path(state_root) / FOLDER) if e.is_dir()]
    except OSError:
        return []


def _remove(path: Path) -> None:
    """Delete an index file; gone already or undeletable (a read-only cache): nothing more to do."""
    with contextlib.suppress(OSError):
        path.unlink()
