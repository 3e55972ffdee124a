"""The engine's own process: ``python -m backends.engine_process``, started and owned by :mod:`backends.engine_client`.

Native engines (llama.cpp, OpenVINO, MLX) can die of a signal: a bad kernel
(llama.cpp's AMX fault), an instruction the CPU lacks, the OOM killer.  Run
inside the chat they would take the UI, the terminal and the reply with
them, so each loaded model lives here instead, in a child process that
speaks ids over a pipe, as ollama runs each model in its own runner.

The wire: :mod:`backends.engine_wire` (typed messages, one JSON line each).
The parent writes requests on our stdin; we answer on the stdout we were
given, which is moved off fd 1 at start so that nothing an engine prints there
can corrupt the stream (fd 1 and 2 both go to the engine log).

Two threads, no more.  The main thread is the request loop, and the engine
runs on it: loading and generating are direct calls
(:class:`backends.worker.InlineWorker`; no generation thread stands
between), and each id goes down the pipe as the engine makes it
(:meth:`backends.base.Generation.drive`).  The reader thread reads requests:
a cancel is acted on at once, there, by setting the running engine's cancel
flag while the main thread generates (the engine stops at its next check,
between ids or prompt batches); everything else waits its turn in a queue.

Sampling stays here, beside the logits; only ids cross the pipe.  ``meta``
is the header's scalar facts as the chat read them (optional).

``--warm llama.cpp`` (a process started before its model is known, see
:class:`backends.engine_client.SpareEngine`) imports that engine's library while
the first request is still on its way.
"""
from __future__ import annotations

import faulthandler
import os
import queue
import sys
import threading
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import IO

from backends.base import Backend, BackendError, GenerationStats, LoadOptions, PromptProgress, SamplingParams
from backends.engine_wire import (
    Cancel, Close, Done, Failed, Generate, Ids, LineWriter, Load, Loaded, LoadFailed, Progress, StateNote, decode,
)
from backends.state_keeper import CLOSE_WAIT_S, KeepsState


#: what ``--warm ENGINE`` imports ahead of the load request, in two parts: the modules a load imports first
#: (the load request waits for these), then those the first reply needs (imported while the model loads:
#: llama.cpp's load runs in C without the GIL)
_WARM_MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "llama.cpp": (("backends.llama_cpp", "backends.llama_engine", "backends.llama_lib"),
                  ("backends.penalty", "backends.llama_sampler", "backends._pick")),
}


