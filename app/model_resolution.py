"""Turn ``--model`` into a local path: placeholder until the model-resolution issue lands."""
from __future__ import annotations

from pathlib import Path

from app.bundled import bundled_model_path


def resolve_model(value: str | None) -> Path:
    """The model path to use: ``--model`` or the bundled model."""
    if value is None:
        return bundled_model_path()
    path = Path(value).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model not found: {path} (pass --model PATH.gguf)")
    return path
