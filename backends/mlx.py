"""MLX through mlx-lm: an MLX model directory or a Q4_0/Q4_1/Q8_0 GGUF file.

One prompt cache lives as long as the model.  Each turn compares the new
prompt with the ids the cache holds, trims the cache back to the common
prefix (a regenerate or an edit shortens it) and feeds only the rest, in
chunks so a cancel is honoured during a long prompt too and the
generation's ``stats.progress`` says how far it got.  On Apple Silicon
MLX runs on the GPU (Metal); elsewhere ``mlx[cpu]`` runs on the CPU.

Sampling is tokchat's chain (:mod:`backends.sampling`, the meaning set out
on :class:`backends.base.SamplingParams`) on the logits MLX computes, not
mlx-lm's sampler: its top-p does not renormalize after top-k and its
penalty window is its own, so the same settings would mean something else.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Collection, Sequence

from backends.base import (
    BackendError, BackendInfo, Generation, GenerationStats, LoadOptions, ProgressListener, PromptProgress,
    SamplingParams, checked_prompt, common_prefix_length,
)
from backends.model_meta import known_meta
from backends.sampling import NumpySampler
from backends.worker import Worker, new_worker, run_at_exit

#: ids fed to the model per forward pass while evaluating a prompt: the cancel granularity.
#: On the CPU, MLX's prompt cost grows linearly with the chunk (no batching gain measured),
#: so small chunks cost nothing and keep a cancel within a few seconds.
PREFILL_CHUNK = {"Metal": 128, "CPU": 16}
#: mlx-lm model modules whose output is exactly ``head(model(ids))``, no extra scaling
_PLAIN_HEAD_MODULES = frozenset({"mlx_lm.models.llama", "mlx_lm.models.qwen2"})


def clear_thread_streams() -> None:
    """Finish and destroy the MLX streams of the calling thread.

    Since MLX 0.32 every thread that runs MLX work owns its streams (each a
    C++ thread) and must destroy them before it ends, the main thread
    included: left to static destructors at process exit they abort it
    ("terminate called without an active exception", exit status 134 after
    the reply was printed: about one headless run in four here).
    """
    import mlx.core as mx

    mx.synchronize()
    clear = getattr(mx, "clear_streams", None)  # older MLX has no per-thread streams
    if clear is not None:
        clear()


class MLXBackend:
    """One model in MLX with a single reusable prompt cache."""

    def __init__(self, inline: bool = False) -> None:
        #: run the engine on the caller's thread (the engine process's main thread) instead of a thread of its own
        self._inline = inline
        self.info = BackendInfo(backend="mlx", device="CPU", model_name="", quantization="", context_size=0)
        self._model = None
        self._cache: list | None = None
        self._cached_ids: list[int] = []  # exactly the ids whose keys/values the cache holds
        self._worker: Worker | None = None

    def load(self, model_path: Path, options: LoadOptions) -> None:
        try:
            import mlx.core as mx
            import mlx_lm  # noqa: F401  (the model classes live there)
        except ImportError as exc:
            raise BackendError('MLX backend needs mlx-lm: pip install mlx-lm (on Linux also "mlx[cpu]")') from exc
        meta = known_meta(model_path, options.model_meta)
        run_at_exit(clear_thread_streams)  # the main thread touches MLX too (device query, cache set-up)
        self._worker = new_worker("mlx", self._inline)

        def build():
            if meta.format == "mlx":
                from mlx_lm.utils import load_model

                return load_model(Path(model_path))[0]
            from backends.mlx_gguf import load_gguf_model

            return load_gguf_model(meta)

        try:
            self._model = self._worker.call(build)
        except BackendError:
            self._worker.close(clear_thread_streams)
            self._worker = None
            raise
        except (ValueError, RuntimeError, OSError) as exc:
            self._worker.close(clear_thread_streams)
            self._worker = None
            raise BackendError(f"MLX could not load {Path(model_path).name}: {exc}") from exc
        self._reset_cache()
        device = "Metal" if mx.metal.is_available() else "CPU"
        self.info = BackendInfo(
            backend="mlx", device=device, model_name=meta.name, quantization=meta.quantization,
            context_size=options.n_ctx or meta.default_ctx(),
            notes=[f"MLX {mx.__version__} on {device}" + (f", GGUF {meta.quantization} kept quantized"
                                                         if meta.format == "gguf" else "")],
        )

    def _reset_cache(self) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        self._cache = make_prompt_cache(self._model)
        self._cached_ids = []

    def _rewind(self, keep: int) -> None:
        """Drop cached ids beyond ``keep`` (regenerate, edit, a new conversation)."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        extra = len(self._cached_ids) - keep
        if extra <= 0:
            return
        if keep == 0 or not can_trim_prompt_cache(self._cache):
            self._reset_cache()
            return
        trim_prompt_cache(self._cache, extra)
        del self._cached_ids[keep:]

    def _forward(self, ids: list[int]):
        """Feed ``ids`` through the model (extending the cache); logits of the last position."""
        import mlx.core as mx

        model = self._model
        inputs = mx.array(ids)[None]
        if type(model).__module__ in _PLAIN_HEAD_MODULES:
            # the output head only for the last position: on a 49k vocabulary it costs
            # more than all the layers for a multi-id prompt chunk
            hidden = model.model(inputs, cache=self._cache)[:, -1:, :]
            head = model.model.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head
            logits = head(hidden)[:, -1, :]
        else:
            logits = model(inputs, cache=self._cache)[:, -1, :]
        mx.eval(logits)
        self._cached_ids.extend(ids)
        return logits

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        if self._model is None or self._worker is None:
            raise BackendError("no model loaded")
        if sampling.constraint is not None:
            from backends.constraint import refuse_format

            refuse_format("MLX", "its NumPy sampling chain does not apply the grammar's mask yet")
        n_ctx = self.info.context_size
        prompt = checked_prompt(prompt_ids, n_ctx)
        stops = frozenset(stop_ids)
        max_new = min(sampling.max_tokens, n_ctx - len(prompt))
        sampler = NumpySampler(sampling)
        stats = GenerationStats()

        def report(progress: PromptProgress) -> None:
            stats.progress = progress
            if on_progress is not None:
                on_progress(progress)

        def job(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            import numpy as np

            # at least the last prompt id is fed again: its logits pick the first reply id
            keep = min(common_prefix_length(self._cached_ids, prompt), len(prompt) - 1)
            self._rewind(keep)
            keep = len(self._cached_ids)
            total = stats.prompt_evaluated = len(prompt) - keep
            logits = None
            chunk = PREFILL_CHUNK.get(self.info.device, 16)
            started = time.monotonic()
            for start in range(keep, len(prompt), chunk):
                if cancelled():
                    return
                report(PromptProgress(start - keep, total, started))
                logits = self._forward(prompt[start : start + chunk])
            report(PromptProgress(total, total, started))
            context = list(prompt)
            for count in range(1, max_new + 1):
                token = sampler.pick(np.asarray(logits[0]), context)
                if count == max_new < sampling.max_tokens and token not in stops:
                    stats.end("length")  # the context is full: the caller sees no reason of its own
                emit(token)
                context.append(token)
                if token in stops or count >= max_new or cancelled():
                    return
                logits = self._forward([token])

        return Generation(self._worker.stream(job), stats, stop_ids=stops, max_tokens=sampling.max_tokens)

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    def close(self) -> None:
        """Release the model on its own thread, wait for MLX's queued work, and join the thread."""
        worker, self._worker = self._worker, None
        if worker is None:
            return

        def release() -> None:
            self._model = None
            self._cache = None
            self._cached_ids = []
            clear_thread_streams()

        worker.close(release)
