"""One dedicated generation thread per backend, and a queue back to the caller.

Engines are not thread-safe and a prompt evaluation can take seconds, so
every engine call of a backend runs on the same worker thread, one job at a
time.  The caller iterates a generator that reads ids from a queue; it
checks the cancel flag between ids, so :meth:`GenerationWorker.cancel`
ends the caller's iteration at once even while the engine is still busy
(the engine itself stops at its next check, and the next job waits for it).

A job is a function ``job(emit, cancelled)``: it calls ``emit(id)`` for
every generated id and polls ``cancelled()`` wherever the engine lets it.
Not handled here: sampling, stop ids, caching (the backends own those).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from backends.base import BackendError

#: emit(token_id) pushes one id to the caller; cancelled() says "stop now"
Job = Callable[[Callable[[int], None], Callable[[], bool]], None]

_DONE = object()
#: how often a waiting caller re-checks the cancel flag, in seconds
_POLL_S = 0.02


class _Failure:
    """An exception raised by a job, carried through the queue to the caller."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class GenerationWorker:
    """Runs jobs on one long-lived daemon thread; see the module docstring."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._cancel = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"tokchat-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, out, cancel = item
            try:
                job(out.put, cancel.is_set)
            except BaseException as exc:  # carried to the caller, re-raised there
                out.put(_Failure(exc))
            finally:
                out.put(_DONE)
                self._idle.set()

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` on the worker thread (loading, closing); return its result or raise its exception."""
        result: list[object] = []
        failure: list[BaseException] = []

        def job(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            try:
                result.append(fn())
            except BaseException as exc:  # re-raised unchanged in the caller's thread below
                failure.append(exc)

        for _ in self.stream(job):
            pass
        if failure:
            raise failure[0]
        return result[0] if result else None

    def stream(self, job: Job) -> Iterator[int]:
        """Submit ``job`` and yield what it emits until it ends or :meth:`cancel` is called."""
        if self._closed:
            raise BackendError("this backend is closed; load the model again")
        # the previous job may still be finishing after a cancel: the engine is single-threaded
        self._idle.wait()
        self._idle.clear()
        cancel = threading.Event()
        self._cancel = cancel
        out: queue.Queue = queue.Queue()
        self._jobs.put((job, out, cancel))
        try:
            while True:
                if cancel.is_set():
                    return
                try:
                    item = out.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    if isinstance(item.exc, BackendError):
                        raise item.exc
                    raise BackendError(f"the engine failed while generating: {item.exc}") from item.exc
                yield item
        finally:
            # a caller that stops iterating early (break, close) also stops the engine
            cancel.set()

    def cancel(self) -> None:
        """Stop the running job: the caller's iteration ends now, the engine at its next check."""
        self._cancel.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the engine finished its last job; False on timeout."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Stop the thread after the current job."""
        if not self._closed:
            self._closed = True
            self._cancel.set()
            self._jobs.put(None)
