"""Turn ``--model`` into a local path, and describe the models this machine has.

``--model`` is a ``.gguf`` file, an MLX model directory (``config.json`` plus
``*.safetensors``), ``hf:ORG/REPO[/FILE.gguf|:QUANT]`` or a preset name,
found in the Hugging Face cache or pulled by :mod:`app.models.hub`.  Once a file is
in the cache it resolves without the network.
``HF_HOME``/``HF_HUB_CACHE``/``HF_HUB_OFFLINE`` are read when a model is
resolved, not when huggingface_hub was imported, so a changed environment
is honoured.

Describing a model reads only its header, through the backends' own
:func:`backends.model_meta.read_model_meta` (GGUF key/values, an MLX
model's ``config.json``).

Not handled: downloading whole MLX repositories from ``hf:`` (point
``--model`` at the downloaded directory instead).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.models.bundled import bundled_model_path
from app.models.hub_cache import hf_cache_dir, model_files
from app.models.hub_ref import ModelNotFound
from backends.model_meta import is_mlx_dir

HF_PREFIX = "hf:"


@dataclass
class ModelInfo:
    """What ``tokchat models`` shows and what presets are matched on."""

    path: Path
    kind: str  # "gguf" | "mlx"
    size_bytes: int
    architecture: str = ""
    name: str = ""
    basename: str = ""
    quantization: str = ""
    context_length: int | None = None
    #: where it was found: "bundled", "hf:ORG/REPO/FILE", "dir", "model"
    source: str = ""
    #: a GGUF with no tensors (llama.cpp's ggml-vocab-*.gguf): a tokenizer, not a model to chat with
    vocabulary_only: bool = False


def parse_hf(value: str) -> tuple[str, str]:
    """``hf:ORG/REPO/PATH/IN/REPO.gguf`` -> ("ORG/REPO", "PATH/IN/REPO.gguf")."""
    parts = value[len(HF_PREFIX):].strip("/").split("/")
    if len(parts) < 3 or not all(parts):
        raise ModelNotFound(f"{value}: expected hf:ORG/REPO/FILE.gguf (e.g. "
                            "hf:bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_K_M.gguf)")
    return "/".join(parts[:2]), "/".join(parts[2:])


def resolve_hf(value: str) -> Path:
    """The file an ``hf:`` reference or preset name names: from the cache at once, else pulled
    (:func:`app.models.hub.resolve`, which owns downloading)."""
    from app.models.hub import resolve

    return resolve(value)


def resolve_model(value: str | None) -> Path:
    """The local model path for ``--model``: None is the bundled model."""
    if value is None or value == "":
        return bundled_model_path()
    if value.startswith(HF_PREFIX):
        return resolve_hf(value)
    path = Path(value).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        if is_mlx_dir(path):
            return path
        raise ModelNotFound(f"{path} is a directory but not an MLX model (no config.json and *.safetensors)")
    from app.models.file_kind import not_a_regular_file

    special = not_a_regular_file(path)  # a fifo is never opened: reading it would wait for a writer
    if special is not None:
        raise ModelNotFound(special)
    from app.models.hub_ref import preset_ref

    if preset_ref(value) is not None:  # a preset name: its hub repo and default quantization
        return resolve_hf(value)
    raise ModelNotFound(f"model not found: {path} (pass --model PATH.gguf, an MLX model directory, "
                        "hf:ORG/REPO[:QUANT] or a preset name; `tokchat models` lists what is here)")


#: parts 2..N of a split GGUF: listed through part 1, which llama.cpp loads
_LATER_PART = re.compile(r"-(?!00001)\d{5}-of-\d{5}\.gguf$")


def _size(path: Path) -> int:
    if path.is_file():  # a split counts all its parts
        return sum(p.stat().st_size for p in model_files(path) if p.exists())
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def describe_model(path: Path, source: str = "model", meta=None) -> ModelInfo:
    """Header facts about a model (``meta``, or read through :func:`backends.model_meta.read_model_meta`);
    raises BackendError for a file that is not a readable model."""
    from app.models.file_kind import vocabulary_only
    from backends.model_meta import known_meta

    meta = known_meta(path, meta)
    name = meta.name
    if meta.format == "mlx" and path.parent.name == "snapshots":  # HF cache: the repo's name, not the hash
        name = path.parent.parent.name.split("--")[-1]
    return ModelInfo(path, meta.format, _size(path), architecture=meta.architecture, name=name,
                     basename=str(meta.kv.get("general.basename", "")) if meta.format == "gguf" else "",
                     quantization=meta.quantization, context_length=meta.context_length, source=source,
                     vocabulary_only=vocabulary_only(meta.gguf))


def match_names(info: ModelInfo) -> list[str]:
    """The names a preset may match: GGUF general.name and general.basename, the file or repo name."""
    path = info.path
    names = [info.name, info.basename, path.name if path.is_dir() else path.stem]
    if path.is_dir() and path.parent.name == "snapshots":
        names.append(path.parent.parent.name.split("--")[-1])
    return [n for n in names if n]


def _candidates(directory: Path) -> list[Path]:
    """``.gguf`` files and MLX directories in ``directory`` and one level below."""
    found: list[Path] = []
    if not directory.is_dir():
        return found
    for entry in sorted(directory.iterdir()):
        if entry.is_file() and entry.suffix == ".gguf":
            found.append(entry)
        elif is_mlx_dir(entry):
            found.append(entry)
        elif entry.is_dir():
            found += [p for p in sorted(entry.glob("*.gguf")) if p.is_file()]
            found += [p for p in sorted(entry.iterdir()) if is_mlx_dir(p)]
    return found


def _hf_models() -> list[tuple[Path, str]]:
    """(path, "hf:ORG/REPO/FILE") for every GGUF file and MLX snapshot in the HF cache."""
    cache = hf_cache_dir()
    out: list[tuple[Path, str]] = []
    if not cache.is_dir():
        return out
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name[len("models--"):].replace("--", "/", 1)
        for snapshot in sorted((repo / "snapshots").glob("*")):
            if is_mlx_dir(snapshot):
                out.append((snapshot, f"hf:{repo_id} (mlx)"))
            for gguf in sorted(snapshot.rglob("*.gguf")):
                if gguf.exists():  # a dangling link: the blob was deleted
                    out.append((gguf, f"hf:{repo_id}/{gguf.relative_to(snapshot).as_posix()}"))
    return out


def list_models(dirs: list[Path] | None = None) -> tuple[list[ModelInfo], list[str]]:
    """Every model found (bundled, configured dirs, HF cache) and one line per unreadable one."""
    from backends.base import BackendError

    found: list[tuple[Path, str]] = []
    try:
        found.append((bundled_model_path(), "bundled"))
    except FileNotFoundError:
        pass  # not installed: nothing to list
    for directory in dirs or []:
        found += [(p, f"dir {directory}") for p in _candidates(Path(directory).expanduser())]
    found += _hf_models()
    models, problems, seen = [], [], set()
    for path, source in found:
        key = path.resolve()
        if key in seen or _LATER_PART.search(path.name):
            continue
        seen.add(key)
        try:
            models.append(describe_model(path, source))
        except (BackendError, OSError) as exc:
            problems.append(f"{path}: {exc}")
    return models, problems
