"""A local engine in a child process, behind the same Backend Protocol: the chat outlives any engine crash.

:class:`HostedBackend` starts ``python -m backends.engine_process`` (see there
for the wire), loads the model in it and forwards ``generate``: prompt ids
go down the pipe, generated ids come back one line each.  The session, the
TUI and headless mode cannot tell it from the engine itself, except that:

- a native crash of the engine (SIGSEGV, SIGILL, SIGABRT, SIGBUS, the OOM
  killer's SIGKILL) ends the reply with one :class:`BackendError` line that
  names the signal, the engine and its log; the caller keeps the partial
  reply, and the next ``generate`` starts a fresh engine with the same model;
- llama.cpp's AMX fault (a general protection fault in its AMX matmul on
  Intel CPUs with AMX, llama.cpp #20824) is recognised: the engine restarts
  with weight repacking off, the reply is retried if no id had been shown
  yet, and ``info.caveat`` says so;
- ``cancel`` ends the caller's iteration at once; the engine stops at its
  next check, and its late ids are dropped by job number.

The engine's facts about a reply come back in typed messages beside the ids
(:mod:`backends.engine_wire`) and are put in the reply's
:class:`~backends.base.GenerationStats`, the same fields the engine filled
in its own process.

While the child loads the model the parent is free (the TUI paints): the
two no longer share one interpreter.
"""
from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Collection, Generator, Sequence

from backends.base import (
    BackendError, BackendInfo, DraftCounts, Generation, GenerationStats, LoadOptions, ProgressListener,
    PromptProgress, SamplingParams,
)
from backends.cpu import has_amx
from backends.engine_wire import (
    ENGINE_PROCESS_MODULE, Cancel, Close, Done, Failed, Generate, Ids, LineWriter, Load, Loaded, LoadFailed, Progress,
    Request, StateNote, WireError, decode,
)
from backends.handoff import ENDED, Ended, drain
from backends.offload import ran_out_of_memory
from backends.timeouts import ENGINE_CLOSE_S

#: the repository root, so that ``-m backends.engine_process`` imports this very tree
_ROOT = Path(__file__).resolve().parent.parent

_SIGNAL_WORDS = {
    signal.SIGSEGV: "segmentation fault", signal.SIGILL: "illegal instruction: the engine was built for another CPU",
    signal.SIGABRT: "aborted", signal.SIGBUS: "bus error", signal.SIGKILL: "killed, perhaps by the out-of-memory killer",
    signal.SIGFPE: "arithmetic fault",
}


def in_process() -> bool:
    """``TOKCHAT_ENGINE_IN_PROCESS=1``: engines run inside tokchat (debugging; a crash then ends the chat)."""
    return os.environ.get("TOKCHAT_ENGINE_IN_PROCESS", "") == "1"


