"""tokchat's changes to the llama.cpp sources in the llama-cpp-python sdist, applied before every build.

Both builds of llama.cpp that tokchat makes (the engine wheel ``dev.py``
installs, and the ``llama-server`` the tests run) start from the pinned
sdist and apply every ``backends/patches/*.patch`` first, so the two
engines are the same code.  Each patch file starts with why it exists and
its upstream reference.  Standard library only: ``dev.py`` runs this before
any virtual environment exists.

The patches are unified diffs with paths relative to llama.cpp's root
(``a/ggml/...``); :func:`apply_patch` applies each hunk by its exact
context, and refuses loudly when the context is not found once.  Not
handled: fuzzy offsets, file creation or deletion.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

PATCHES_DIR = Path(__file__).resolve().parent / "patches"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


class PatchError(RuntimeError):
    """A patch does not fit the sources it is applied to."""


def patch_files() -> list[Path]:
    return sorted(PATCHES_DIR.glob("*.patch"))


def patches_digest() -> str:
    """A digest of every patch: a build made with other patches is another build."""
    digest = hashlib.sha256()
    for path in patch_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _hunks(lines: list[str]) -> tuple[str, list[tuple[list[str], list[str]]]]:
    """The target path and, per hunk, (lines before, lines after)."""
    target = ""
    hunks: list[tuple[list[str], list[str]]] = []
    for line in lines:
        if line.startswith("+++ "):
            target = line[4:].strip().split("/", 1)[1]
        elif _HUNK.match(line):
            hunks.append(([], []))
        elif hunks and line[:1] in {" ", "-", "+"}:
            before, after = hunks[-1]
            if line[0] in " -":
                before.append(line[1:])
            if line[0] in " +":
                after.append(line[1:])
        elif hunks and line == "":
            hunks[-1][0].append("")
            hunks[-1][1].append("")
    return target, hunks


def apply_patch(patch: Path, root: Path) -> Path:
    """Apply one patch to the llama.cpp tree at ``root``; returns the file it changed."""
    target, hunks = _hunks(patch.read_text().splitlines())
    if not target or not hunks:
        raise PatchError(f"{patch.name}: no file or no hunk found")
    path = root / target
    text = path.read_text()
    for before, after in hunks:
        old, new = "\n".join(before) + "\n", "\n".join(after) + "\n"
        if text.count(old) != 1:
            raise PatchError(f"{patch.name} does not fit {target} (its context is found {text.count(old)} times)")
        text = text.replace(old, new)
    path.write_text(text)
    return path


def apply_all(root: Path) -> list[Path]:
    """Apply every patch to the llama.cpp tree at ``root`` (llama.cpp's own root, not the sdist's)."""
    return [apply_patch(p, root) for p in patch_files()]
