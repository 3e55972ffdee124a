"""llama.cpp through llama-cpp-python's C API: CPU, CUDA, ROCm (HIP), Vulkan and Metal builds.

Every turn passes the whole conversation's ids; the backend keeps the
longest common prefix of llama.cpp's KV cache and evaluates only the rest,
``PREFILL_CHUNK`` ids at a time, so a cancel is honoured between batches of
a long prompt and the generation's ``stats.progress`` says how far it got.  Ids are
picked by a llama.cpp sampler chain built in :mod:`backends.llama_sampler`
(tokchat's sampling meaning, the prompt in the penalty window).  The model
and context are held by :class:`backends.llama_engine.LlamaEngine` with
llama.cpp's own defaults (flash attention auto, every physical core), so a
greedy reply here is the one a default ``llama-server`` gives.

This class runs wherever it is made: :mod:`backends.engine_process` makes it in
a child process, so a native crash of llama.cpp is not a crash of the chat.

Speculative decoding (:mod:`backends.speculative`, ``LoadOptions.speculative``):
n-gram prompt lookup over the conversation's ids drafts the next ids; the
last id and the draft are evaluated in one batch with logits for every
position; the sampler chain draws the model's own id position by position
and the step keeps the agreed prefix plus the first id of the model's own,
dropping the rest from the KV cache.  The cache then holds exactly what the
plain loop leaves (the prompt and every emitted id but the last), so prompt
reuse on the next turn and ``stats.prompt_evaluated`` are unchanged;
``stats.draft`` says how many ids were drafted and kept.  One
:class:`backends.speculative.Speculator` per reply owns the sources, the
policies over them and the counts; the decode loop only verifies.

A draft model (``LoadOptions.draft_model``, :mod:`backends.draft_model`) loads
in a second context beside the main one after tokchat checked that the two
vocabularies are one; with ``auto`` prompt lookup drafts where the context
repeats itself and the draft model everywhere else, as long as the steps
that ask it emit ids faster than plain steps do (timed per reply:
:class:`backends.speculative.SpeedCheck`), and both kinds of draft are
verified by the same batch.

A constrained reply (``SamplingParams.constraint``: JSON, a JSON Schema, a
regex, a grammar) is held to it at sampling time by :mod:`backends.constraint`:
the sampler masks each position's logits first, and a draft is cut at its
first id the constraint refuses before the batch verifies it.

Not handled: multiple sequences.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Sequence

from backends import gpu_inventory
from backends.base import (
    BackendError, BackendInfo, Generation, GenerationStats, LoadOptions, ProgressListener,
    PromptProgress, SamplingParams, checked_prompt, common_prefix_length, resolve_seed,
)
from backends.cpu import available_cpus, llama_default_threads
from backends.draft_model import DraftModelConfig
from backends.engine_log import capture_llama_log
from backends.fit import default_offload
from backends.kv_types import F16, KvType, KvTypeError, parse_kv_type
from backends.llama_sampler import LlamaCppSampler
from backends.model_meta import known_meta
from backends.offload import DraftedPlan, out_of_memory_message, ran_out_of_memory, read_load_report
from backends.speculative import MODES, DrafterConfig, Speculator
from backends.state_keeper import CLOSE_WAIT_S, StateKeeper, open_keeper
from backends.worker import Worker, new_worker

if TYPE_CHECKING:
    from backends.constraint import ConstrainedReply, VocabularyCache
    from backends.llama_engine import EngineParams, LlamaEngine
    from backends.model_meta import ModelMeta
    from backends.offload import OffloadPlan

#: ids per engine call while evaluating a long new prompt: the cancel and progress granularity there
PREFILL_CHUNK = 256
#: the same with layers on a GPU, which evaluates 2,048 ids in a few tens of milliseconds
GPU_PREFILL_CHUNK = 2048

__all__ = ["LlamaCppBackend", "available_cpus", "default_threads", "PREFILL_CHUNK"]


def _log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


def _log_since(path: Path | None, start: int) -> str:
    """What the engine log gained since byte ``start`` (this load's lines); "" without a log."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def default_threads() -> int:
    """llama.cpp's own default (:func:`backends.cpu.llama_default_threads`)."""
    return llama_default_threads()


class LlamaCppBackend:
    """One GGUF model in llama.cpp; ``device`` says which offload the caller chose."""

    def __init__(self, device: str = "CPU", inline: bool = False) -> None:
        self.device = device
        #: run the engine on the caller's thread (the engine process's main thread) instead of a thread of its own
        self._inline = inline
        self.info = BackendInfo(backend="llama.cpp", device=device, model_name="", quantization="", context_size=0)
        #: the ``speculative`` setting (backends.speculative.MODES), prompt lookup's tuning and the draft model's
        self.speculative = "auto"
        self.drafter_config = DrafterConfig()
        self.draft_config = DraftModelConfig()
        #: what times a decode step for ``auto``'s draft-model check (:class:`SpeedCheck`); a test may count cost instead
        self.clock: Callable[[], float] = time.perf_counter
        self.log_path: Path | None = None
        self._engine: LlamaEngine | None = None
        self._worker: Worker | None = None
        self._model_path: Path | None = None
        self._model_identity: tuple[int, int] | None = None
        self._prefill_chunk = PREFILL_CHUNK
        #: the draft model's own llama.cpp context (``LoadOptions.draft_model``); None without one
        self._draft_engine: LlamaEngine | None = None
        #: the draft model's ``n_gpu_layers`` as the offload plan placed it (:meth:`_gpu_layers`); None: the main's
        self._draft_gpu_layers: int | None = None
        #: the KV state kept on disk between runs (``LoadOptions.state_dir``, backends.state_keeper); None: off
        self._state: StateKeeper | None = None
        #: the vocabulary as the grammar engine sees it (backends.constraint), made on the first constrained reply
        self._grammar_vocab: VocabularyCache | None = None

    def load(self, model_path: Path, options: LoadOptions) -> None:
        from backends.llama_engine import EngineParams, LlamaEngine, LlamaEngineError  # imports llama_cpp lazily

        if options.speculative not in MODES:
            raise BackendError(f"speculative must be one of {', '.join(MODES)}, not {options.speculative!r}")
        if options.speculative == "draft" and options.draft_model is None:
            raise BackendError("speculative = \"draft\" needs a draft model: --draft-model PATH.gguf (a small model "
                               "with the main model's vocabulary)")
        self.speculative = options.speculative
        meta = known_meta(model_path, options.model_meta)
        if meta.format != "gguf":
            raise BackendError(f"llama.cpp loads .gguf files; {model_path} is an MLX directory (use --backend mlx)")
        n_ctx = options.n_ctx or meta.default_ctx()
        try:
            kv_type = parse_kv_type(options.kv_type)
        except KvTypeError as exc:
            raise BackendError(str(exc)) from exc
        flash_attn, kv_note = options.flash_attn, ""
        if kv_type.needs_flash_attn:
            if flash_attn == "off":
                raise BackendError(f"--kv-type {kv_type}: a quantized V cache needs flash attention, which is "
                                   "off; use a V of f16 (K/V such as q8_0/f16) or leave flash attention on auto")
            if flash_attn == "auto":
                flash_attn = "on"
                kv_note = f"flash attention on: the {kv_type.v} V cache needs it"
        drafts = options.draft_model if options.speculative in ("draft", "auto") else None
        gpu_layers, plan = self._gpu_layers(Path(model_path), meta, n_ctx, options.n_gpu_layers, kv_type, drafts,
                                            options.gpu_free)
        threads = options.n_threads or default_threads()
        # on a GPU, llama.cpp's own logical batch (2048, as llama-server): 256-id calls left the GPU idle
        # between them, behind llama-server's prompt speed (docs/engine.md, "Figures behind the code's choices")
        n_batch = GPU_PREFILL_CHUNK if gpu_layers != 0 else 512
        self._prefill_chunk = GPU_PREFILL_CHUNK if gpu_layers != 0 else PREFILL_CHUNK
        params = EngineParams(n_ctx=n_ctx, n_threads=threads, n_gpu_layers=gpu_layers,
                              flash_attn=flash_attn, repack=options.repack, n_batch=n_batch,
                              type_k=kv_type.ggml_k, type_v=kv_type.ggml_v)
        try:
            self.log_path = capture_llama_log(options.log_path)
        except ImportError as exc:
            raise BackendError(
                "llama.cpp backend needs llama-cpp-python: pip install llama-cpp-python"
            ) from exc
        self._worker = new_worker("llama.cpp", self._inline)
        log_start = _log_size(self.log_path)
        try:
            self._engine = self._worker.call(lambda: LlamaEngine(Path(model_path), params))
        except (LlamaEngineError, ValueError, RuntimeError, OSError) as exc:
            self._worker.close()
            self._worker = None
            if gpu_layers != 0 and ran_out_of_memory(_log_since(self.log_path, log_start)):
                raise BackendError(out_of_memory_message(Path(model_path).name, plan, n_ctx, "loading the model")
                                   + f" (details in {self.log_path})") from exc
            raise BackendError(
                f"llama.cpp could not load {Path(model_path).name}: {exc} (details in {self.log_path})"
            ) from exc
        assert self._engine is not None  # a load is never cancelled
        report = read_load_report(_log_since(self.log_path, log_start))
        # "ngram" is prompt lookup only: a configured draft model is loaded for "draft" and "auto"
        draft_note = (self._load_draft(Path(model_path), options, params)
                      if options.speculative in ("draft", "auto") else "")
        self._model_path = Path(model_path)
        stat = os.stat(model_path)
        self._model_identity = (stat.st_ino, stat.st_size)
        self._state = open_keeper(options, self._model_path, params, self.device, meta.name)
        blocks = meta.kv.get(f"{meta.architecture}.block_count")
        offloaded = 0
        if gpu_layers != 0 and isinstance(blocks, int):
            # llama.cpp counts the output layer as one more offloadable layer
            offloaded = blocks + 1 if gpu_layers < 0 else min(gpu_layers, blocks + 1)
        if report.offloaded is not None:
            offloaded = report.offloaded  # llama.cpp's own account wins over the estimate
        engine_ctx = self._engine.n_ctx()
        repack = "" if options.repack else ", weight repacking off"
        kv_mib = report.total_mib("KV")
        kv_size = f", KV cache {kv_type} {kv_mib:,.0f} MiB" if kv_mib else f", KV cache {kv_type}"
        notes = [f"llama.cpp: {threads} thread(s), n_ctx {engine_ctx}, flash attention {flash_attn}{kv_size}"
                 f"{repack}, log in {self.log_path}"]
        if kv_note:
            notes.append(kv_note)
        if draft_note:
            notes.append(draft_note)
        if self.device == "CPU" and options.n_gpu_layers not in (None, 0):
            notes.append(f"--gpu-layers {options.n_gpu_layers} has nothing to offload to: llama.cpp runs on the "
                         "CPU here (`tokchat doctor` says why)")
        if self.device != "CPU":
            notes.append(f"{self.device}: {report.summary() or f'{offloaded} layers on the GPU'}"
                         + ("" if plan is None or plan.all_on_gpu else
                            f" (the rest on the CPU: {plan.need_bytes >> 20} MiB fit in {plan.free_bytes >> 20} "
                            "MiB free; --gpu-layers N overrides)"))
        self.info = BackendInfo(
            backend="llama.cpp", device=self.device, model_name=meta.name, quantization=meta.quantization,
            context_size=engine_ctx, offloaded_layers=offloaded,
            total_layers=(blocks + 1) if isinstance(blocks, int) else 0,
            vram_mib=round(report.gpu_mib("model") + report.gpu_mib("KV") + report.gpu_mib("compute")),
            notes=notes,
        )

    def _load_draft(self, main: Path, options: LoadOptions, params: EngineParams) -> str:
        """Load ``options.draft_model`` beside the main model (same context size and offload); its load note.

        Refused in one line when its vocabulary is not the main model's id for id.
        """
        path = options.draft_model
        if path is None:
            return ""  # before the imports: the tokenizer package's are 17 ms of every engine start
        from backends.draft_model import vocab_difference
        from backends.llama_engine import LlamaEngine, LlamaEngineError
        from tokenizer.errors import TokenizerError

        path = Path(path)
        try:
            differs = vocab_difference(main, path)
        except (OSError, ValueError, TokenizerError) as exc:  # TokenizerError: no GGUF, a cut one, no vocabulary
            self.close()
            raise BackendError(f"could not read the draft model {path.name}: {exc}") from exc
        if differs:
            self.close()
            raise BackendError(differs)
        start = _log_size(self.log_path)
        try:
            layers = self._draft_gpu_layers
            draft_params = params if layers is None else replace(params, n_gpu_layers=layers)
            assert self._worker is not None  # the main model loaded on it
            self._draft_engine = self._worker.call(lambda: LlamaEngine(path, draft_params))
        except (LlamaEngineError, ValueError, RuntimeError, OSError) as exc:
            self.close()
            raise BackendError(f"llama.cpp could not load the draft model {path.name}: {exc}") from exc
        report = read_load_report(_log_since(self.log_path, start))
        return (f"draft model {path.name}: drafts up to {self.draft_config.max_draft} ids a step for the main "
                f"model ({report.total_mib('model'):.0f} MiB of weights + {report.total_mib('KV'):.0f} MiB of KV "
                "cache)")

    def _gpu_layers(self, path: Path, meta: ModelMeta, n_ctx: int, asked: int | None, kv_type: KvType = F16,
                    draft: Path | None = None, known_free: list[int] | None = None) -> tuple[int, OffloadPlan | None]:
        """``n_gpu_layers`` for this load and the plan behind it (None: asked for, the CPU, or unknown); sets
        the draft model's own ``n_gpu_layers`` (:attr:`_draft_gpu_layers`), planned with it.

        On the CPU nothing is offloaded whatever was asked: llama.cpp ignores the number there, and taking it
        as given made the stats say "10/31" layers on a GPU that is not there (see :meth:`load`'s note)."""
        self._draft_gpu_layers = None
        if self.device == "CPU":
            return 0, None
        if asked is not None:
            return asked, None
        # each GPU's free memory: as the chat's process read it, else read once in this one (backends.gpu_inventory)
        free = [] if self.device != "CUDA" else (known_free if known_free is not None
                                                 else gpu_inventory.current().free_vram_per_gpu())
        plan = default_offload(path, meta, n_ctx, kv_type, free, draft) if free else None
        if plan is None:
            return -1, None  # llama.cpp's own "all layers"
        if isinstance(plan, DraftedPlan):
            self._draft_gpu_layers = plan.draft_gpu_layers
            plan = plan.main
        return plan.n_gpu_layers, plan

    def _prefill(self, prompt: list[int], cancelled: Callable[[], bool], report: ProgressListener,
                 generated: int = 0) -> bool:
        """Evaluate the prompt past the cached common prefix, in batches; False if cancelled.

        ``generated``: the prompt's last ids that the model generated (a reply
        being continued, ``SamplingParams.generated_ids``).  The main engine
        evaluates those one at a time, as the decode loop did when it picked
        them: llama.cpp's logits for a position are not the same in one batch
        as one id at a time (up to 0.7 apart on SmolLM2), so a cold continue
        (a new process, the reply not in the cache) evaluated in one batch
        could pick another id than the reply generated in one go.

        At least the last prompt id is evaluated again: its logits pick the
        first reply id.  A draft model gets the prompt here too, in the same
        progress: left to its first draft, its catch-up (the whole prompt, on
        the first turn) landed inside the reply, where it slowed the first
        drafted step by seconds and made ``auto``'s timing of the draft model
        (:class:`SpeedCheck`) judge a prompt's cost as a step's.
        """
        main = self._main()
        engines = [main]
        if self._draft_engine is not None:  # loaded only where it drafts ("draft", "auto")
            engines.append(self._draft_engine)
        todo = []
        for engine in engines:
            keep = min(common_prefix_length(engine.tokens, prompt), len(prompt) - 1)
            engine.truncate(keep)
            todo.append((engine, keep))
        total = sum(len(prompt) - keep for _, keep in todo)
        started = time.monotonic()
        chunk = self._prefill_chunk
        replay_from = len(prompt) - min(max(generated, 0), len(prompt))
        done = 0
        for engine, keep in todo:
            batched_to = max(keep, replay_from) if engine is main else len(prompt)
            parts = [prompt[start : min(start + chunk, batched_to)] for start in range(keep, batched_to, chunk)]
            parts += [[token] for token in prompt[batched_to:]]
            for part in parts:
                if cancelled():
                    return False
                report(PromptProgress(done, total, started))
                engine.decode(part)
                done += len(part)
        report(PromptProgress(total, total, started))
        return True

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        if self._engine is None or self._worker is None:
            raise BackendError("no model loaded")
        self._check_model_file()
        n_ctx = self._engine.n_ctx()
        prompt = checked_prompt(prompt_ids, n_ctx)
        stops = frozenset(stop_ids)
        seed = resolve_seed(sampling)
        stats = GenerationStats()

        def report(progress: PromptProgress) -> None:
            stats.progress = progress
            if on_progress is not None:
                on_progress(progress)

        def job(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            from backends.llama_engine import LlamaEngineError

            engine = self._main()
            engine.evaluated = 0
            if self._state is not None:  # the longest saved prefix, loaded from disk when it beats the cache
                stats.state = self._state.restore(engine, prompt)
            try:
                # a greedy continuation replays the reply's own ids as they were generated; a sampled one
                # cannot be the one-go reply anyway (its generator starts afresh), so it takes them in batches
                prefilled = self._prefill(prompt, cancelled, report, sampling.generated_ids if sampling.greedy else 0)
            except LlamaEngineError as exc:
                raise BackendError(str(exc)) from exc
            stats.prompt_evaluated = engine.evaluated
            if not prefilled:
                return
            constraint = self._constrained(sampling, stops)
            sampler = LlamaCppSampler(sampling, seed, engine.n_vocab, n_ctx, prompt, constraint)
            speculator = self._speculator(prompt)
            stats.draft = speculator.counts()
            try:
                self._decode_loop(prompt, sampling.max_tokens, stops, sampler, speculator, stats, emit, cancelled)
            except LlamaEngineError as exc:
                raise BackendError(str(exc)) from exc
            finally:
                sampler.close()

        def job_then_keep(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            try:
                job(emit, cancelled)
            finally:
                if self._state is not None and self._engine is not None:
                    self._state.keep(self._engine)  # a copy here; the disk is the writer thread's

        return Generation(self._worker.stream(job_then_keep), stats, stop_ids=stops,
                          max_tokens=sampling.max_tokens)

    def _constrained(self, sampling: SamplingParams, stops: frozenset[int]) -> ConstrainedReply | None:
        """The reply's :class:`backends.constraint.ConstrainedReply` (None: free text), compiled against this
        model's vocabulary as tokchat's tokenizer reads it (built on the first constrained reply, then kept)."""
        if sampling.constraint is None:
            return None
        from backends.constraint import ConstraintError, VocabularyCache

        if self._grammar_vocab is None:
            from tokenizer import load_tokenizer

            path = self._model_path
            assert path is not None  # set by load
            self._grammar_vocab = VocabularyCache(lambda: load_tokenizer(path), self._main().n_vocab)
        try:
            return self._grammar_vocab.get(stops).start(sampling.constraint)
        except ConstraintError as exc:
            raise BackendError(str(exc)) from exc

    def _decode_loop(self, prompt: list[int], max_tokens: int, stops: frozenset[int], sampler: LlamaCppSampler,
                     speculator: Speculator, stats: GenerationStats, emit: Callable[[int], None],
                     cancelled: Callable[[], bool]) -> None:
        """Emit the reply's ids, one per step or a drafted run per step; see the module docstring.

        ``token`` is always the latest emitted id, not yet in the cache; a
        step evaluates it (plus a draft when there is one) and samples what
        follows.  The reply ends after an id that is a stop id, the
        ``max_tokens``-th, one emitted after a cancel, or one that leaves the
        context full; the cache then holds the prompt and every emitted id
        but the last, as the plain loop leaves it.
        """
        engine = self._main()
        n_ctx = engine.n_ctx()
        # drafted ids the constraint refuses are cut before the batch verifies them
        cut = sampler.constraint.cut_draft if sampler.constraint is not None else None
        emitted = 1
        token = sampler.sample(engine.ctx)
        self._publish_mask(stats, sampler)
        emit(token)
        while not (token in stops or emitted >= max_tokens or cancelled() or len(engine.tokens) >= n_ctx):
            base = len(engine.tokens)
            # room for the draft: the context's free positions after ``token``, ids the reply may still emit
            room = min(n_ctx - base - 1, max_tokens - emitted - 1)
            draft = speculator.draft(token, room, cut)
            if not draft:
                engine.decode((token,))
                token = sampler.sample(engine.ctx)
                self._publish_mask(stats, sampler)
                emitted += 1
                emit(token)
                speculator.plain_step()
                continue
            engine.decode([token, *draft], logits="all")
            batch: list[int] = []
            for i in range(len(draft) + 1):
                token = sampler.sample(engine.ctx, i)
                self._publish_mask(stats, sampler)
                emitted += 1
                batch.append(token)
                stats.draft = speculator.counts(batch)  # current before the id goes out: a reader stops at a stop id
                emit(token)
                agreed = i < len(draft) and token == draft[i]
                if (not agreed or token in stops or emitted >= max_tokens or cancelled()
                        or base + i + 1 >= n_ctx):
                    break
            # the cache keeps the batch up to the id before the last emitted one, as the plain loop would
            engine.truncate(base + len(batch))
            speculator.verified(batch)
        if not (token in stops or emitted >= max_tokens) and len(engine.tokens) >= n_ctx:
            stats.end("length")  # the context is full: the caller sees no reason of its own

    def _main(self) -> LlamaEngine:
        """The main model's engine: loaded (a reply runs only after :meth:`load`)."""
        assert self._engine is not None, "no model loaded"
        return self._engine

    def _speculator(self, prompt: list[int]) -> Speculator:
        """This reply's :class:`Speculator`: prompt lookup, the draft model where one is loaded (``draft``,
        ``auto``), or nothing (``off``)."""
        model = None
        if self._draft_engine is not None and self.speculative != "off":
            from backends.draft_model import ModelDrafter

            model = ModelDrafter(self._draft_engine, prompt, self.draft_config)
        return Speculator(self.speculative, prompt, config=self.drafter_config, model=model, clock=self.clock)

    @staticmethod
    def _publish_mask(stats: GenerationStats, sampler: LlamaCppSampler) -> None:
        """Make ``stats.mask_ms`` current before an id is emitted (a reader stops at the stop id)."""
        if sampler.constraint is not None:
            stats.mask_ms = sampler.constraint.timer.seconds * 1000.0

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

    def flush_state(self, timeout: float) -> None:
        """Wait for a state write under way, at most ``timeout`` seconds (the engine process, before it ends)."""
        if self._state is not None:
            self._state.flush(timeout)

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    def close(self) -> None:
        """Free the model on its own thread and join the thread."""
        self.flush_state(CLOSE_WAIT_S)
        worker, engine, draft = self._worker, self._engine, self._draft_engine
        self._worker, self._engine, self._draft_engine = None, None, None
        if worker is not None:
            def free() -> None:
                for held in (draft, engine):
                    if held is not None:
                        held.close()

            worker.close(free)
