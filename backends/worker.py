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

Closing joins the thread.  An engine thread still alive when the interpreter
shuts down is fatal: a daemon thread that wakes up inside an engine's C++
call after finalization began is ended with ``pthread_exit``, whose forced
unwind through the binding's ``noexcept`` frames aborts the whole process
("terminate called without an active exception", exit status 134).  So
:meth:`GenerationWorker.close` runs the engine's ``release`` on the thread
and waits for the thread to end, and an ``atexit`` hook closes every worker
a caller forgot (an error path, a second Ctrl-C) before the interpreter goes
down, then runs the main thread's clean-ups (:func:`run_at_exit`).

In the engine's own process (:mod:`backends.engine_process`) there is no
worker thread: :class:`InlineWorker` runs the same jobs on the caller's
thread, the process's main thread, which has nothing else to do while the
engine works.  A job's ids then go to the engine process's sink as they are
made (:meth:`backends.base.Generation.drive`), and a cancel set from the
process's reader thread stops the engine at its next check.  One thread
fewer between the chat and the engine, and nothing left to join at the
process's end (it ends with ``os._exit``).
"""
from __future__ import annotations

import atexit
import queue
import threading
import weakref
from typing import Callable, Generator, TypeVar

from backends.base import BackendError
from backends.handoff import ENDED, Failed, drain
from backends.timeouts import ENGINE_CLOSE_S

#: emit(token_id) pushes one id to the caller; cancelled() says "stop now"
Job = Callable[[Callable[[int], None], Callable[[], bool]], None]
#: what a :meth:`GenerationWorker.call` returns: its function's result
T = TypeVar("T")

#: what a job's failure that is not a BackendError becomes, in the backends' words
_ENGINE_FAILED = "the engine failed while generating: {}"

#: every worker not yet closed, so that the exit hook can join it
_LIVE: "weakref.WeakSet[GenerationWorker]" = weakref.WeakSet()
#: engine clean-ups for the main thread, run at exit after every worker was joined
_EXIT_CLEANUPS: list[Callable[[], object]] = []


def run_at_exit(cleanup: Callable[[], object]) -> None:
    """Run ``cleanup`` on the main thread at exit, after every worker thread has ended (once per function)."""
    if cleanup not in _EXIT_CLEANUPS:
        _EXIT_CLEANUPS.append(cleanup)


class GenerationWorker:
    """Runs jobs on one long-lived daemon thread; see the module docstring."""

    def __init__(self, name: str) -> None:
        #: (job, its output queue, its cancel flag); None ends the thread
        self._jobs: queue.Queue[tuple[Job, queue.Queue[object], threading.Event] | None] = queue.Queue()
        self._cancel = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        # daemon: a hung engine must not keep the process alive; close() and the exit hook join it
        self._thread = threading.Thread(target=self._loop, name=f"tokchat-{name}", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, out, cancel = item
            try:
                job(out.put, cancel.is_set)
            except BackendError as exc:  # carried to the caller, raised there
                out.put(Failed(exc))
            except BaseException as exc:  # an engine's own error: said in the backends' words
                error = BackendError(_ENGINE_FAILED.format(exc))
                error.__cause__ = exc
                out.put(Failed(error))
            finally:
                out.put(ENDED)  # after a Failed the caller has stopped reading: this one is never read
                self._idle.set()

    def call(self, fn: Callable[[], T]) -> T | None:
        """Run ``fn`` on the worker thread (loading, closing); return its result or raise its exception
        (None when :meth:`cancel` ended the wait first)."""
        result: list[T] = []
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

    def stream(self, job: Job) -> Generator[int, None, None]:
        """Submit ``job`` and yield what it emits until it ends or :meth:`cancel` is called."""
        if self._closed:
            raise BackendError("this backend is closed; load the model again")
        # the previous job may still be finishing after a cancel: the engine is single-threaded
        self._idle.wait()
        self._idle.clear()
        cancel = threading.Event()
        self._cancel = cancel
        out: queue.Queue[object] = queue.Queue()
        self._jobs.put((job, out, cancel))
        try:
            yield from drain(out, cancel.is_set)  # type: ignore[misc]  # the job emits ids only
        finally:
            # a caller that stops iterating early (break, close) also stops the engine
            cancel.set()

    def cancel(self) -> None:
        """Stop the running job: the caller's iteration ends now, the engine at its next check."""
        self._cancel.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the engine finished its last job; False on timeout."""
        return self._idle.wait(timeout)

    def close(self, release: Callable[[], object] | None = None, timeout: float = ENGINE_CLOSE_S) -> bool:
        """Stop the running job, run ``release`` on the thread, end the thread and join it.

        ``release`` drops the engine's objects on the thread that made and used
        them, after the last job.  Returns False if the thread did not end
        within ``timeout`` (an engine stuck in one long call).
        """
        if self._closed:
            return self.join(timeout)
        self._cancel.set()
        try:
            # a job that ignores the cancel for ``timeout``: skip releasing, the thread still ends after it
            if release is not None and self._idle.wait(timeout):
                self.call(release)
        finally:
            # even when releasing failed: the thread must not outlive the interpreter
            self._closed = True
            _LIVE.discard(self)
            self._jobs.put(None)
            joined = self.join(timeout)
        return joined

    def join(self, timeout: float = ENGINE_CLOSE_S) -> bool:
        """Wait for the thread to end; True when it has."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()


