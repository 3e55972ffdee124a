"""The GGUFs already in the Hugging Face cache: find them without the network, and delete them.

The cache is huggingface_hub's own layout (``models--ORG--REPO/`` with
``blobs/<sha256>``, ``snapshots/<commit>/<path>`` links to the blobs and
``refs/<branch>`` holding a commit); huggingface_hub writes it, this module
only reads it, except :func:`remove_model`, which unlinks one model file's
links and the blobs no other link uses (huggingface_hub's own cache API
deletes whole revisions, which would take every other quantization too).

Everything here is local: this is what answers at once when offline.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.models.gguf_choice import SPLIT, RepoGGUF, choose, repo_ggufs, with_tag
from app.models.hub_ref import HubRef

PARTIAL_SUFFIX = ".incomplete"


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, from the environment as it is now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hf_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (as the environment is now) says the cache must answer alone."""
    value = os.environ.get("HF_HUB_OFFLINE")
    if value is not None:
        return value.strip().lower() in ("1", "on", "yes", "true")
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def storage_dir(cache: Path, repo_id: str) -> Path:
    """``<cache>/models--ORG--REPO`` (huggingface_hub's naming)."""
    from huggingface_hub.file_download import repo_folder_name

    return cache / repo_folder_name(repo_id=repo_id, repo_type="model")


def snapshot_dir(cache: Path, repo_id: str, revision: str = "main") -> Path | None:
    """The snapshot ``refs/<revision>`` points at, else the newest snapshot, else None."""
    storage = storage_dir(cache, repo_id)
    ref = storage / "refs" / revision
    if ref.is_file():
        snapshot = storage / "snapshots" / ref.read_text().strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = [p for p in (storage / "snapshots").glob("*") if p.is_dir()]
    return max(snapshots, key=lambda p: p.stat().st_mtime) if snapshots else None


def cached_ggufs(cache: Path, repo_id: str, revision: str = "main") -> tuple[list[RepoGGUF], Path | None]:
    """The complete model files of one repo's snapshot (a split with a part missing is left out)."""
    snapshot = snapshot_dir(cache, repo_id, revision)
    if snapshot is None:
        return [], None
    files = [(p.relative_to(snapshot).as_posix(), p.stat().st_size, "")
             for p in sorted(snapshot.rglob("*.gguf")) if p.exists()]  # exists(): not a dangling link
    return repo_ggufs(files), snapshot


def cached_model(ref: HubRef, cache: Path, memory: int | None = None) -> Path | None:
    """The local file (part 1 of a split) ``ref`` names, if the cache has all of it; never the network."""
    ggufs, snapshot = cached_ggufs(cache, ref.repo_id, ref.revision)
    if snapshot is None:
        return None
    if ref.filename:
        wanted = ref.filename
        match = SPLIT.search(wanted)
        for gguf in ggufs:
            if wanted in gguf.paths or (match and gguf.split and gguf.path.startswith(wanted[:match.start()])):
                return snapshot / gguf.path
        return None
    if not ggufs:
        return None
    if ref.quant and ref.preset is None:  # a tag the user typed: that file or nothing
        found = with_tag(ggufs, ref.quant)
        return snapshot / found.path if found else None
    # a bare repo or a preset: the preset's quantization if cached, else the best cached one
    gguf, _ = choose(ggufs, preset_quant=ref.quant, memory=memory)
    return snapshot / gguf.path


@dataclass
class Removal:
    """What :func:`remove_model` deleted."""

    links: list[Path]
    blobs: list[Path]
    freed: int


def model_files(path: Path) -> list[Path]:
    """A model file and, for part 1 of a split, every part beside it."""
    match = SPLIT.search(path.name)
    if not match:
        return [path]
    stem, count = path.name[:match.start()], int(match[2])
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def remove_model(path: Path, cache: Path) -> Removal:
    """Delete a cached model file (every part of a split): its links in every snapshot of the
    repo, and each blob no remaining link points to.  ``path`` must be inside ``cache``."""
    path = Path(os.path.abspath(path))
    cache = Path(os.path.abspath(cache))
    relative = path.relative_to(cache)  # ValueError: not a cached file
    storage = cache / relative.parts[0]
    snapshot_rel = Path(*relative.parts[3:])  # models--X / snapshots / <commit> / path
    parts = [snapshot_rel.parent / p.name for p in model_files(path)]
    links, blobs, freed = [], [], 0
    targets: set[Path] = set()
    for snapshot in (storage / "snapshots").glob("*"):
        for part in parts:
            link = snapshot / part
            if link.is_symlink() or link.exists():
                if link.is_symlink():
                    targets.add(Path(os.path.realpath(link)))
                link.unlink()
                links.append(link)
    still_used = {Path(os.path.realpath(p)) for p in (storage / "snapshots").rglob("*") if p.is_symlink()}
    for blob in sorted(targets - still_used):
        if blob.is_file() and blob.parent == storage / "blobs":
            freed += blob.stat().st_size
            blob.unlink()
            blobs.append(blob)
    for snapshot in (storage / "snapshots").glob("*"):  # prune folders left empty
        for folder in sorted((p for p in snapshot.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if not any(folder.iterdir()):
                folder.rmdir()
    return Removal(links, blobs, freed)
