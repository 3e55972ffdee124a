"""What a model reference names on the Hugging Face Hub: ``hf:`` forms and preset names.

Accepted (the forms llama.cpp's ``-hf`` and ``ollama pull`` users expect):

- ``hf:ORG/REPO/PATH/FILE.gguf``: one file (for a split GGUF, any part);
- ``hf:ORG/REPO:Q4_K_M``: the repo's file with that quantization tag;
- ``hf:ORG/REPO``: the repo, file chosen by :mod:`app.models.gguf_choice`;
- a preset name from ``configs/models/`` (``qwen2.5``) whose ``[hub]`` table
  names a repo and a default quantization.

Parsing touches neither the network nor the disk beyond reading presets.
Not handled: revisions other than ``main`` in the reference itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HF_PREFIX = "hf:"
_REPO = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class ModelNotFound(FileNotFoundError):
    """``--model`` names nothing usable; the message says what to pass instead.

    Defined with the references, below both :mod:`app.models.resolution` (a
    path or name that is not there) and :mod:`app.models.hub` (whose
    :class:`~app.models.hub.HubError` is one), so neither imports the other for it.
    """


class RefError(ValueError):
    """A reference that cannot name anything on the hub; the message shows the accepted forms."""


@dataclass(frozen=True)
class HubRef:
    """A parsed reference; exactly one of ``filename`` / ``quant`` / neither narrows the repo."""

    repo_id: str
    filename: str | None = None
    quant: str | None = None
    #: the preset this reference came from (its default quantization is ``quant``)
    preset: str | None = None
    revision: str = "main"

    def __str__(self) -> str:
        if self.filename:
            return f"{HF_PREFIX}{self.repo_id}/{self.filename}"
        return f"{HF_PREFIX}{self.repo_id}" + (f":{self.quant}" if self.quant else "")


FORMS = "hf:ORG/REPO/FILE.gguf, hf:ORG/REPO:Q4_K_M, hf:ORG/REPO or a preset name"


def parse_ref(value: str) -> HubRef:
    """``hf:...`` as a :class:`HubRef`; raises :class:`RefError` for anything malformed."""
    if not value.startswith(HF_PREFIX):
        raise RefError(f"{value}: not a hub reference (expected {FORMS})")
    body = value[len(HF_PREFIX):].strip().strip("/")
    quant = None
    if ":" in body:
        body, _, quant = body.partition(":")
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", quant or ""):
            raise RefError(f"{value}: the part after ':' must be a quantization tag such as Q4_K_M")
    parts = body.split("/")
    repo_id = "/".join(parts[:2])
    if len(parts) < 2 or not _REPO.match(repo_id):
        raise RefError(f"{value}: expected {FORMS} (e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)")
    filename = "/".join(parts[2:]) or None
    if filename is not None:
        if quant is not None:
            raise RefError(f"{value}: give a file or a quantization tag, not both")
        if not all(parts[2:]) or ".." in parts[2:]:
            raise RefError(f"{value}: bad file path in the repo")
    return HubRef(repo_id, filename, quant.upper() if quant else None)


def preset_ref(name: str) -> HubRef | None:
    """The hub reference a preset's ``[hub]`` table names, or None (no such preset, or no hub repo)."""
    from app.models.presets import load_presets

    for preset in load_presets():
        if preset.name.lower() == name.lower() and preset.hub_repo:
            return HubRef(preset.hub_repo, quant=preset.hub_quantization or None, preset=preset.name)
    return None


def model_ref(value: str | None) -> HubRef | None:
    """The hub reference ``--model VALUE`` means, or None when it is a local path (or the bundled model).

    An existing file or directory always wins over a preset of the same name.
    """
    if not value:
        return None
    if value.startswith(HF_PREFIX):
        return parse_ref(value)
    if "/" in value or "\\" in value or value.endswith(".gguf") or Path(value).expanduser().exists():
        return None
    return preset_ref(value)
