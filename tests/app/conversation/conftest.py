"""Fixtures shared by the conversation tests that run the real engine."""
from __future__ import annotations

import pytest

from backends import LoadOptions, open_backend


@pytest.fixture(scope="module")
def engine(smollm_path):
    """SmolLM2 on the real llama.cpp engine, one per test module (each module's cache starts cold)."""
    backend = open_backend(smollm_path, LoadOptions(backend="cpu", n_ctx=1024))
    yield backend
    backend.close()
