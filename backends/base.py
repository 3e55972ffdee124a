"""The backend contract: token ids in, token ids out.

A backend never sees text.  It loads a model file, takes the prompt as ids
and yields generated ids one at a time.  Heavy engines (llama.cpp, OpenVINO,
MLX) are imported inside ``load`` so that tokchat starts, and its tests run,
where an engine is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterator, Protocol, Sequence, runtime_checkable


class BackendError(RuntimeError):
    """A backend could not load or generate; the message says what to do."""


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

    Backends that evaluate a long prompt in chunks keep the latest one in an
    optional ``prompt_progress`` attribute (read with ``getattr``: the
    Protocol does not require it); the TUI shows it while it waits.
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

    A backend that speculates keeps the latest reply's counts in an optional
    ``last_draft_counts`` attribute (read with ``getattr``, like
    ``prompt_progress``; None when it did not speculate).  Every id it emits
    is counted in the reply as usual: ``accepted`` ids are a subset of them.
    """

    drafted: int
    accepted: int

    @property
    def rate(self) -> float:
        """The share of drafted ids the model kept (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


@runtime_checkable
class Backend(Protocol):
    """One loaded model.  ``generate`` runs the engine on one dedicated worker thread.

    ``generate`` yields every generated id, including the stop id that ended
    the reply (so the caller knows why it ended), and stops after
    ``sampling.max_tokens`` ids or soon after :meth:`cancel`.  Passing the
    whole conversation's ids every turn is expected: a backend reuses its
    cache for the longest common prefix, and ``last_prompt_evaluated``
    reports how many prompt ids it actually had to evaluate.
    """

    info: BackendInfo
    last_prompt_evaluated: int

    def load(self, model_path: Path, options: LoadOptions) -> None: ...

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int]
    ) -> Iterator[int]: ...

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
