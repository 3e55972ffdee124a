"""Model presets: per-family defaults in ``configs/models/*.toml``, chosen from the GGUF header.

A preset says which models it is for (``[match]``: ``general.architecture``
values, and name phrases looked for in ``general.basename``,
``general.name`` and the file name) and which settings suit them: template,
thinking, context size, sampling.  A preset that names phrases beats one
that only names an architecture (SmolLM2 and Llama 3 share ``llama``).
Files in ``<config dir>/models/`` replace the shipped ones of the same name.

Phrases match whole words after lower-casing and treating ``-``, ``_``,
``.`` and spaces alike: "llama 3" matches "Meta-Llama-3.1-8B" but not
"llama-30b".

Only the preset files live here (below :mod:`app.models.hub_ref`, which
reads their ``[hub]`` tables); matching a model to its preset, which resolves
and reads the model, is :mod:`app.models.preset_match`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.settings.config import SCHEMA, ConfigError, config_dir, flatten, read_toml

BUNDLED_DIR = Path(__file__).resolve().parents[2] / "configs" / "models"

#: settings a preset may set
PRESET_KEYS = frozenset({"chat.template", "chat.thinking", "chat.format", "model.context_size"}
                        | {k for k in SCHEMA if k.startswith("sampling.")})


@dataclass
class Preset:
    name: str
    path: Path
    architectures: tuple[str, ...]
    phrases: tuple[str, ...]
    #: checked settings, "section.key" -> value
    values: dict[str, Any] = field(default_factory=dict)
    #: ``[hub]``: where the model lives (``tokchat --model NAME`` / ``tokchat pull NAME``)
    hub_repo: str = ""
    hub_quantization: str = ""


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s\-_.]+", text.lower()) if w]


def _has_phrase(names: list[str], phrase: str) -> bool:
    want = _words(phrase)
    for name in names:
        words = _words(name)
        if any(words[i:i + len(want)] == want for i in range(len(words) - len(want) + 1)):
            return True
    return False


def load_preset(path: Path) -> Preset:
    data = read_toml(path)
    match = data.pop("match", None)
    hub = data.pop("hub", {})
    if not isinstance(hub, dict) or set(hub) - {"repo", "quantization"} or \
            not all(isinstance(v, str) for v in hub.values()):
        raise ConfigError(f"{path}: [hub] takes repo = \"ORG/REPO\" and quantization = \"Q4_K_M\" (strings)")
    if not isinstance(match, dict) or not isinstance(match.get("architectures"), list):
        raise ConfigError(f"{path}: a preset needs [match] with architectures = [\"...\"]")
    unknown = set(match) - {"architectures", "names"}
    if unknown:
        raise ConfigError(f"{path}: unknown key match.{sorted(unknown)[0]} (known: architectures, names)")
    for key in ("architectures", "names"):
        if not all(isinstance(v, str) for v in match.get(key, [])):
            raise ConfigError(f"{path}: match.{key} must be an array of strings")
    return Preset(path.stem, path, tuple(match["architectures"]), tuple(match.get("names", [])),
                  flatten(str(path), data, set(PRESET_KEYS)), hub.get("repo", ""), hub.get("quantization", ""))


def load_presets(dirs: list[Path] | None = None) -> list[Preset]:
    """Presets by name; a later directory replaces an earlier one's file of the same name."""
    dirs = [BUNDLED_DIR, config_dir() / "models"] if dirs is None else dirs
    by_name: dict[str, Path] = {}
    for directory in dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                by_name[path.stem] = path
    return [load_preset(path) for _, path in sorted(by_name.items())]


def match_preset(presets: list[Preset], architecture: str, names: list[str]) -> Preset | None:
    """The best preset for a model: architecture and a name phrase, else architecture alone."""
    best, best_score = None, 0
    for preset in presets:
        if architecture not in preset.architectures:
            continue
        if preset.phrases:
            score = 2 if any(_has_phrase(names, p) for p in preset.phrases) else 0
        else:
            score = 1
        if score > best_score:
            best, best_score = preset, score
    return best
