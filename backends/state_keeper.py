"""A local engine's use of the state cache: load the longest saved prefix before a prompt, save after a reply.

:class:`StateKeeper` sits beside one loaded :class:`backends.llama_engine.LlamaEngine`
(or MLX's :class:`backends.mlx_cache.MLXPromptCache`, which offers the same four
members: ``tokens``, ``state_bytes``, ``load_state``, ``truncate``) and is called
on the engine's own thread:

- :meth:`StateKeeper.restore` before the prompt is evaluated: when a saved state
  shares more of the prompt's ids than the engine's cache does (a new process,
  ``--resume``, a conversation reopened from the history, ``/model`` back, an
  engine restarted after a crash), it is loaded and cut to the shared prefix, and
  only the rest is evaluated.  It returns the stats' note (``loaded N ids from
  disk in T s`` or ``none (why)``).
- :meth:`StateKeeper.keep` after a reply (or a cancel, or a failure that left a
  cache): the cache's bytes are copied on the engine's thread (a memcpy), and
  written by a thread of their own (checksum, write, fsync, rename), so a reply
  never waits for the disk.
- :meth:`StateKeeper.flush` when the engine closes waits for a write under way,
  at most ``timeout`` seconds; what is not written by then is left (a temporary
  file the next write clears away), never half a state file.

Nothing here can change a reply's ids: a state is loaded only when its key and
every checksum match (:mod:`backends.state_cache`), and the engine's own check (llama.cpp's, or
MLX's on the cache's shapes) refuses what is left; the prompt is then evaluated as if nothing were saved.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from backends.base import common_prefix_length
from backends.state_cache import StateCache, StateKey, StateRefused, engine_build_key, model_identity

#: a cache shorter than this is not saved: evaluating it again takes about as long as loading it
MIN_IDS = 128
#: a saved state is loaded only when it spares at least this many ids more than the engine's own cache does
MIN_GAIN = 32
#: how long closing the engine waits for a write under way (the issue's bound on quitting)
CLOSE_WAIT_S = 1.0
#: EngineParams' fields that change neither the state's layout nor its numbers
_NOT_LAYOUT = ("n_ctx", "n_threads", "n_batch")


@runtime_checkable
class KeepsState(Protocol):
    """A backend whose engine saves its state to disk (:class:`StateKeeper`); the engine process flushes it
    before it ends."""

    def flush_state(self, timeout: float) -> None: ...


def state_key(model_path: Path, params: Any, device: str) -> StateKey:
    """The key of states made by an engine with ``params`` (an EngineParams) for this model file and build."""
    layout = {k: v for k, v in asdict(params).items() if k not in _NOT_LAYOUT}
    text = " ".join(f"{k}={v}" for k, v in sorted({**layout, "device": device}.items()))
    return StateKey(model_identity(model_path), engine_build_key(), text)


def open_keeper(options: Any, model_path: Path, params: Any, device: str, model_name: str) -> "StateKeeper | None":
    """The keeper for a loaded llama.cpp engine (``options``: its LoadOptions), or None when states are off
    (``state_dir`` None) or the model file cannot be read for its identity (then nothing is kept)."""
    return keeper_for(options, model_path, lambda: state_key(model_path, params, device), model_name)


def keeper_for(options: Any, model_path: Path, make_key: Callable[[], StateKey], model_name: str,
               engine: str = "llama.cpp") -> "StateKeeper | None":
    """The keeper of any engine whose key ``make_key`` gives; None when ``options.state_dir`` is None
    (``--no-state``, ``[state] enabled = false``) or the key cannot be made (an unreadable model file)."""
    if options.state_dir is None:
        return None
    try:
        key = make_key()
    except OSError as exc:
        print(f"state: off ({model_path.name}: {exc.strerror or exc})", file=sys.stderr, flush=True)
        return None
    return StateKeeper(StateCache(Path(options.state_dir), options.state_max_bytes), key, model_name, engine)


class StateKeeper:
    """See the module docstring.  ``restore`` and ``keep`` run on the engine's thread; the writer on its own."""

    def __init__(self, cache: StateCache, key: StateKey, model_name: str = "", engine: str = "llama.cpp") -> None:
        self.cache = cache
        self.key = key
        self.model_name = model_name
        #: the engine's name in a refusal note ("none (MLX refused the saved state)")
        self.engine = engine
        #: the ids whose state is on disk (saved or loaded by this keeper): not written again
        self._on_disk: tuple[int, ...] = ()
        self._lock = threading.Lock()
        #: the latest (ids, bytes, seconds the copy took) to write; a newer one replaces one not yet started
        self._pending: tuple[tuple[int, ...], bytearray, float] | None = None
        self._writer: threading.Thread | None = None

    def restore(self, engine: Any, prompt: Sequence[int]) -> str:
        """Load the saved state that serves ``prompt`` best, if it beats the engine's cache; the stats note.

        "" when the engine's own cache already serves the prompt (a later turn of the same run)."""
        limit = len(prompt) - 1  # the last prompt id is always evaluated: its logits pick the first reply id
        held = common_prefix_length(engine.tokens, prompt)
        if held >= MIN_GAIN and held + MIN_GAIN > limit:
            return ""  # a later turn of the same run: the engine's own cache holds all but the new ids
        try:
            match, refused = self.cache.best(self.key, prompt, limit)
        except OSError as exc:
            return f"none (the cache is unreadable: {exc.strerror or exc})"
        if match is None or match.usable < held + MIN_GAIN:
            if held >= MIN_GAIN:
                return ""
            return f"none ({refused})" if refused else "none (nothing saved for these ids)"
        started = time.perf_counter()
        try:
            data = self.cache.read_payload(match.saved)
        except StateRefused as exc:
            return f"none ({exc})"
        if not engine.load_state(match.saved.ids, data):
            self.cache.refuse(match.saved)
            return f"none ({self.engine} refused the saved state)"
        engine.truncate(match.usable)
        self._on_disk = match.saved.ids
        if len(engine.tokens) != match.usable:  # a recurrent model's cache cannot drop a tail: it was cleared
            return "none (this model's cache cannot be cut back to the shared prefix)"
        return f"loaded {match.usable} ids from disk in {time.perf_counter() - started:.2f} s"

    def keep(self, engine: Any) -> None:
        """Hand the engine's cache to the writer (a copy, on the engine's thread), unless it is short or on disk."""
        ids = tuple(engine.tokens)
        if len(ids) < MIN_IDS or ids == self._on_disk:
            return
        started = time.perf_counter()
        data = engine.state_bytes()
        if not data:
            return
        copied = time.perf_counter() - started
        with self._lock:
            self._pending = (ids, data, copied)
            self._on_disk = ids
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write, name="tokchat-state-writer", daemon=True)
                self._writer.start()

    def _write(self) -> None:
        while True:
            with self._lock:
                pending, self._pending = self._pending, None
                if pending is None:
                    self._writer = None
                    return
            ids, data, copied = pending
            started = time.perf_counter()
            try:
                path = self.cache.write(self.key, ids, data, self.model_name)
            except OSError as exc:  # a full disk, a read-only cache: the reply is unaffected, the log says why
                line = f"state: not saved ({exc.strerror or exc})"
            else:
                # the copy is what the engine's thread paid; the write ran beside it
                line = (f"state: saved {len(ids)} ids ({len(data) >> 20} MiB): copied in {copied:.3f} s, "
                        f"written in {time.perf_counter() - started:.3f} s to {path}")
            print(line, file=sys.stderr, flush=True)  # the engine log

    def flush(self, timeout: float = CLOSE_WAIT_S) -> None:
        """Wait for the write under way, at most ``timeout`` seconds."""
        writer = self._writer
        if writer is not None:
            writer.join(timeout)
