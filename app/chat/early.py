"""The engine a chat starts before it knows everything about itself: one object owns it until a chat adopts it.

A chat's first second is mostly waiting: Python starts, the settings and the model's header are
read, the presets matched, Textual imported.  The engine's own start (a process, its library's
import, the model's load) overlaps all of that when it begins early, in two steps as the facts
arrive:

1. :meth:`EarlyEngine.start_process`, at the top of the command line, before the model is known:
   an engine process that imports its library meanwhile (:class:`backends.engine_client.SpareEngine`);
2. :meth:`EarlyEngine.start_load`, once the chat's options are known (headless: at once; the TUI:
   :meth:`EarlyEngine.start_load_on_thread`, while Textual is imported and the first frame paints):
   the model's load goes out, to that same process.

Whoever opens the chat is handed this object (:func:`app.chat.open.open_chat`'s ``early``) and
takes the load with :meth:`EarlyEngine.take` when its options are the very ones the load began
with; a load for other options (``/model`` before the first load ended) is closed instead.  What
no chat adopted goes at :meth:`EarlyEngine.close`, in the command line's ``finally``.  Nothing here
is a module global: the command line holds the one object and hands it on.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from app.settings.options import ChatOptions


@dataclass
class StartedLoad:
    """A load that began before its chat was opened: what :func:`app.chat.open.open_chat` adopts."""

    options: ChatOptions
    path: Path
    #: the model's header as the chat read it (app.models.header), handed on to the tokenizer
    header: Any
    pending: Any  # backends.registry.PendingBackend


def start_engine(options: ChatOptions, path: Path, header: Any, spare: Any = None) -> Any:
    """The engine's load for ``options`` on a thread (:func:`backends.start_backend`), in ``spare``'s process
    if one is given; the caller reads the tokenizer meanwhile and takes ``.result()`` when it needs it."""
    from backends import LoadOptions, start_backend

    return start_backend(path, LoadOptions(backend=options.backend, device=options.device,
                                           n_threads=options.threads, n_ctx=options.ctx, model_meta=header,
                                           n_gpu_layers=options.gpu_layers, kv_type=options.kv_type,
                                           speculative=options.speculative, draft_model=options.draft_model,
                                           state_dir=options.state_dir,
                                           state_max_bytes=int(options.state_max_gib * (1 << 30))),
                         spare=spare)


class EarlyEngine:
    """The engine started early, owned here until a chat takes it; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: Any = None  # backends.engine_client.SpareEngine
        self._load: StartedLoad | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._options: ChatOptions | None = None
        self._error: BaseException | None = None

    # -- the two steps ----------------------------------------------------------------------------------
    def start_process(self, backend: str | None = None) -> bool:
        """Start an engine process now, before the model is known; True if one was started.

        None when engines run inside tokchat (``TOKCHAT_ENGINE_IN_PROCESS=1``).  ``backend`` is the
        ``--backend`` asked for: the process imports llama.cpp meanwhile unless another engine was named."""
        from backends.engine_client import SpareEngine, in_process

        if in_process():
            return False
        spare = SpareEngine(warm=None if backend in ("mlx", "openvino") else "llama.cpp")
        with self._lock:
            old, self._spare = self._spare, spare
        if old is not None:
            old.discard()
        return True

    def start_load(self, options: ChatOptions) -> None:
        """Start loading the local engine for ``options`` (in the process :meth:`start_process` started, if
        any); the chat opened with these same options adopts it.  A ``--server`` chat starts nothing and
        the waiting process goes.  Raises what resolving the model raises."""
        import app.models.header as model_header
        from app.models.resolution import resolve_model

        if options.server is not None:
            self._discard_spare()
            return
        self._discard_load()
        path = Path(resolve_model(options.model))
        header = model_header.take_header(path, options)
        with self._lock:
            if self._closed:  # the chat ended while the model was resolved: no engine to start for it
                return
            spare, self._spare = self._spare, None
        load = StartedLoad(options, path, header, start_engine(options, path, header, spare))
        with self._lock:
            closed = self._closed
            if not closed:
                self._load = load
        if closed:  # the chat ended while this thread still resolved the model
            load.pending.discard()

    def start_load_on_thread(self, build: Callable[[], ChatOptions]) -> None:
        """The TUI's step 2: build the options (``build`` reads the model's header for its preset) and
        start the load, on a thread, while Textual is imported; :meth:`options` hands the options over."""
        def run() -> None:
            try:
                self._options = build()
                self.start_load(self._options)
            except Exception as exc:  # raised again where the window's load thread asks (shown on screen)
                self._error = exc

        self._thread = threading.Thread(target=run, name="tokchat-early-load", daemon=True)
        self._thread.start()

    def options(self) -> ChatOptions:
        """The options :meth:`start_load_on_thread` built; raises what building them (or resolving the
        model) raised."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._options is not None, "start_load_on_thread was not called"
        return self._options

    # -- the hand-over ----------------------------------------------------------------------------------
    def take(self, options: ChatOptions) -> StartedLoad | None:
        """The load started for exactly ``options`` (the same object), now the caller's; a load for any
        other options is closed, and None is returned."""
        with self._lock:
            load, self._load = self._load, None
        if load is None:
            return None
        if load.options is not options:
            load.pending.discard()
            return None
        return load

    def close(self) -> None:
        """Close whatever no chat adopted: the load, the waiting process.  Later loads are closed at once."""
        with self._lock:
            self._closed = True
        self._discard_load()
        self._discard_spare()

    def _discard_load(self) -> None:
        with self._lock:
            load, self._load = self._load, None
        if load is not None:
            load.pending.discard()

    def _discard_spare(self) -> None:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.discard()