class Warming:
    """The ``--warm`` imports on a thread of their own (see :data:`_WARM_MODULES`).

    A load waits for the first part, a reply for all of it, rather than
    importing the same modules beside it: two threads importing overlapping
    modules at once can meet in CPython's per-module import locks."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.for_load = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tokchat-engine-warm", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import importlib

        for_load, for_reply = _WARM_MODULES.get(self.engine, ((), ()))
        try:
            for name in for_load:
                importlib.import_module(name)
            if self.engine == "llama.cpp":
                from backends.llama_lib import llama_bindings

                llama_bindings()
        except ImportError:
            return  # the load request will say what is missing, in its own words
        finally:
            self.for_load.set()
        for name in for_reply:
            try:
                importlib.import_module(name)
            except ImportError:
                return  # the reply will say so, in its own words


def _make_backend(engine: str, device: str) -> Backend:
    from backends.detect import Candidate
    from backends.registry import ENGINES

    # inline: this process's main thread runs the engine (see the module docstring)
    return ENGINES[engine](Candidate(device.lower(), engine, device, runnable=True, reason=""), inline=True)


class EngineHost:
    """Serves one backend to the parent; see the module docstring."""

    def __init__(self, wire: LineWriter, warming: Warming | None = None) -> None:
        self.wire = wire
        #: the ``--warm`` imports: a load waits for their first part, a reply for all of them
        self.warming = warming
        self.backend: Backend | None = None
        self.current_job: int | None = None
        #: the highest job a cancel named: a job cancelled before it began is not run
        self.cancelled_up_to = 0
        self.requests: queue.Queue[object] = queue.Queue()
        #: the job whose StateNote went out
        self._state_noted = 0

    def read_requests(self, stdin: IO[bytes]) -> None:
        """The reader thread: a cancel acts at once, everything else waits its turn."""
        for line in stdin:
            request = decode(line)
            if isinstance(request, Cancel):
                self.cancelled_up_to = max(self.cancelled_up_to, request.job)
                if self.backend is not None and request.job == self.current_job:
                    self.backend.cancel()  # the main thread's engine stops at its next check
                continue
            self.requests.put(request)
        self.requests.put(Close())  # the parent is gone: end

    def serve(self) -> None:
        while True:
            request = self.requests.get()
            if isinstance(request, Close):
                if isinstance(self.backend, KeepsState):  # a state write under way: a bounded wait, then the end
                    self.backend.flush_state(CLOSE_WAIT_S)
                return
            if isinstance(request, Load):
                self._load(request)
            elif isinstance(request, Generate):
                self._generate(request)

    def _load(self, request: Load) -> None:
        if self.warming is not None:
            self.warming.for_load.wait()
        try:
            paths = ("log_path", "draft_model", "state_dir")
            options = LoadOptions(**{k: v for k, v in request.options.items() if k not in paths})
            for key in paths:
                if request.options.get(key):
                    setattr(options, key, Path(request.options[key]))
            if request.meta:  # the header the chat already read: not parsed a second time here
                from backends.model_meta import meta_from_facts

                options.model_meta = meta_from_facts(request.path, request.meta)
            backend = _make_backend(request.engine, request.device)
            backend.load(Path(request.path), options)
        except BackendError as exc:
            self.wire.send(LoadFailed(str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug of ours while loading: said as itself, not as a dead engine
            # left to end the process, it read as "the engine died of SIGABRT while loading MODEL", which blames
            # the model; the engine stays up without a model and the traceback goes to the engine log
            traceback.print_exc()
            self.wire.send(LoadFailed(f"{type(exc).__name__}: {exc} (a fault of tokchat's; the traceback is in the "
                                      "engine log)"))
            return
        self.backend = backend
        self.wire.send(Loaded(asdict(backend.info)))

    def _generate(self, request: Generate) -> None:
        if self.warming is not None:
            self.warming.thread.join()
            self.warming = None
        job = request.job
        backend = self.backend
        if backend is None:
            self.wire.send(Failed(job, "no model loaded"))
            return
        send = self.wire.send

        def progress(p: PromptProgress) -> None:
            send(Progress(job, p.done, p.total))

        if job <= self.cancelled_up_to:
            return  # cancelled while it waited: the chat reads no answer of it
        self.current_job = job
        try:
            generation = backend.generate(request.prompt, SamplingParams(**request.sampling), request.stop,
                                          on_progress=progress)
            stats = generation.stats
            if job <= self.cancelled_up_to:
                generation.close()  # cancelled between the check above and the engine's fresh cancel flag

            def sent(token: int) -> None:
                # the draft counts travel with every id: the reader may stop at a stop id
                self._note_state(job, stats)
                send(Ids(job, [int(token)], stats.prompt_evaluated, _draft(stats), stats.mask_ms))

            generation.drive(sent)
        except BackendError as exc:
            send(Failed(job, str(exc)))
            return
        finally:
            self.current_job = None
        self._note_state(job, stats)
        send(Done(job, stats.prompt_evaluated, _draft(stats), stats.finish_reason or "", stats.mask_ms))


    def _note_state(self, job: int, stats: GenerationStats) -> None:
        """The state cache's note for ``job``, once, before its first id (the chat may stop reading at a stop id)."""
        if stats.state and self._state_noted != job:
            self._state_noted = job
            self.wire.send(StateNote(job, stats.state))


def _draft(stats: GenerationStats) -> tuple[int, int] | None:
    counts = stats.draft
    return (counts.drafted, counts.accepted) if counts is not None else None


def main() -> int:
    # the answer stream gets its own descriptor; fd 1 then joins fd 2 (the engine log the parent opened)
    wire = LineWriter(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()  # a native crash leaves the Python stack in the engine log
    warming = None
    if "--warm" in sys.argv[1:-1]:
        engine = sys.argv[sys.argv.index("--warm") + 1]
        warming = Warming(engine)
    host = EngineHost(wire, warming)
    reader = threading.Thread(target=host.read_requests, args=(sys.stdin.buffer,), daemon=True)
    reader.start()
    # the model is not freed when the work is done: the process ends (exit_now) and the kernel takes its
    # memory back at once, sooner than llama.cpp frees it buffer by buffer (measured: docs/engine.md, "Figures
    # behind the code's choices")
    host.serve()
    return 0


def exit_now(status: int) -> None:
    """End the process without the interpreter's finalisation.

    The reader thread is parked in a read of stdin, holding its buffer's
    lock; at shutdown CPython waits a second for that lock and then aborts
    ("could not acquire lock for <stdin> at interpreter shutdown"), so every
    engine used to take a second to close and die of SIGABRT.  Everything
    worth keeping is flushed here first: the answers went out line by line;
    the engine's memory, mappings and files go with the process.
    """
    for stream in (sys.stderr, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
