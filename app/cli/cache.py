"""``tokchat cache [list|clear]``: the engine's KV states kept on disk (``[state]``, backends.state_cache).

``list`` (the default) prints one line per saved state, most recently used first:
the conversation it belongs to, the model, its ids, its size and when it was
last used, then the total and the folder.  A state names no conversation (the
engine that wrote it knows only ids); the conversation is found in the history
by its ids: a state ends with a stored reply's ids as generated (all but the
reply's last, which the engine never evaluates).  ``clear`` deletes them all.

A llama-server started with ``--slot-save-path`` keeps its slots in files on its own
disk; tokchat keeps the index of which file holds which ids (backends.remote_slots).
``list`` gives those entries too (conversation, model, ids, the server's file name,
last used), and ``clear`` forgets them: the server's files stay where the server put
them (tokchat cannot delete files on a server's disk), and are never asked for again.

States are a cache: clearing them loses nothing but time (the next resumed
conversation is evaluated from its text again).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from app.cli.terminal import cell, shown

#: the reply ids a state's tail is matched on: at most _TAIL, at least _MIN_TAIL (a shorter reply names no owner)
_TAIL = 12
_MIN_TAIL = 4
#: conversations searched for the states' owners, newest first
_CONVERSATIONS = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=("list", "clear"), default="list",
                        help="list the saved states (the default) or delete them all")


def state_folder() -> Path:
    """Where the states are, as the settings say (``[state] dir``, else the user's cache dir)."""
    from app.settings.merge import read_settings, state_root

    return state_root(read_settings().values)


def state_line(options: Any) -> str:
    """``doctor``'s line: the states' folder, their size and the cap, or that they are off (``options``: the
    chat's ChatOptions)."""
    from app.models.hub import human_bytes
    from backends.state_cache import StateCache

    if options.state_dir is None:
        return f"engine state cache: off ([state] enabled = false or --no-state); folder {state_folder()}"
    cache = StateCache(options.state_dir, max_bytes=0)
    return (f"engine state cache: {len(cache.entries())} state(s), {human_bytes(cache.total_bytes())} of at most "
            f"{options.state_max_gib:g} GiB in {options.state_dir} (`tokchat cache` lists them)")


def run(args: argparse.Namespace) -> int:
    from app.models.hub import human_bytes
    from backends.remote_slots import forget_slots, indexed_slots
    from backends.state_cache import StateCache

    root = state_folder()
    cache = StateCache(root, max_bytes=0)
    if args.action == "clear":
        count, size = cache.clear()
        print(f"deleted {count} saved state(s), {human_bytes(size)}, from {root}")
        if forgotten := forget_slots(root):
            print(f"forgot {forgotten} llama-server slot file(s): the files stay in the server's --slot-save-path "
                  "(delete them there); tokchat no longer asks for them")
        return 0
    entries = cache.entries()
    slots = indexed_slots(root)
    owners = _owners() if entries or slots else {}
    if not entries:
        print(f"no saved states in {root}")
    else:
        _print_states(entries, owners, root, cache.total_bytes())
    if slots:
        _print_slots(slots, owners)
    return 0


def _owner(owners: dict[tuple[int, ...], str], ids: tuple[int, ...]) -> str:
    return next((owners[tail] for n in range(_TAIL, _MIN_TAIL - 1, -1) if (tail := ids[-n:]) in owners), "")


def _print_states(entries: list, owners: dict[tuple[int, ...], str], root: Path, total: int) -> None:
    from app.models.hub import human_bytes

    now = time.time()
    rows = []
    for saved, path, refused in entries:
        used = _mtime(path)
        if saved is None:
            rows.append((used, ["?", "?", "?", human_bytes(_size(path)), _age(now - used), f"refused: {refused}"]))
            continue
        owner = _owner(owners, saved.ids)
        rows.append((used, [owner or "-", saved.model_name or "?", f"{len(saved.ids):,}", human_bytes(saved.size),
                            _age(now - used), ""]))
    rows.sort(key=lambda row: -row[0])
    table = [["conversation", "model", "ids", "size", "last used", ""]] + [cells for _, cells in rows]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    for cells in table:  # titles are the user's text: inert on a terminal (app.cli.terminal)
        print(shown("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
                    + (f"  {cells[5]}" if cells[5] else "")))
    print(f"{len(entries)} state(s), {human_bytes(total)} in {root} (`tokchat cache clear` deletes them)")


def _print_slots(slots: list, owners: dict[tuple[int, ...], str]) -> None:
    """The llama-server slot files tokchat has indexed (backends.remote_slots.IndexedSlot), newest first."""
    now = time.time()
    print()
    table = [["conversation", "model", "ids", "server's file", "last used"]]
    for slot in sorted(slots, key=lambda s: -s.used):
        table.append([_owner(owners, slot.entry.ids) or "-", cell(Path(slot.model).name) or "?",
                      f"{len(slot.entry.ids):,}", cell(slot.entry.filename), _age(now - slot.used)])
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    print("llama-server slots saved on the servers' disks (tokchat's index of them):")
    for cells in table:  # the model is named by the server: inert on a terminal
        print(shown("  ".join(c.rjust(w) if i == 2 else c.ljust(w)
                              for i, (c, w) in enumerate(zip(cells, widths))).rstrip()))
    print(f"{len(slots)} slot file(s) indexed (`tokchat cache clear` forgets them; the files stay on the server)")


def _owners() -> dict[tuple[int, ...], str]:
    """The last ids a state of each stored reply would end with -> "ID title"; {} without a history."""
    from app.history.store import ChatStore, StoreError, default_db_path

    if not default_db_path().exists():
        return {}
    owners: dict[tuple[int, ...], str] = {}
    try:
        with ChatStore(readonly=True) as store:
            for info in reversed(store.list_conversations(limit=_CONVERSATIONS)):  # the newest wins a tie
                for message in _all_messages(store, info.id):
                    ids = message.reply_ids
                    if message.role == "assistant" and ids is not None and len(ids) > _MIN_TAIL:
                        owners[tuple(ids[:-1][-_TAIL:])] = f"{info.id} {_short(info.title)}"
    except StoreError as exc:
        print(f"tokchat: the history could not be read ({exc}): conversations are not named", file=sys.stderr)
    return owners


def _all_messages(store: Any, conv_id: int) -> list:
    conversation = store.load(conv_id)
    return [*conversation.messages, *conversation.branches]


def _short(title: str, width: int = 32) -> str:
    title = " ".join(title.split())
    return title if len(title) <= width else title[: width - 1] + "…"


def _age(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.0f} {unit} ago"
    return "just now"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
