"""Shared helpers for the hardening suite: child-process environments and guards.

Every child process gets its own data, config and state folders under
``tmp_path``, so a test never touches the user's history or logs."""
from __future__ import annotations
from pathlib import Path
import pytest
from support.process_env import child_env  # noqa: F401 (re-exported to the tests here)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return child_env(tmp_path)
