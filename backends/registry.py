"""``open_backend``: detect, pick, load, and fall back with the reason written down.

Backends are looked up by engine name; each module imports its engine only
inside ``load``.  The decisions (what was chosen, what failed and why) go
into ``backend.info.notes`` so the UI and ``--stats`` can show them.
Every engine runs in its own process (:mod:`backends.engine_client`), so a native
crash costs the reply, never the chat.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from backends.base import Backend, BackendError, LoadOptions
from backends.detect import Candidate, detect, plan
from backends.engine_client import SpareEngine, in_process
from backends.gpu_inventory import GpuInventory
from backends.model_meta import is_mlx_dir
from backends.probe import SystemProbe


def _llama(c: Candidate, inline: bool = False) -> Backend:
    from backends.llama_cpp import LlamaCppBackend

    return LlamaCppBackend(device=c.device, inline=inline)


def _openvino(c: Candidate, inline: bool = False) -> Backend:
    from backends.openvino import OpenVINOBackend

    return OpenVINOBackend(inline=inline)


def _mlx(c: Candidate, inline: bool = False) -> Backend:
    from backends.mlx import MLXBackend

    return MLXBackend(inline=inline)


#: engine name -> factory of the engine itself (what runs in the engine process); ``inline``: on the caller's
#: thread (the engine process's main thread, :class:`backends.worker.InlineWorker`), else on a thread of its own
ENGINES: dict[str, Callable[..., Backend]] = {"llama.cpp": _llama, "openvino": _openvino, "mlx": _mlx}


def hosted(c: Candidate, spare: SpareEngine | None = None) -> Backend:
    """The engine of ``c`` in its own process (:mod:`backends.engine_client`), in ``spare``'s if given."""
    from backends.engine_client import HostedBackend

    return HostedBackend(c.engine, c.device, spare=spare)


def open_backend(model_path: Path | str, options: LoadOptions, probe: SystemProbe | None = None,
                 spare: SpareEngine | None = None) -> Backend:
    """A loaded backend for ``model_path`` per ``options.backend`` (see :func:`backends.detect.plan`).

    ``spare``: an engine process started early (:class:`backends.engine_client.SpareEngine`); the first
    candidate's engine runs in it.  Whoever handed it in still discards it if no candidate took it."""
    path = Path(model_path)
    if not path.exists():
        raise BackendError(f"model not found: {path}")
    model_is_mlx = is_mlx_dir(path)
    report = detect(probe, requested=options.backend, model_is_mlx=model_is_mlx)
    order = plan(report, options.backend, model_is_mlx=model_is_mlx)
    if order and order[0].engine == "llama.cpp":
        refused = _does_not_fit(path, options, report.facts.gpus if order[0].device == "CUDA" else None)
        if refused:
            raise BackendError(refused)  # before any engine starts: never a load the OOM killer ends
    notes: list[str] = []
    for n, candidate in enumerate(order):
        backend = ENGINES[candidate.engine](candidate) if in_process() else hosted(candidate, spare)
        opts = options
        if candidate.device == "CUDA" and options.gpu_free is None:  # what detection read, for the offload plan
            opts = replace(opts, gpu_free=report.facts.gpus.free_vram_per_gpu())
        if candidate.engine != "openvino" and options.device:
            opts = replace(opts, device=None)  # --device picks the OpenVINO device only
        elif candidate.engine == "openvino" and not options.device and candidate.device != "CPU":
            opts = replace(opts, device=candidate.device)
        try:
            backend.load(path, opts)
        except BackendError as exc:
            notes.append(f"{candidate.label} could not load {path.name}: {exc}")
            continue
        if n == 0 and options.backend == "auto":
            notes.append(f"--backend auto chose {candidate.name} ({candidate.label}): {candidate.reason}")
        elif n == 0:
            notes.append(f"--backend {candidate.name}: {candidate.label}")
        else:
            notes.append(f"fell back to {candidate.name} ({candidate.label}): {candidate.reason}")
        idle = report.unused_gpu(candidate)
        if idle is not None:
            # never a silent CPU run on a GPU machine: the model bar keeps this caveat in sight
            backend.info.caveat = backend.info.caveat or f"GPU unused: {idle.reason}"
            notes.append(f"the {idle.device} GPU is unused: {idle.reason}; fix: {idle.fix}")
        backend.info.notes = notes + backend.info.notes
        return backend
    raise BackendError(" ; ".join(notes) or "no backend could load the model")


class PendingBackend:
    """:func:`open_backend` started on a thread, so the caller does its own work while the engine loads.

    The engine loads in its own process; the thread only spawns it, sends
    the request and waits, so it hardly competes for this interpreter.  A
    chat starts this first and reads its tokenizer and template meanwhile:
    start-up then costs the longer of the two, not their sum.
    """

    def __init__(self, model_path: Path | str, options: LoadOptions, probe: SystemProbe | None = None,
                 spare: SpareEngine | None = None) -> None:
        import threading

        self._backend: Backend | None = None
        self._error: BaseException | None = None
        self._discarded = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._open, args=(model_path, options, probe, spare),
                                        name="tokchat-backend-load", daemon=True)
        self._thread.start()

    def _open(self, model_path: Path | str, options: LoadOptions, probe: SystemProbe | None,
              spare: SpareEngine | None) -> None:
        try:
            backend = open_backend(model_path, options, probe, spare)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc
            return
        finally:
            if spare is not None:
                spare.discard()  # not taken (the load failed first, or another log): it goes now
        with self._lock:
            self._backend = backend
            discarded = self._discarded
        if discarded:
            backend.close()

    def result(self) -> Backend:
        """The loaded backend, or the error loading raised (raised here, in the caller's thread)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._backend is not None
        return self._backend

    def discard(self) -> None:
        """The caller gave up (its tokenizer failed, Ctrl-C): close the backend now or when its load ends.

        Does not wait for the load, so an interrupt is not held up by a large model.
        """
        with self._lock:
            self._discarded = True
            backend = self._backend
        if backend is not None:
            backend.close()


def start_backend(model_path: Path | str, options: LoadOptions, probe: SystemProbe | None = None,
                  spare: SpareEngine | None = None) -> PendingBackend:
    """:func:`open_backend` on a thread; ``.result()`` gives the backend (see :class:`PendingBackend`).
    ``spare`` is the pending load's from now on: taken by the engine, or discarded when the load ends."""
    return PendingBackend(model_path, options, probe, spare)


def _does_not_fit(path: Path, options: LoadOptions, gpus: GpuInventory | None) -> str | None:
    """:func:`backends.fit.refusal` for this load (None: it fits, or the header is the load's to report).

    ``gpus``: the GPUs detection read (their free VRAM counts; None: the load is on the CPU), so this
    process does not ask ``nvidia-smi`` a second time."""
    from backends.fit import free_memory, refusal
    from backends.kv_types import KvTypeError, parse_kv_type
    from backends.model_meta import known_meta

    try:
        meta = known_meta(path, options.model_meta)
        kv_type = parse_kv_type(options.kv_type)
        draft_meta = (known_meta(options.draft_model, None)
                      if options.draft_model is not None and options.speculative in ("draft", "auto") else None)
    except (BackendError, KvTypeError, OSError, ValueError):
        return None
    if meta.format != "gguf":
        return None
    draft = (Path(options.draft_model), draft_meta) if draft_meta is not None and options.draft_model else None
    memory = free_memory(gpus is not None, gpus)
    return refusal(path, meta, options.n_ctx or meta.default_ctx(), kv_type, memory, draft=draft, repack=options.repack)
