"""Fixtures for the TUI tests: the real app on the real SmolLM2, or on a scripted backend.

Scripted apps still use the real tokenizer and template; only the backend
replays fixed ids, so snapshot pixels are stable.  Their TurnStats timings
(TTFT, tok/s) are pinned by ``stats_filter``: the only values that differ
between runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from app.settings.options import ChatOptions
from app.history.store import ChatStore
from app.tui.app import ChatApp
from app.tui.loader import scripted_loader
from backends.base import SamplingParams
from support.tui_helpers import stable_timings


@pytest.fixture(autouse=True)
def _own_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app writes choices to config.toml (/think remembers per model): never the user's own."""
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "tokchat-config"))


@pytest.fixture
def store(tmp_path: Path) -> ChatStore:
    with ChatStore(tmp_path / "history.sqlite3") as opened:
        yield opened


@pytest.fixture
def scripted_app(smollm_path: Path, store: ChatStore) -> Callable[..., ChatApp]:
    """``scripted_app(["reply 1", "reply 2"], delay_s=0, fail_after=None)`` -> a ChatApp."""

    def make(replies, *, options: ChatOptions | None = None, **kwargs) -> ChatApp:
        options = options or ChatOptions(model=str(smollm_path), theme="textual-dark")
        return ChatApp(options, loader=scripted_loader(smollm_path, replies, **kwargs),
                       stats_filter=stable_timings, store=store)

    return make


@pytest.fixture
def real_app(smollm_path: Path, store: ChatStore) -> Callable[..., ChatApp]:
    """The real app on SmolLM2, llama.cpp on the CPU, greedy, short replies."""

    def make(max_tokens: int = 24, ctx: int = 2048) -> ChatApp:
        options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=ctx,
                              sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=1))
        return ChatApp(options, store=store)

    return make


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (through anyio's pytest plugin, installed with Textual)."""
    return "asyncio"


def pytest_configure(config: pytest.Config) -> None:
    """pytest-textual-snapshot writes its failure report to the working directory by default."""
    import tempfile

    if getattr(config.option, "snapshot_report", None) == "snapshot_report.html":
        config.option.snapshot_report = str(Path(tempfile.gettempdir()) / "tokchat_snapshot_report.html")
