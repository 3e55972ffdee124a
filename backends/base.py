"""The backend contract: token ids in, token ids out.

A backend never sees text.  It loads a model file, takes the prompt as ids
and returns a :class:`Generation`: the generated ids one at a time, and the
engine's facts about that reply beside them.  Heavy engines (llama.cpp, OpenVINO,
MLX) are imported inside ``load`` so that tokchat starts, and its tests run,
where an engine is missing.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Generator, Protocol, Sequence, runtime_checkable

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (the engine child starts on it too): str and Enum, printed and formatted as the word
    from enum import Enum

    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


class BackendError(RuntimeError):
    """A backend could not load or generate; the message says what to do."""


@dataclass(frozen=True)
class OutputConstraint:
    """What a reply must match, as the user gave it: checked by :func:`backends.constraint.parse_constraint`.

    ``kind``: "json" (any JSON value), "json_schema" (``source`` is the schema as JSON text), "regex"
    (``source`` the pattern) or "grammar" (``source`` a Lark or GBNF grammar).
    """

    kind: str
    source: str = ""


@dataclass
class SamplingParams:
    """How the next token is picked: one meaning on every backend.

    The chain, applied to the raw logits of the next position, in this order
    (llama.cpp's order, the one ``llama-server``/``llama-cli`` and Ollama's
    llama.cpp runner use; llama.cpp / Ollama names in brackets):

    1. **repetition penalty** (``--repeat-penalty`` / ``repeat_penalty``): every
       distinct id among the last ``repeat_last_n`` ids of the whole context,
       prompt and reply so far (``--repeat-last-n`` / ``repeat_last_n``, 64), has
       its logit divided by ``repeat_penalty`` if positive, multiplied if not.
       1.0 is off.  Counting the prompt too is what llama-server does; a
       penalty over the reply alone (llama-cpp-python's ``generate``) or over
       the whole sequence (Hugging Face, OpenVINO) is a different setting.
    2. ``temperature <= 0``: greedy, the id with the highest logit (the lowest
       id on a tie); steps 3 to 7 are skipped.
    3. **top-k** (``--top-k`` / ``top_k``): keep the ``top_k`` highest logits; 0 = all.
    4. **top-p** (``--top-p`` / ``top_p``): softmax over what is left, keep the
       most likely ids until their probabilities add up to ``top_p``; 1.0 = off.
    5. **min-p** (``--min-p`` / ``min_p``): drop ids whose probability is below
       ``min_p`` times the most likely one's; 0 = off.
    6. **temperature** (``--temp`` / ``temperature``): divide the logits left by it.
    7. draw one id from their softmax with the backend's random generator,
       seeded by ``seed``.

    ``seed``: the same seed, settings, prompt, model and backend on the same
    machine give the same reply.  The random generators differ between
    backends (llama.cpp's mt19937, NumPy's PCG64 for MLX, OpenVINO's own), so
    a seed is not comparable across backends; greedy replies are.  ``None``
    draws a fresh seed every reply.  Seeds are taken modulo 2**32.

    Every field keeps its name and meaning; new fields get defaults, so older
    callers (and other backends) keep working.
    """

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    seed: int | None = None
    max_tokens: int = 1024
    #: how many of the latest context ids (prompt and reply) the repetition penalty looks at;
    #: 0 = none (penalty off), -1 = the whole context
    repeat_last_n: int = 64
    #: the shape the reply must have (JSON, a JSON Schema, a regex, a grammar), enforced at sampling time by
    #: the engine (backends.constraint); None = free text.  Data, not a compiled object: it crosses the
    #: engine pipe as its fields and is compiled there against the model's own vocabulary
    constraint: OutputConstraint | None = None
    #: how many of the prompt's last ids the model generated itself (a reply being continued), not a setting:
    #: a local engine that evaluates them again does so one at a time, as when they were generated, because
    #: llama.cpp's logits for a position differ between one batch and one id at a time (by up to 0.7 on
    #: SmolLM2), enough to flip a greedy pick; so a continuation is the one-go reply id for id
    generated_ids: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.constraint, dict):  # as it arrives over the engine pipe (dataclasses.asdict)
            self.constraint = OutputConstraint(**self.constraint)

    @property
    def greedy(self) -> bool:
        """Temperature 0 (or below): always the most likely id."""
        return self.temperature <= 0


#: seeds are 32-bit in every engine
SEED_MODULUS = 2**32


def resolve_seed(sampling: SamplingParams) -> int:
    """The seed one reply uses: ``sampling.seed`` modulo 2**32, or a fresh random one."""
    import random

    if sampling.seed is None:
        return random.getrandbits(31)
    return sampling.seed % SEED_MODULUS


def penalty_window(context: Sequence[int], sampling: SamplingParams) -> Sequence[int]:
    """The ids the repetition penalty considers: the last ``repeat_last_n`` of prompt + reply."""
    n = sampling.repeat_last_n
    if n == 0 or sampling.repeat_penalty == 1.0:
        return ()
    return context if n < 0 else context[-n:]


@dataclass
class LoadOptions:
    """What the user asked for when loading; ``None`` means "decide for me"."""

    backend: str = "auto"  # auto|cpu|cuda|rocm|vulkan|metal|openvino|mlx
    device: str | None = None  # OpenVINO device: CPU|GPU|NPU
    n_ctx: int | None = None  # default: training context capped at 8192
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    #: each GPU's free bytes as the chat's process read them (backends.gpu_inventory), so the engine's process
    #: plans its offload without asking nvidia-smi again; None: the engine reads them itself
    gpu_free: list[int] | None = None
    log_path: Path | None = None  # engine logs go here, never to the terminal
    #: llama.cpp's flash attention: "auto" (llama.cpp's and llama-server's default), "on" or "off"
    flash_attn: str = "auto"
    #: llama.cpp's weight repacking (extra buffer types such as AMX); False = ``--no-repack``
    repack: bool = True
    #: the model's header when the caller already read it (a backends.model_meta.ModelMeta): read once
    model_meta: Any = field(default=None, repr=False, compare=False)
    #: speculative decoding (backends.speculative): "auto" (n-gram prompt lookup that turns itself off in a
    #: reply where drafts keep failing), "off", "ngram" (always draft) or "draft" (a draft model, ``draft_model``)
    speculative: str = "auto"
    #: the small model that drafts for ``speculative = "draft"``; it must share the main model's vocabulary
    draft_model: Path | None = None
    #: the KV cache's element types (backends.kv_types): "f16" (llama.cpp's default), "q8_0", "q4_0", or
    #: "K/V" such as "q8_0/f16"; a quantized V switches flash attention on where it was "auto"
    kv_type: str = "f16"
    #: where the local engine keeps its KV state between runs (backends.state_cache); None = kept nowhere
    state_dir: Path | None = None
    #: the most those states may take on disk, least recently used first out
    state_max_bytes: int = 4 << 30


@dataclass
class BackendInfo:
    """What the header shows and ``--stats`` reports."""

    backend: str  # llama.cpp | openvino | mlx | scripted
    device: str  # CPU | CUDA | ROCm | Vulkan | Metal | GPU | NPU
    model_name: str
    quantization: str
    context_size: int
    offloaded_layers: int = 0
    #: layers llama.cpp can offload (blocks + the output layer); 0 where it does not apply
    total_layers: int = 0
    #: GPU memory the model, KV cache and compute buffers take (llama.cpp's log), MiB; 0 on the CPU
    vram_mib: int = 0
    notes: list[str] = field(default_factory=list)
    #: a short caveat the model bar keeps showing (e.g. a lossy weight conversion); "" = none
    caveat: str = ""


@dataclass(frozen=True)
class PromptProgress:
    """How far an engine got evaluating a prompt: ``done`` of ``total`` new ids since ``started``.

    An engine that evaluates a long prompt in chunks puts the latest one in
    its generation's :attr:`GenerationStats.progress` (the TUI polls it while
    it waits) and hands it to ``generate``'s ``on_progress`` (the engine
    process forwards it down its pipe).
    """

    done: int
    total: int
    started: float  # time.monotonic() when the evaluation began

    def rate(self, now: float) -> float:
        """Ids evaluated per second so far (0 before the first chunk is done)."""
        elapsed = now - self.started
        return self.done / elapsed if self.done and elapsed > 0 else 0.0

    def seconds_left(self, now: float) -> float | None:
        """The estimated time to the end of the prompt, None until there is a rate."""
        rate = self.rate(now)
        return (self.total - self.done) / rate if rate > 0 else None


@dataclass(frozen=True)
class DraftCounts:
    """Speculative decoding's work in one reply: ids proposed by the drafter, and how many the model kept.

    A backend that speculates keeps them current in its generation's
    :attr:`GenerationStats.draft` (None when it did not speculate).  Every id
    it emits is counted in the reply as usual: ``accepted`` ids are a subset
    of them.
    """

    drafted: int
    accepted: int

    @property
    def rate(self) -> float:
        """The share of drafted ids the model kept (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


class FinishReason(StrEnum):
    """Why a reply ended: a closed set, decided once by whoever knows it (llama.cpp's server sets a
    result's ``stop_type`` once, in the slot).  The engine sets it on its :class:`GenerationStats`
    (:meth:`GenerationStats.end`); the layers above read it and never work it out again.  A ``str``, so
    it is stored, printed and compared as the word it always was."""

    STOP = "stop"  # a stop id, the engine's end of reply, or a server's "stop"
    LENGTH = "length"  # ``max_tokens`` or a full context (a server's own cap too)
    CANCELLED = "cancelled"  # the caller stopped the reply (Esc, Ctrl-C, a closed generation)
    ERROR = "error"  # the engine failed, or a server aborted the reply (SGLang's and vLLM's "abort")
    #: the history's, never an engine's: the process died while the reply was written (a kill)
    INTERRUPTED = "interrupted"


#: ``generate``'s optional listener: called with every new PromptProgress, on the engine's thread
ProgressListener = Callable[[PromptProgress], None]


@dataclass
class GenerationStats:
    """What the engine says about one generation, filled in as it goes.

    One object per :meth:`Backend.generate` call, made before its first id,
    so a reader (the session's accounting, the TUI's progress line, the
    engine process's pipe) reads this reply's facts and never the last
    one's.  The engine writes it on its own thread, each field replaced
    whole (its :class:`Generation` adds the finish reason the ids show); a
    new per-reply fact is a field here, set by the engine that knows it and
    read by the one place that shows it.
    """

    #: prompt ids the engine evaluated for this reply (the rest came from its cache)
    prompt_evaluated: int = 0
    #: how far the prompt evaluation got; None before the engine's first report (or from one that sends none)
    progress: PromptProgress | None = None
    #: drafted and kept ids so far, made current before each id is emitted; None when it does not speculate
    draft: DraftCounts | None = None
    #: False when the ids received differ from the engine's own count (a server's): the turn is "unverified"
    verified: bool = True
    #: why ``verified`` is False, or how it was kept True (ids the stream held back, fetched again); "" = nothing
    note: str = ""
    #: the engine's own count of the ids it generated, where it keeps one apart from the ids (a server's)
    counted: int | None = None
    #: the engine's own measured generation speed in ids/s, where it measures one (a server's timings)
    tokens_per_s: float | None = None
    #: one line for the user about this reply (an engine found dead and started again for it); "" = none
    notice: str = ""
    #: what the engine's state cache did for this prompt (backends.state_keeper): "loaded N ids from disk in T s",
    #: "none (why)"; "" = nothing to say (no cache, or the engine's own cache served the prompt)
    state: str = ""
    #: why the reply ended (:class:`FinishReason`), set once by :meth:`end`; None while the ids still come
    finish_reason: FinishReason | None = None
    #: milliseconds the reply's constraint (SamplingParams.constraint) took to mask the logits, made current
    #: before each id is emitted; 0 without one
    mask_ms: float = 0.0

    def end(self, reason: FinishReason | str) -> None:
        """Say why the reply ended; the first reason given stands (a later close or error does not
        overwrite the engine's own)."""
        if self.finish_reason is None:
            self.finish_reason = FinishReason(reason)


@runtime_checkable
class PushedIds(Protocol):
    """Ids an engine pushes while it runs on the caller's thread (:class:`backends.worker.InlineIds`)."""

    def run(self, emit: Callable[[int], None]) -> None: ...

    def close(self) -> None: ...


class Generation:
    """One reply: its ids as they come (``for tid in generation``) and the :class:`GenerationStats` beside them.

    Made by the backend before the first id, around its own generator of ids.
    The finish reason the ids themselves show is filled in here, the same way
    for every engine: a stop id is "stop", the ``max_tokens``-th id is
    "length", an error is "error", ids that end (or are closed) before the
    engine said why are "cancelled".  An engine that ends a reply for a
    reason of its own (a full context, a server's end) calls ``stats.end``
    before its last id is taken.
    """

    def __init__(self, ids: Generator[int, None, None] | PushedIds, stats: GenerationStats | None = None, *,
                 stop_ids: Collection[int] = (), max_tokens: int | None = None) -> None:
        self.stats = stats if stats is not None else GenerationStats()
        self._ids = ids
        self._stops = stop_ids
        self._left = max_tokens
        self._count = 0

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> int:
        stats = self.stats
        if isinstance(self._ids, PushedIds):
            raise TypeError("an engine run on its caller's thread pushes its ids: use Generation.drive")
        try:
            token = next(self._ids)
        except StopIteration:
            stats.end(FinishReason.CANCELLED)
            raise
        except BackendError:
            stats.end(FinishReason.ERROR)
            raise
        return self._counted(token)

    def drive(self, sink: Callable[[int], None]) -> None:
        """Hand every id to ``sink`` as the engine makes it, with the same finish reason as iterating.

        The engine process's request loop reads replies this way: an engine that runs on the caller's
        own thread (:class:`backends.worker.InlineIds`) can only push its ids; any other is iterated."""
        if not isinstance(self._ids, PushedIds):
            for token in self:
                sink(token)
            return
        try:
            self._ids.run(lambda token: sink(self._counted(token)))
        except BackendError:
            self.stats.end(FinishReason.ERROR)
            raise
        self.stats.end(FinishReason.CANCELLED)

    def _counted(self, token: int) -> int:
        """Count ``token``; a stop id or the ``max_tokens``-th id says why the reply ends."""
        stats = self.stats
        self._count += 1
        if token in self._stops:
            stats.end(FinishReason.STOP)
        elif self._left is not None and self._count >= self._left:
            stats.end(FinishReason.LENGTH)
        return token

    def close(self) -> None:
        """Stop the engine (a caller that stops reading early); a reply not yet finished is "cancelled"."""
        self._ids.close()
        self.stats.end(FinishReason.CANCELLED)


@runtime_checkable
class Backend(Protocol):
    """One loaded model.  ``generate`` runs the engine on one dedicated worker thread.

    ``generate`` returns a :class:`Generation`: it yields every generated id,
    including the stop id that ended the reply (so the caller knows why it
    ended), and stops after ``sampling.max_tokens`` ids or soon after
    :meth:`cancel`; its ``stats`` are the engine's facts about this reply.
    Passing the whole conversation's ids every turn is expected: a backend
    reuses its cache for the longest common prefix, and
    ``stats.prompt_evaluated`` says how many prompt ids it actually had to
    evaluate.  ``on_progress`` is called with every new
    ``stats.progress`` (engines that report none never call it).
    """

    info: BackendInfo

    def load(self, model_path: Path, options: LoadOptions) -> None: ...

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


def common_prefix_length(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many leading ids ``prompt`` shares with what an engine's cache holds."""
    n = 0
    for a, b in zip(cached, prompt):
        if a != b:
            break
        n += 1
    return n


def checked_prompt(prompt_ids: Sequence[int], n_ctx: int) -> list[int]:
    """The prompt as plain ints, or a BackendError if it is empty or cannot fit ``n_ctx``."""
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise BackendError("empty prompt: there is nothing to continue")
    if len(prompt) >= n_ctx:
        raise BackendError(f"the prompt has {len(prompt)} tokens but the context holds {n_ctx}")
    return prompt
