"""``tokchat rm REF``: delete a downloaded model from the Hugging Face cache, after a confirmation.

REF is what ``tokchat models`` prints (``hf:ORG/REPO/FILE.gguf``), any other
``hf:`` form, a preset name, or a path inside the cache.  Only the model's
files go (every part of a split); other files of the repo stay.  Files
outside the cache (``model.dirs``, ``--model PATH``) are the user's and are
never deleted here.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", help="hf:ORG/REPO/FILE.gguf (as `tokchat models` shows), hf:ORG/REPO:QUANT, "
                        "a preset name or a path in the cache")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def _cached_path(value: str, cache: Path) -> Path | None:
    """The cached file ``value`` names; a malformed ``hf:`` reference is one line, as ``pull`` says it."""
    from app.errors import CLIError
    from app.models.hub_cache import cached_model
    from app.models.hub_ref import RefError, model_ref

    path = Path(value).expanduser()
    if path.exists():
        return path.absolute()
    try:
        ref = model_ref(value)
    except RefError as exc:
        raise CLIError(str(exc)) from None
    return cached_model(ref, cache) if ref is not None else None


def run(args: argparse.Namespace) -> int:
    from app.errors import CLIError
    from app.models.hub import human_bytes, hub_settings
    from app.models.hub_cache import model_files, remove_model

    cache = hub_settings().cache
    path = _cached_path(args.ref, cache)
    if path is None:
        raise CLIError(f"{args.ref}: not in the Hugging Face cache {cache} (`tokchat models` lists what is)")
    try:
        path.absolute().relative_to(cache.absolute())
    except ValueError:
        raise CLIError(f"{path} is not in the Hugging Face cache {cache}: tokchat deletes only models it "
                       "downloaded; delete this file yourself") from None
    parts = [p for p in model_files(path) if p.exists()]
    size = sum(p.stat().st_size for p in parts)
    what = f"{args.ref} ({human_bytes(size)}{f', {len(parts)} parts' if len(parts) > 1 else ''})"
    if not args.yes:
        print(f"Delete {what}? [y/N] ", end="", flush=True, file=sys.stderr)
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return 1
    removal = remove_model(path, cache)
    print(f"deleted {what}: {human_bytes(removal.freed)} freed", file=sys.stderr)
    return 0
