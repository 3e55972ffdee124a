"""MLX through mlx-lm: an MLX model directory or a Q4_0/Q4_1/Q8_0 GGUF file.

One prompt cache (:class:`backends.mlx_cache.MLXPromptCache`) lives as long as
the model.  Each turn compares the new prompt with the ids the cache holds,
trims the cache back to the common prefix (a regenerate or an edit shortens
it) and feeds only the rest, in chunks so a cancel is honoured during a long
prompt too and the generation's ``stats.progress`` says how far it got.  On
Apple Silicon MLX runs on the GPU (Metal); elsewhere ``mlx[cpu]`` runs on the CPU.

Instant resume: with ``LoadOptions.state_dir`` set (the default; ``--no-state``
unsets it), the cache is kept on disk after each reply as mlx-lm's prompt-cache
file, and before a prompt the longest saved prefix of its ids is loaded when it
beats the cache in memory (:mod:`backends.state_keeper`, the llama.cpp engine's
keeper; ``stats.state`` says what happened).

Sampling is tokchat's chain (:mod:`backends.sampling`, the meaning set out
on :class:`backends.base.SamplingParams`) on the logits MLX computes, not
mlx-lm's sampler: its top-p does not renormalize after top-k and its
penalty window is its own, so the same settings would mean something else.
A reply format (``SamplingParams.constraint``) masks those logits before the
chain reads them (:mod:`backends.constraint`), as the llama.cpp chain does.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Sequence, cast

from backends.base import (
    BackendError, BackendInfo, Generation, GenerationStats, LoadOptions, ProgressListener, PromptProgress,
    SamplingParams, checked_prompt, common_prefix_length,
)
from backends.model_meta import known_meta
from backends.sampling import NumpySampler
from backends.state_keeper import CLOSE_WAIT_S, StateKeeper
from backends.worker import Worker, new_worker, run_at_exit

if TYPE_CHECKING:
    from backends.constraint import ConstrainedReply, VocabularyCache
    from backends.mlx_cache import MLXPromptCache

#: ids fed to the model per forward pass while evaluating a prompt: the cancel granularity.
#: On the CPU, MLX's prompt cost grows linearly with the chunk (no batching gain measured),
#: so small chunks cost nothing and keep a cancel within a few seconds.
PREFILL_CHUNK = {"Metal": 128, "CPU": 16}


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
        #: the mlx-lm model (an ``nn.Module`` of mlx-lm's llama or qwen2, or what ``load_model`` builds)
        self._model: Any = None
        self._model_path: Path | None = None
        #: the model's prompt cache and the ids it holds (made on the engine's thread at load)
        self._cache: MLXPromptCache | None = None
        self._worker: Worker | None = None
        #: the cache kept on disk between runs (``LoadOptions.state_dir``, backends.state_keeper); None: off
        self._state: StateKeeper | None = None
        #: the vocabulary as the grammar engine sees it (backends.constraint), made on the first constrained reply
        self._grammar_vocab: VocabularyCache | None = None

    def load(self, model_path: Path, options: LoadOptions) -> None:
        try:
            import mlx.core as mx
            import mlx_lm  # noqa: F401  (the model classes live there)
        except ImportError as exc:
            raise BackendError('MLX backend needs mlx-lm: pip install mlx-lm (on Linux also "mlx[cpu]")') from exc
        meta = known_meta(model_path, options.model_meta)
        run_at_exit(clear_thread_streams)  # the main thread touches MLX too (device query, cache set-up)
        self._worker = new_worker("mlx", self._inline)

        def build() -> tuple[Any, MLXPromptCache]:
            from backends.mlx_cache import MLXPromptCache

            if meta.format == "mlx":
                from mlx_lm.utils import load_model

                model = load_model(Path(model_path))[0]
            else:
                from backends.mlx_gguf import load_gguf_model

                model = load_gguf_model(meta)
            return model, MLXPromptCache(model)

        try:
            self._model, self._cache = cast("tuple[Any, MLXPromptCache]", self._worker.call(build))
        except BackendError:
            self._worker.close(clear_thread_streams)
            self._worker = None
            raise
        except (ValueError, RuntimeError, OSError) as exc:
            self._worker.close(clear_thread_streams)
            self._worker = None
            raise BackendError(f"MLX could not load {Path(model_path).name}: {exc}") from exc
        self._model_path = Path(model_path)
        device = "Metal" if mx.metal.is_available() else "CPU"
        self.info = BackendInfo(
            backend="mlx", device=device, model_name=meta.name, quantization=meta.quantization,
            context_size=options.n_ctx or meta.default_ctx(),
            notes=[f"MLX {getattr(mx, '__version__', '?')} on {device}" + (f", GGUF {meta.quantization} kept quantized"
                                                         if meta.format == "gguf" else "")],
        )
        from backends.mlx_cache import open_mlx_keeper

        self._state = open_mlx_keeper(options, self._model_path, device, meta.name)

    def _constrained(self, sampling: SamplingParams, stops: frozenset[int]) -> ConstrainedReply | None:
        """The reply's :class:`backends.constraint.ConstrainedReply` (None: free text), compiled against this
        model's vocabulary as tokchat's tokenizer reads it (built on the first constrained reply, then kept).
        The vocabulary is as wide as the logits MLX computes (the embedding's rows)."""
        if sampling.constraint is None:
            return None
        from backends.constraint import ConstraintError, VocabularyCache

        if self._grammar_vocab is None:
            from tokenizer import load_tokenizer

            path = self._model_path
            assert path is not None  # loaded
            width = getattr(getattr(self._model, "args", None), "vocab_size", None)
            self._grammar_vocab = VocabularyCache(lambda: load_tokenizer(path), width)
        try:
            return self._grammar_vocab.get(stops).start(sampling.constraint)
        except ConstraintError as exc:
            raise BackendError(str(exc)) from exc

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        if self._model is None or self._worker is None:
            raise BackendError("no model loaded")
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

            cache = self._cache
            assert cache is not None  # loaded; close() waits for this job
            constraint = self._constrained(sampling, stops)
            if constraint is not None:  # a think block left free, the ids a continued reply holds taken first
                constraint.follow(prompt, sampling.generated_ids)
            if self._state is not None:  # the longest saved prefix, loaded from disk when it beats the cache
                stats.state = self._state.restore(cache, prompt)
            # at least the last prompt id is fed again: its logits pick the first reply id
            cache.truncate(min(common_prefix_length(cache.tokens, prompt), len(prompt) - 1))
            keep = len(cache.tokens)
            total = stats.prompt_evaluated = len(prompt) - keep
            logits: Any = None
            chunk = PREFILL_CHUNK.get(self.info.device, 16)
            started = time.monotonic()
            for start in range(keep, len(prompt), chunk):
                if cancelled():
                    return
                report(PromptProgress(start - keep, total, started))
                logits = cache.forward(prompt[start : start + chunk])
            report(PromptProgress(total, total, started))
            context = list(prompt)
            for count in range(1, max_new + 1):
                # a copy the mask may write into: the refused ids' logits become -inf before the chain reads them
                row = np.array(logits[0], dtype=np.float32)
                if constraint is not None:
                    constraint.mask_logits(row)
                token = sampler.pick(row, context)
                if constraint is not None:
                    constraint.advance(token)
                    # made current before the id is emitted: a reader stops at the stop id
                    stats.mask_ms = constraint.timer.seconds * 1000.0
                if count == max_new < sampling.max_tokens and token not in stops:
                    stats.end("length")  # the context is full: the caller sees no reason of its own
                emit(token)
                context.append(token)
                if token in stops or count >= max_new or cancelled():
                    return
                logits = cache.forward([token])

        def job_then_keep(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            job(emit, cancelled)
            # a reply (or a cancel) left the cache whole: a copy here (mlx-lm's file, in memory), the disk is
            # the writer thread's.  A failure is not kept: the cache may hold positions its ids do not say
            if self._state is not None:
                self._state.keep(self._cache)

        return Generation(self._worker.stream(job_then_keep), stats, stop_ids=stops, max_tokens=sampling.max_tokens)

    def flush_state(self, timeout: float) -> None:
        """Wait for a state write under way, at most ``timeout`` seconds (the engine process, before it ends)."""
        if self._state is not None:
            self._state.flush(timeout)

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    def close(self) -> None:
        """Release the model on its own thread, wait for MLX's queued work, and join the thread."""
        self.flush_state(CLOSE_WAIT_S)
        worker, self._worker = self._worker, None
        if worker is None:
            return

        def release() -> None:
            self._model = None
            self._cache = None
            clear_thread_streams()

        worker.close(release)
