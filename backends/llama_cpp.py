"""llama.cpp through llama-cpp-python: CPU, CUDA, ROCm (HIP), Vulkan and Metal builds.

Every turn passes the whole conversation's ids; the backend keeps the
longest common prefix of llama.cpp's KV cache and evaluates only the rest,
``PREFILL_CHUNK`` ids at a time, so a cancel is honoured between batches of
a long prompt too.  Ids are picked by a llama.cpp sampler chain built in
:mod:`backends.llama_sampler` (tokchat's sampling meaning, the prompt in
the penalty window), not by ``Llama.generate``'s own.  A
subclass of ``Llama`` counts the ids the engine's ``eval`` really evaluated
(``last_prompt_evaluated`` is measured, not inferred).

Not handled: multiple sequences, grammars, speculative decoding.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable, Collection, Iterator, Sequence

from backends.base import (
    BackendError, BackendInfo, LoadOptions, SamplingParams, checked_prompt, common_prefix_length, resolve_seed,
)
from backends.engine_log import capture_llama_log
from backends.llama_sampler import LlamaCppSampler
from backends.model_meta import known_meta
from backends.worker import GenerationWorker

#: ids per engine call while evaluating a long new prompt: the cancel granularity there
PREFILL_CHUNK = 128


def available_cpus() -> int:
    """CPUs this process may run on (cgroup/affinity aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """All CPUs but one: that one is left for the UI and Python's side of the pipeline.

    llama.cpp's worker threads spin-wait at every barrier, so when one of
    them shares a core with another busy thread the whole step waits for
    it.  Measured on this project's 2-core machine under load: 2 threads
    decoded SmolLM2 at 0.4-6.7 tok/s, 1 thread at 30-35 tok/s.
    """
    return max(1, available_cpus() - 1)


@functools.cache
def _counting_llama_class():
    """``llama_cpp.Llama`` that counts the ids its ``eval`` evaluates (built lazily: heavy import)."""
    import llama_cpp

    class CountingLlama(llama_cpp.Llama):
        tokchat_evaluated = 0

        def eval(self, tokens: Sequence[int]) -> None:
            self.tokchat_evaluated += len(tokens)
            super().eval(tokens)

    return CountingLlama


class LlamaCppBackend:
    """One GGUF model in llama.cpp; ``device`` says which offload the caller chose."""

    def __init__(self, device: str = "CPU") -> None:
        self.device = device
        self.info = BackendInfo(backend="llama.cpp", device=device, model_name="", quantization="", context_size=0)
        self.last_prompt_evaluated = 0
        self.log_path: Path | None = None
        self._llm = None
        self._worker: GenerationWorker | None = None
        self._model_path: Path | None = None
        self._model_identity: tuple[int, int] | None = None

    def load(self, model_path: Path, options: LoadOptions) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise BackendError(
                "llama.cpp backend needs llama-cpp-python: pip install llama-cpp-python"
            ) from exc
        meta = known_meta(model_path, options.model_meta)
        if meta.format != "gguf":
            raise BackendError(f"llama.cpp loads .gguf files; {model_path} is an MLX directory (use --backend mlx)")
        n_ctx = options.n_ctx or meta.default_ctx()
        gpu_layers = options.n_gpu_layers
        if gpu_layers is None:
            gpu_layers = 0 if self.device == "CPU" else -1
        threads = options.n_threads or default_threads()
        self.log_path = capture_llama_log(options.log_path)
        self._worker = GenerationWorker("llama.cpp")

        def build():
            return _counting_llama_class()(
                model_path=str(model_path), n_ctx=n_ctx, n_gpu_layers=gpu_layers, n_threads=threads,
                n_threads_batch=threads, verbose=False,
            )

        try:
            self._llm = self._worker.call(build)
        except (ValueError, RuntimeError, OSError) as exc:
            self._worker.close()
            self._worker = None
            raise BackendError(
                f"llama.cpp could not load {Path(model_path).name}: {exc} (details in {self.log_path})"
            ) from exc
        self._model_path = Path(model_path)
        stat = os.stat(model_path)
        self._model_identity = (stat.st_ino, stat.st_size)
        blocks = meta.kv.get(f"{meta.architecture}.block_count")
        offloaded = 0
        if gpu_layers != 0 and isinstance(blocks, int):
            # llama.cpp counts the output layer as one more offloadable layer
            offloaded = blocks + 1 if gpu_layers < 0 else min(gpu_layers, blocks + 1)
        self.info = BackendInfo(
            backend="llama.cpp", device=self.device, model_name=meta.name, quantization=meta.quantization,
            context_size=self._llm.n_ctx(), offloaded_layers=offloaded,
            notes=[f"llama.cpp: {threads} thread(s), n_ctx {self._llm.n_ctx()}, log in {self.log_path}"],
        )

    def _prefill(self, prompt: list[int], cancelled: Callable[[], bool]) -> bool:
        """Evaluate the prompt past the cached common prefix, in batches; False if cancelled.

        At least the last prompt id is evaluated again: its logits pick the
        first reply id.  ``Llama.eval`` drops cached ids beyond ``n_tokens``.
        """
        llm = self._llm
        keep = min(common_prefix_length(llm._input_ids, prompt), len(prompt) - 1)
        if keep == 0:
            llm.reset()
        else:
            llm.n_tokens = keep
        for start in range(keep, len(prompt), PREFILL_CHUNK):
            if cancelled():
                return False
            llm.eval(prompt[start : start + PREFILL_CHUNK])
        return True

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int]
    ) -> Iterator[int]:
        if self._llm is None or self._worker is None:
            raise BackendError("no model loaded")
        self._check_model_file()
        n_ctx = self._llm.n_ctx()
        prompt = checked_prompt(prompt_ids, n_ctx)
        stops = frozenset(stop_ids)
        seed = resolve_seed(sampling)

        def job(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            llm = self._llm
            llm.tokchat_evaluated = 0
            prefilled = self._prefill(prompt, cancelled)
            self.last_prompt_evaluated = llm.tokchat_evaluated
            if not prefilled:
                return
            sampler = LlamaCppSampler(sampling, seed, llm.n_vocab(), n_ctx, prompt)
            try:
                for count in range(1, sampling.max_tokens + 1):
                    token = sampler.sample(llm.ctx)
                    emit(token)
                    # llm.n_tokens == n_ctx: the id just emitted would not fit, so the reply ends here
                    if token in stops or count >= sampling.max_tokens or cancelled() or llm.n_tokens >= n_ctx:
                        return
                    llm.eval([token])
            finally:
                sampler.close()

        return self._worker.stream(job)

    def _check_model_file(self) -> None:
        """Refuse to run on a model file that was truncated or rewritten in place.

        llama.cpp maps the file: reading a page past a truncated end kills the
        process with SIGBUS, so a changed size must stop us before the engine
        touches the weights.  A deleted or replaced file is harmless (the
        mapping keeps the old inode alive).
        """
        if self._model_path is None or self._model_identity is None:
            return
        try:
            stat = os.stat(self._model_path)
        except FileNotFoundError:
            return
        inode, size = self._model_identity
        if stat.st_ino == inode and stat.st_size != size:
            raise BackendError(
                f"the model file {self._model_path.name} changed on disk while loaded "
                f"({size} -> {stat.st_size} bytes): reload it (/model in the TUI) or restart tokchat"
            )

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    def close(self) -> None:
        """Free the model on its own thread and join the thread."""
        worker, llm = self._worker, self._llm
        self._worker, self._llm = None, None
        if worker is not None:
            worker.close(llm.close if llm is not None else None)