@atexit.register
def _close_all_workers() -> None:
    """Join every worker still open before the interpreter finalizes (see the module docstring)."""
    for worker in list(_LIVE):
        worker.close(timeout=ENGINE_CLOSE_S)
    for cleanup in _EXIT_CLEANUPS:
        cleanup()


class InlineIds:
    """One job that runs when it is driven, on the driver's thread (:meth:`backends.base.Generation.drive`).

    Not an iterator: ids made on the caller's own thread can only be pushed to it.  An engine run
    inline is driven by its one caller, the engine process's request loop."""

    def __init__(self, job: Job, cancel: threading.Event) -> None:
        self._job = job
        self._cancel = cancel

    def run(self, emit: Callable[[int], None]) -> None:
        """Run the job here, handing each id to ``emit``; an engine's own error comes out as a BackendError."""
        if self._cancel.is_set():
            return  # cancelled before it began
        try:
            self._job(emit, self._cancel.is_set)
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(_ENGINE_FAILED.format(exc)) from exc

    def close(self) -> None:
        """Stop the job at its next check (a caller that stops early)."""
        self._cancel.set()


class InlineWorker:
    """:class:`GenerationWorker`'s calls, run on the caller's thread: for the engine process (module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cancel = threading.Event()
        self._closed = False

    def call(self, fn: Callable[[], T]) -> T | None:
        """Run ``fn`` now (loading, closing); its result or its exception, unchanged."""
        return fn()

    def stream(self, job: Job) -> InlineIds:
        """``job``, to be driven by the caller (:meth:`backends.base.Generation.drive`)."""
        if self._closed:
            raise BackendError("this backend is closed; load the model again")
        cancel = threading.Event()
        self._cancel = cancel
        return InlineIds(job, cancel)

    def cancel(self) -> None:
        """Stop the running job at its next check (called from another thread: the process's reader)."""
        self._cancel.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True  # a job runs only while its caller drives it

    def close(self, release: Callable[[], object] | None = None, timeout: float = ENGINE_CLOSE_S) -> bool:
        """Run ``release`` here; there is no thread to end."""
        self._cancel.set()
        if self._closed:
            return True
        self._closed = True
        if release is not None:
            release()
        return True


#: what a backend runs its engine's calls on: a thread of its own, or the caller's
Worker = GenerationWorker | InlineWorker


def new_worker(name: str, inline: bool = False) -> Worker:
    """The engine's own thread (:class:`GenerationWorker`), or the caller's (:class:`InlineWorker`, ``inline``)."""
    return InlineWorker(name) if inline else GenerationWorker(name)
