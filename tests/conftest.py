"""Shared fixtures: the real test assets, fetched by ``tests/support/assets.py``.

A missing asset fails the test with the command that fetches it; nothing
is skipped.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest


from support.assets import asset_path  # noqa: E402

_SUITE_STARTED = time.monotonic()


#: memory one worker may hold at once (its engines, a llama-server, the Textual app): about 2 GiB measured
WORKER_MEMORY_GIB = 3


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: half as many workers again as cores, as memory allows.

    A worker is often waiting rather than computing (a server's timeout, a child's start-up, a hostile
    server's drip, a TUI's pause), so on 2 idle cores 3 workers finished the suite in 15 min 2 s where 2 took
    about 16 (docs/testing.md).  Each worker still has one core (see :func:`pytest_configure`), so two workers
    may share one; their engines run a thread each.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(cpus + cpus // 2, int(memory_gib // WORKER_MEMORY_GIB)))


def pytest_configure(config) -> None:
    """Under pytest-xdist each worker gets a core of its own, and so do the engines it starts.

    llama.cpp sizes its threads to the CPUs a process may run on
    (``backends.cpu.available_cpus`` reads the affinity mask, which children
    inherit), and its threads spin at every barrier: two workers each running
    a 2-thread engine on a 2-core machine would stall each other.  Pinned, a
    worker's engine runs 1 thread on its own core while the other worker's
    Python (a TUI test, a CLI child) runs on the other.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


def pytest_terminal_summary(terminalreporter) -> None:
    """Set-up and suite times in every run's summary (``dev.py test`` passes its set-up seconds), so drift shows."""
    setup = os.environ.get("TOKCHAT_SETUP_SECONDS")
    suite = time.monotonic() - _SUITE_STARTED
    parts = [f"set-up {_minutes(float(setup))}"] if setup else []
    parts.append(f"suite {_minutes(suite)}")
    terminalreporter.write_line(f"tokchat timing: {', '.join(parts)} ({os.cpu_count()} CPUs, load average "
                                f"{os.getloadavg()[0]:.1f})")


def _minutes(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF: gpt2 BPE, pre=smollm, ChatML."""
    return asset_path("smollm2.gguf")


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF: gpt2 BPE, pre=qwen2."""
    return asset_path("qwen2.5-coder-0.5b.gguf")


@pytest.fixture(scope="session")
def qwen15_path() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (1.1 GB): the tool loop's real model."""
    return asset_path("qwen2.5-coder-1.5b.gguf")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma 3 270M Q4_K_M GGUF: SentencePiece-style BPE, no chat template."""
    return asset_path("gemma3-270m.gguf")


@pytest.fixture(scope="session")
def qwen_tokenizer_dir() -> Path:
    """Qwen2.5 tokenizer.json + tokenizer_config.json."""
    return asset_path("qwen2.5-tokenizer")


@pytest.fixture(scope="session")
def llama32_tokenizer_dir() -> Path:
    """Llama 3.2 tokenizer.json + tokenizer_config.json."""
    return asset_path("llama3.2-tokenizer")


@pytest.fixture(scope="session")
def llamacpp_models_dir() -> Path:
    """llama.cpp's vendor/llama.cpp/models: ggml-vocab-*.gguf with .inp/.out, and templates/."""
    return asset_path("llama.cpp-models")
