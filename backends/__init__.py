"""Inference backends behind one Protocol: token ids in, token ids out.

:mod:`backends.base` holds the contract; :func:`open_backend` detects the
hardware (:mod:`backends.detect`), loads the best backend and falls back
with the reason in ``backend.info.notes``.  Importing this package imports
no engine.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backends.base import Backend, BackendError, BackendInfo, LoadOptions, SamplingParams

if TYPE_CHECKING:
    from backends.probe import SystemProbe
    from backends.engine_client import SpareEngine
    from backends.registry import PendingBackend


def open_backend(model_path: Path | str, options: LoadOptions, probe: SystemProbe | None = None) -> Backend:
    """Detect, choose, load: see :func:`backends.registry.open_backend`."""
    from backends.registry import open_backend as _open

    return _open(model_path, options, probe)


def start_backend(model_path: Path | str, options: LoadOptions, probe: SystemProbe | None = None,
                  spare: SpareEngine | None = None) -> PendingBackend:
    """:func:`open_backend` on a thread: see :func:`backends.registry.start_backend`."""
    from backends.registry import start_backend as _start

    return _start(model_path, options, probe, spare)


__all__ = ["Backend", "BackendError", "BackendInfo", "LoadOptions", "SamplingParams", "open_backend", "start_backend"]
