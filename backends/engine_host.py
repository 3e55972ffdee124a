"""The engine's own process: ``python -m backends.engine_host``, started and owned by :mod:`backends.hosted`.

Native engines (llama.cpp, OpenVINO, MLX) can die of a signal: a bad kernel
(llama.cpp's AMX fault), an instruction the CPU lacks, the OOM killer.  Run
inside the chat they would take the UI, the terminal and the reply with
them, so each loaded model lives here instead, in a child process that
speaks ids over a pipe, as ollama runs each model in its own runner.

The wire: one JSON object per line.  The parent writes requests on our
stdin; we answer on the stdout we were given, which is moved off fd 1 at
start so that nothing an engine prints there can corrupt the stream (fd 1
and 2 both go to the engine log).

Requests (parent -> child)::

    {"op": "load", "engine": "llama.cpp", "device": "CPU", "path": ..., "options": {...}, "meta": {...}}
    {"op": "generate", "job": 3, "prompt": [ids], "sampling": {...}, "stop": [ids]}
    {"op": "cancel", "job": 3}          # acted on at once, by the reader thread
    {"op": "close"}

Answers (child -> parent), every one of a generation tagged with its job::

    {"loaded": {BackendInfo fields}}  |  {"error": "one line"}
    {"job": 3, "progress": [done, total]}           # while the prompt is evaluated
    {"job": 3, "ids": [id], "evaluated": n, "draft": [drafted, accepted]}   # every generated id
    {"job": 3, "done": true, "evaluated": n, "draft": [drafted, accepted]}  |  {"job": 3, "error": "one line"}

(``draft`` only when the backend speculates: its ``last_draft_counts``, current
with each id, since the reader stops reading at a stop id.)

Sampling stays here, beside the logits; only ids cross the pipe.  ``meta``
is the header's scalar facts as the chat read them (optional).

``--warm llama.cpp`` (a process started before its model is known, see
:func:`backends.hosted.prestart_engine`) imports that engine's library while
the first request is still on its way.
"""
from __future__ import annotations

import faulthandler
import json
import os
import queue
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from backends.base import BackendError, LoadOptions, PromptProgress, SamplingParams


class _Wire:
    """The answer stream: whole lines, written under a lock (the engine thread reports progress too)."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            self._out.write(line)
            self._out.flush()


#: what ``--warm ENGINE`` imports ahead of the load request: the modules the load would import first
_WARM_MODULES = {"llama.cpp": ("backends.llama_cpp", "backends.llama_engine", "llama_cpp")}


def _warm(engine: str) -> None:
    """Import ``engine``'s library now, on a thread; a load request that comes meanwhile waits for it
    (:meth:`EngineHost._load`) instead of importing the same modules beside it."""
    import importlib

    for name in _WARM_MODULES.get(engine, ()):
        try:
            importlib.import_module(name)
        except ImportError:
            return  # the load request will say what is missing, in its own words


def _make_backend(engine: str, device: str):
    from backends.detect import Candidate
    from backends.registry import ENGINES

    return ENGINES[engine](Candidate(device.lower(), engine, device, runnable=True, reason=""))


class EngineHost:
    """Serves one backend to the parent; see the module docstring."""

    def __init__(self, wire: _Wire, warming: threading.Thread | None = None) -> None:
        self.wire = wire
        #: the ``--warm`` import, joined before a load imports anything: two threads importing
        #: overlapping modules at once can meet in CPython's per-module import locks
        self.warming = warming
        self.backend = None
        self.current_job: int | None = None
        self.requests: queue.Queue = queue.Queue()

    def read_requests(self, stdin: IO[bytes]) -> None:
        """The reader thread: a cancel acts at once, everything else waits its turn."""
        for line in stdin:
            request = json.loads(line)
            if request.get("op") == "cancel":
                if self.backend is not None and request.get("job") == self.current_job:
                    self.backend.cancel()
                continue
            self.requests.put(request)
        self.requests.put({"op": "close"})  # the parent is gone: end

    def serve(self) -> None:
        while True:
            request = self.requests.get()
            op = request.get("op")
            if op == "close":
                return
            if op == "load":
                self._load(request)
            elif op == "generate":
                self._generate(request)

    def _load(self, request: dict[str, Any]) -> None:
        if self.warming is not None:
            self.warming.join()
            self.warming = None
        try:
            paths = ("log_path", "draft_model")
            options = LoadOptions(**{k: v for k, v in request["options"].items() if k not in paths})
            for key in paths:
                if request["options"].get(key):
                    setattr(options, key, Path(request["options"][key]))
            if request.get("meta"):  # the header the chat already read: not parsed a second time here
                from backends.model_meta import meta_from_facts

                options.model_meta = meta_from_facts(request["path"], request["meta"])
            backend = _make_backend(request["engine"], request["device"])
            backend.load(Path(request["path"]), options)
        except BackendError as exc:
            self.wire.send({"error": str(exc)})
            return
        self.backend = backend
        self.wire.send({"loaded": asdict(backend.info)})

    def _generate(self, request: dict[str, Any]) -> None:
        job = request["job"]
        backend = self.backend
        if backend is None:
            self.wire.send({"job": job, "error": "no model loaded"})
            return
        send = self.wire.send

        def progress(p: PromptProgress) -> None:
            send({"job": job, "progress": [p.done, p.total]})

        if hasattr(backend, "on_prompt_progress"):
            backend.on_prompt_progress = progress
        self.current_job = job
        try:
            for token in backend.generate(request["prompt"], SamplingParams(**request["sampling"]),
                                          request["stop"]):
                answer = {"job": job, "ids": [int(token)], "evaluated": backend.last_prompt_evaluated}
                counts = getattr(backend, "last_draft_counts", None)
                if counts is not None:  # current with each id: the reader may stop at a stop id
                    answer["draft"] = [counts.drafted, counts.accepted]
                send(answer)
        except BackendError as exc:
            send({"job": job, "error": str(exc)})
            return
        finally:
            self.current_job = None
        done: dict[str, Any] = {"job": job, "done": True, "evaluated": backend.last_prompt_evaluated}
        counts = getattr(backend, "last_draft_counts", None)
        if counts is not None:
            done["draft"] = [counts.drafted, counts.accepted]
        send(done)


def main() -> int:
    # the answer stream gets its own descriptor; fd 1 then joins fd 2 (the engine log the parent opened)
    wire = _Wire(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()  # a native crash leaves the Python stack in the engine log
    warming = None
    if "--warm" in sys.argv[1:-1]:
        engine = sys.argv[sys.argv.index("--warm") + 1]
        warming = threading.Thread(target=_warm, args=(engine,), name="tokchat-engine-warm", daemon=True)
        warming.start()
    host = EngineHost(wire, warming)
    reader = threading.Thread(target=host.read_requests, args=(sys.stdin.buffer,), daemon=True)
    reader.start()
    # the model is not freed when the work is done: the process ends (exit_now) and the kernel takes its
    # memory back at once, sooner than llama.cpp frees it buffer by buffer (closing took 0.06 s, now 0.02 s)
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
