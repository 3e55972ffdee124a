"""Fixtures for the template tests: tokchat's tokenizer and the llama.cpp oracle, cached per file."""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

import pytest


from support.template_oracle import llama_vocab  # noqa: E402


@lru_cache(maxsize=None)
def _ours(path: str):
    from tokenizer import load_tokenizer

    return load_tokenizer(Path(path))


@pytest.fixture(scope="session")
def load_ours():
    """tokchat's own tokenizer for a .gguf or tokenizer directory (cached: the tests only read it)."""
    return lambda path: _ours(str(path))


@pytest.fixture(scope="session")
def load_oracle():
    """llama.cpp's tokenizer for a .gguf (cached)."""
    return lambda path: llama_vocab(str(path))


@pytest.fixture(scope="session")
def templates_dir(llamacpp_models_dir: Path) -> Path:
    """llama.cpp's models/templates/*.jinja: real templates from model repositories."""
    return llamacpp_models_dir / "templates"
