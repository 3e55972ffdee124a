"""The models this machine has, recently used first: what ``tokchat models`` prints and ``/model`` offers.

:func:`app.models.resolution.list_models` finds the models (the bundled one,
the directories in ``model.dirs``, the Hugging Face cache) and reads their
headers; this module adds when each was last used and the exact ``--model``
value that opens it, and orders them.  "Last used" is not stored anywhere
new: it is the newest activity of a stored conversation with that model,
read from the history database (when there is one).

Not handled: models only reachable on the hub (``tokchat pull --list``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from app.models.resolution import ModelInfo, list_models


@dataclass
class CatalogEntry:
    """One model of the list."""

    info: ModelInfo
    #: what ``--model`` / ``/model`` takes to open it
    model_arg: str
    #: newest activity (epoch seconds) of a conversation with this model, None when never used
    last_used: float | None = None

    def as_json(self) -> dict:
        m = self.info
        return {"model": self.model_arg, "path": str(m.path), "kind": m.kind, "size_bytes": m.size_bytes,
                "architecture": m.architecture, "name": m.name, "quantization": m.quantization,
                "context_length": m.context_length, "source": m.source, "last_used": self.last_used,
                "vocabulary_only": m.vocabulary_only}


def model_arg(info: ModelInfo) -> str:
    if info.source == "bundled":
        return "(default)"
    if info.source.startswith("hf:") and info.kind == "gguf":
        return info.source
    return str(info.path)


def _key(path: str | Path) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def last_used_times(db_path: Path | None = None) -> dict[str, float]:
    """Resolved model path -> newest conversation activity, from the history database (no database: {})."""
    from app.history.store import ChatStore, StoreError, default_db_path

    db_path = db_path or default_db_path()
    if not db_path.is_file():
        return {}
    try:
        with ChatStore(db_path) as store:
            conversations = store.list_conversations()
    except StoreError:
        return {}  # history unreadable: the list is still useful without the order
    times: dict[str, float] = {}
    for conv in conversations:  # newest first: the first seen per model is its latest use
        if conv.model_path:
            times.setdefault(_key(conv.model_path), conv.updated_at)
    return times


def catalog(dirs: list[Path] | None = None, db_path: Path | None = None) -> tuple[list[CatalogEntry], list[str]]:
    """Every model found, recently used first (then in finding order), and one line per unreadable one."""
    models, problems = list_models(dirs)
    used = last_used_times(db_path)
    entries = [CatalogEntry(m, model_arg(m), used.get(_key(m.path))) for m in models]
    order = {id(e): i for i, e in enumerate(entries)}
    entries.sort(key=lambda e: (e.last_used is None, -(e.last_used or 0), order[id(e)]))
    return entries, problems


def human_age(when: float | None, now: float | None = None) -> str:
    """``5 min ago`` / ``3 h ago`` / ``2 d ago``, or ``-`` for never."""
    if when is None:
        return "-"
    seconds = max((now or time.time()) - when, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"