def wait_for_exit(proc: subprocess.Popen[Any], timeout: float) -> int:
    """``proc.wait(timeout)``, woken by the exit itself where the kernel can say so (a pidfd, Linux 5.3+).

    ``Popen.wait`` with a timeout polls, sleeping up to 50 ms between looks: the
    engine's exit was seen 10 to 30 ms late at the end of every one-shot reply."""
    import select

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here, or the process was already reaped
        return proc.wait(timeout)
    try:
        if not select.select([pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(pidfd)
    return proc.wait()


class EngineCrashed(BackendError):
    """The engine's process died; ``returncode`` as Popen gives it (negative: the signal)."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


def describe_exit(returncode: int | None) -> str:
    """``"died of SIGSEGV (segmentation fault)"`` and the like, for a child's return code."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"died of signal {-returncode}"
        word = _SIGNAL_WORDS.get(sig)
        return f"died of {sig.name}" + (f" ({word})" if word else "")
    return f"exited with status {returncode}"


def own_process_group() -> dict[str, Any]:
    """Popen's keywords that start the child in a process group of its own (its pid), in the caller's session.

    Python 3.11 has ``process_group=0``, which calls setpgid(0, 0) in the child between fork and exec in
    C.  Python 3.10 (pyproject allows it) has no such keyword: there the child calls ``os.setpgid(0, 0)``
    itself, as a ``preexec_fn``, which is the same call at the same moment.  Not ``start_new_session``:
    a new session is a new scheduling autogroup (see :class:`_Child`)."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": _setpgid_self}


def _setpgid_self() -> None:
    os.setpgid(0, 0)


class _Child:
    """One engine process and the thread that reads its answers into a queue."""

    def __init__(self, log_path: Path, warm: str | None = None) -> None:
        from backends.engine_log import rotate_log

        log_path.parent.mkdir(parents=True, exist_ok=True)
        rotate_log(log_path)  # bounded: the log past its limit becomes engine.log.1 before this engine writes
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.log_start = log.tell()
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
            self.proc = subprocess.Popen(
                [sys.executable, "-m", ENGINE_PROCESS_MODULE, *(["--warm", warm] if warm else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                # its own process group (Ctrl-C at the terminal reaches the chat, not the engine; killpg ends
                # what it forked) but the chat's session: a new session is a new scheduling autogroup, and
                # the engine then competed with the chat's own session as a stranger, many times slower
                # beside niced jobs of the same terminal (docs/engine.md, "Figures behind the code's choices")
                stderr=log, env=env, **own_process_group(),
            )
        self.answers: queue.Queue[object] = queue.Queue()
        assert self.proc.stdin is not None
        self._writer = LineWriter(self.proc.stdin)
        threading.Thread(target=self._read, name="tokchat-engine-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:  # closed here, by its only reader: closing it from another thread would wait
            for line in self.proc.stdout:  # for the buffer lock this read holds until EOF
                try:
                    self.answers.put(decode(line))
                except WireError:
                    continue  # not ours: the engine answers in engine_wire's messages only
        self.answers.put(ENDED)  # the pipe closed: the one way an engine's death reaches the code waiting

    def send(self, message: Request) -> bool:
        """Write one request; False if the child is gone (its crash is reported by the reader)."""
        try:
            self._writer.send(message)
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.log_start)
                return fh.read(4 << 20).decode("utf-8", errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = ENGINE_CLOSE_S) -> None:
        if self.proc.poll() is None:
            self.send(Close())
            try:
                wait_for_exit(self.proc, timeout)  # the engine frees its model and ends with status 0
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.kill_leftovers()
        stream = self.proc.stdin
        if stream is not None and not stream.closed:
            with contextlib.suppress(OSError):  # a pipe the child's death broke: nothing to flush
                stream.close()

    def kill_leftovers(self) -> None:
        """Kill whatever the engine left in its process group (its own, :func:`own_process_group`): a process a
        library forked (OpenVINO's telemetry did) must not outlive the engine or hold its pipe open."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left: the usual case
            os.killpg(self.proc.pid, signal.SIGKILL)


class SpareEngine:
    """An engine process started before its model, options or backend are known, waiting to be adopted.

    A chat spends its first few hundred milliseconds on settings, the model's header and presets
    before it can ask for a load; the engine process needs about as long to start Python and import
    its library.  Started at the top of the command line, the two overlap: the :class:`HostedBackend`
    handed this spare adopts its process (:meth:`take`) instead of starting one, so a one-shot
    ``--prompt`` starts its engine before our own imports are done.  ``warm`` names the engine whose
    library the process imports meanwhile (llama.cpp, the engine nearly every machine ends with).

    Owned by whoever started it (:class:`app.chat.early.EarlyEngine`): no module keeps one.  A spare
    never adopted ends at :meth:`discard`, or by itself when this process ends (its stdin closes).
    """

    def __init__(self, warm: str | None = "llama.cpp", log_path: Path | None = None) -> None:
        from backends.engine_log import default_log_path

        self._lock = threading.Lock()
        self._child: _Child | None = _Child(log_path or default_log_path(), warm=warm)

    @property
    def pid(self) -> int | None:
        """The waiting process's id; None once it was taken or discarded."""
        child = self._child
        return child.proc.pid if child is not None else None

    def take(self, log_path: Path) -> _Child | None:
        """The process, once, if it writes to ``log_path`` and still runs; else None (and it is stopped)."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return None
        if child.log_path == log_path and child.proc.poll() is None:
            return child
        child.stop()
        return None

    def discard(self) -> None:
        """Stop the process if no backend took it (the chat needed none: a ``--server`` chat, an error)."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.stop()


def amx_fault_record() -> Path:
    """Where an AMX fault seen on this CPU is remembered, so later starts begin with repacking off."""
    from platformdirs import user_cache_dir

    from backends.cpu import build_fingerprint

    return Path(user_cache_dir("tokchat", appauthor=False)) / f"amx-fault-{build_fingerprint()}"


def amx_fault(child: _Child, returncode: int | None, options: LoadOptions) -> bool:
    """Whether a crash looks like llama.cpp's AMX fault: SIGSEGV, an AMX CPU, AMX weights in the log."""
    if returncode != -signal.SIGSEGV or not options.repack or not has_amx():
        return False
    return "AMX" in child.log_since_start()


class HostedBackend:
    """A backend of ``engine`` on ``device``, run in its own process; see the module docstring."""

    def __init__(self, engine: str, device: str = "CPU", spare: SpareEngine | None = None) -> None:
        self.engine = engine
        self.device = device
        #: a process started before the model was known, adopted by the first start (:class:`SpareEngine`)
        self._spare = spare
        self.info = BackendInfo(backend=engine, device=device, model_name="", quantization="", context_size=0)
        self.log_path: Path | None = None
        self._child: _Child | None = None
        self._model_path: Path | None = None
        self._options: LoadOptions | None = None
        self._job = 0
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        #: notes of restarts, kept across them
        self._restart_notes: list[str] = []

    # -- the child's life ---------------------------------------------------------------------------------
    def load(self, model_path: Path, options: LoadOptions) -> None:
        self._model_path, self._options = Path(model_path).absolute(), options
        if self.engine == "llama.cpp" and options.repack and has_amx() and amx_fault_record().exists():
            self._options = replace(options, repack=False)
            self._restart_notes.append(
                f"weight repacking off: llama.cpp's AMX kernel crashed on this CPU before ({amx_fault_record()})")
        self._start()

    def _start(self) -> None:
        from backends.engine_log import default_log_path

        assert self._model_path is not None and self._options is not None
        options = self._options
        self.log_path = Path(options.log_path) if options.log_path else default_log_path()
        spare, self._spare = self._spare, None
        child = (spare.take(self.log_path) if spare is not None else None) or _Child(self.log_path)
        wire_options = {k: v for k, v in asdict(replace(options, model_meta=None)).items() if k != "model_meta"}
        wire_options["log_path"] = str(self.log_path)
        wire_options["draft_model"] = str(options.draft_model) if options.draft_model else None
        wire_options["state_dir"] = str(options.state_dir) if options.state_dir else None
        meta = options.model_meta
        facts = None
        if meta is not None and Path(meta.path).absolute() == self._model_path:
            from backends.model_meta import header_facts

            facts = header_facts(meta)
        child.send(Load(self.engine, self.device, str(self._model_path), wire_options, facts))
        answer = child.answers.get()
        if not isinstance(answer, Loaded):
            if isinstance(answer, Ended):
                code = child.proc.wait()
                if amx_fault(child, code, options):
                    child.stop()
                    self._safe_restart_options()
                    return self._start()
                message = (f"the {self.engine} engine {describe_exit(code)} while loading "
                           f"{self._model_path.name} (engine log: {self.log_path})")
            else:
                message = answer.error if isinstance(answer, LoadFailed) else f"the engine answered {answer!r}"
            child.stop()
            raise BackendError(message)
        self._child = child
        self.info = BackendInfo(**answer.info)
        self.info.notes = [*self._restart_notes, *self.info.notes]
        if not self._options.repack and not self.info.caveat:
            self.info.caveat = "AMX repacking off (llama.cpp #20824)"

    def _safe_restart_options(self) -> None:
        assert self._options is not None
        self._options = replace(self._options, repack=False)
        record = amx_fault_record()
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(f"llama.cpp's AMX kernel crashed here; log: {self.log_path}\n")
        except OSError as exc:  # not remembered: the next start meets the fault again and says so
            self._restart_notes.append(f"(could not remember the AMX fault in {record}: {exc.strerror})")
        self._restart_notes.append(
            "llama.cpp's AMX kernel crashed on this CPU (a known llama.cpp bug, #20824): the engine was "
            "restarted with weight repacking off"
        )

    def _crash(self, child: _Child) -> EngineCrashed:
        code = child.proc.wait()
        child.stop()
        self._child = None
        # llama.cpp aborts on an allocation that fails mid-batch (the CUDA pool grows with a long prompt's
        # batches): the signal alone blames the wrong thing, the log names the memory
        why = describe_exit(code)
        if code is not None and code < 0 and ran_out_of_memory(child.log_since_start()):
            why = (f"{why}: the GPU ran out of memory mid-reply (a smaller --ctx or fewer --gpu-layers "
                   "leaves it more)")
        return EngineCrashed(
            f"the {self.engine} engine {why}; the reply so far is kept and the next message "
            f"starts the engine again (engine log: {self.log_path})", code,
        )

    @property
    def pid(self) -> int | None:
        """The engine process's id (None while none runs)."""
        return self._child.proc.pid if self._child is not None else None

    # -- the Protocol -------------------------------------------------------------------------------------
    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        """The engine's ids and facts as they come down the pipe; ``stats.notice`` says so when the engine
        was found dead and this reply comes from a fresh one."""
        if self._model_path is None:
            raise BackendError("no model loaded")
        stats = GenerationStats()
        child = self._child
        if child is not None and child.proc.poll() is not None:
            # it died while idle (nothing was asked of it): found before anything is generated, so this
            # same request is answered by a fresh engine instead of failing and costing the user a message
            crash = self._crash(child)
            stats.notice = (f"the {self.engine} engine {describe_exit(crash.returncode)} while idle and "
                            f"was started again (engine log: {self.log_path})")
        if self._child is None:
            self._start()  # the last engine died: a fresh one, same model and settings
        stops = [int(t) for t in stop_ids]
        ids = self._stream([int(t) for t in prompt_ids], sampling, stops, stats, on_progress)
        return Generation(ids, stats, stop_ids=frozenset(stops), max_tokens=sampling.max_tokens)

    def _stream(self, prompt: list[int], sampling: SamplingParams, stops: list[int], stats: GenerationStats,
                on_progress: ProgressListener | None, retried: bool = False) -> Generator[int, None, None]:
        with self._lock:
            self._job += 1
            job = self._job
        cancel = threading.Event()
        self._cancel = cancel
        started = None
        child = self._child
        assert child is not None
        child.send(Generate(job, prompt, asdict(sampling), stops))
        shown = 0
        finished = False
        try:
            for answer in drain(child.answers, cancel.is_set):
                if getattr(answer, "job", None) != job:
                    continue  # a late answer of a cancelled job
                if isinstance(answer, Progress):
                    if started is None:
                        started = time.monotonic()
                    stats.progress = PromptProgress(answer.done, answer.total, started)
                    if on_progress is not None:
                        on_progress(stats.progress)
                elif isinstance(answer, (Ids, Done)):
                    stats.prompt_evaluated = answer.evaluated
                    if answer.draft:
                        stats.draft = DraftCounts(*answer.draft)
                    stats.mask_ms = answer.mask_ms
                    if isinstance(answer, Done):
                        if answer.finish:
                            stats.end(answer.finish)  # the engine's own reason (a full context)
                        finished = True
                        return
                    for token in answer.ids:
                        shown += 1
                        yield token
                elif isinstance(answer, StateNote):
                    stats.state = answer.note
                elif isinstance(answer, Failed):
                    finished = True
                    raise BackendError(answer.error)
            if cancel.is_set():
                return
            # the pipe ended before the reply did: the engine is gone
            crash = self._crash(child)
            if shown == 0 and self._options is not None and amx_fault(child, crash.returncode, self._options):
                self._safe_restart_options()
                self._start()
                yield from self._stream(prompt, sampling, stops, stats, on_progress)
                return
            if shown == 0 and not retried:
                # dead before it answered anything: most likely it died while idle and was still
                # going down when ``generate`` looked (a process whose main thread is a zombie while
                # another thread ends is not reaped yet); a fresh engine answers this same request,
                # once (a request that itself kills the engine then costs one line, as before)
                when = "while evaluating the prompt" if started is not None else "while idle"
                stats.notice = (f"the {self.engine} engine {describe_exit(crash.returncode)} "
                                f"{when} and was started again (engine log: {self.log_path})")
                self._start()
                yield from self._stream(prompt, sampling, stops, stats, on_progress, retried=True)
                return
            raise crash
        finally:
            if not finished and not cancel.is_set() and self._child is child:
                # a caller that stops iterating early also stops the engine
                cancel.set()
                child.send(Cancel(job))

    def cancel(self) -> None:
        self._cancel.set()
        child = self._child
        if child is not None:
            child.send(Cancel(self._job))

    def close(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()
