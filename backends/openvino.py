"""OpenVINO GenAI: an ``LLMPipeline`` that reads the GGUF file directly.

Device: ``--device`` or the best of ``openvino.Core().available_devices``
(GPU > NPU > CPU).  Ids go in as a ``TokenizedInputs`` and come back one at
a time through a ``StreamerBase`` subclass, whose ``write`` is also where a
cancel or one of our stop ids ends the reply.  On CPU and GPU the pipeline
runs the paged-attention scheduler with prefix caching on, so a turn that
extends the previous conversation reuses its KV blocks; the NPU pipeline
has no such cache and re-evaluates.

Sampling: greedy without a penalty follows tokchat's meaning exactly; the
engine takes no logits processor and does not expose logits, so its own
sampler runs the rest: its repetition penalty counts the whole sequence
(prompt and reply, Hugging Face's meaning) instead of the last
``repeat_last_n`` ids, and its random generator is its own
(:data:`SAMPLING_NOTE` tells the user).

``stats.prompt_evaluated`` is an estimate here: OpenVINO does not report
cached ids, so it is the prompt minus the whole KV blocks shared with the
previous request (prompt + reply) — what the block-level prefix cache can
reuse.  The prompt is evaluated in one engine call, so there is no prompt
progress to report.  Not handled: LoRA adapters, speculative decoding, chat
history objects (tokchat renders its own prompt), a state kept between runs (the
first reply's ``stats.state`` says so once, :data:`STATE_NOTE`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

from backends.base import (
    BackendError, BackendInfo, Generation, GenerationStats, LoadOptions, ProgressListener, SamplingParams,
    checked_prompt, common_prefix_length, resolve_seed,
)
from backends.model_meta import known_meta
from backends.worker import Worker, new_worker

#: preference order of OpenVINO device families
DEVICE_ORDER = ("GPU", "NPU", "CPU")
#: shown when the model loads: where OpenVINO's sampling means something else
SAMPLING_NOTE = ("OpenVINO samples with its own engine: its repeat penalty counts the whole conversation, "
                 "not the last repeat_last_n ids (set --repeat-penalty 1 for replies that match llama.cpp)")
#: GGUF quantizations OpenVINO's GGUF reader converts with a loss, and why (measured in docs/fidelity.md):
#: Q4_1 stores each block as d * q + m with a float minimum m; the reader turns m into a whole-number
#: 4-bit zero point round(-m / d), so every weight of a block moves by up to half a step (8.9% of
#: the mean weight magnitude on SmolLM2), and 30% of greedy next-token picks differ from llama.cpp.
LOSSY_GGUF = {"Q4_1": "block minimums rounded to whole zero points"}
#: KV block size of the paged-attention cache per device family (ids per block)
BLOCK_SIZE = {"CPU": 32, "GPU": 16}
#: shown when OpenVINO's CPU default would have been bf16 (a CPU with AMX or AVX512-BF16)
F32_NOTE = ("computing in f32, not OpenVINO's bf16 default for this CPU: bf16 decoded at 0.71x the speed and "
            "answered worse (measured on a Xeon with AMX)")


def pick_device(available: Sequence[str], requested: str | None) -> str:
    """The device to load on: ``requested`` if present, else GPU > NPU > CPU."""
    families = {d.split(".")[0].upper(): d for d in reversed(list(available))}
    if requested:
        want = requested.upper()
        match = [d for d in available if d.upper() == want or d.split(".")[0].upper() == want]
        if not match:
            raise BackendError(
                f"OpenVINO device {requested} is not available here (found: {', '.join(available) or 'none'})"
            )
        return match[0]
    for family in DEVICE_ORDER:
        if family in families:
            return families[family]
    raise BackendError("OpenVINO found no device (not even CPU): check the openvino installation")


def explain_load_error(exc: BaseException, quantization: str) -> str:
    """OpenVINO's C++ check messages, reduced to the line that says what failed."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    core = next((ln for ln in reversed(lines) if not ln.startswith("Check ")), lines[-1] if lines else repr(exc))
    core = re.sub(r"\s+", " ", core)
    if "gguf_tensor_to_f16" in core or "load_gguf" in core:
        return (f"OpenVINO's GGUF reader cannot convert this {quantization} file ({core}); "
                "it reads only some GGUF tensor types: use llama.cpp for this model")
    return f"OpenVINO could not load the model: {core}"


def gguf_caveat(quantization: str) -> str:
    """The line that tells the user OpenVINO's GGUF reader changes these weights; "" when it does not."""
    if quantization not in LOSSY_GGUF:
        return ""
    return f"OpenVINO: GGUF {quantization} converted lossily; answers differ from llama.cpp"


def _streamer_class() -> type[Any]:
    """A ``StreamerBase`` subclass, built on first use so openvino_genai loads lazily."""
    import openvino_genai as og

    class IdStreamer(og.StreamerBase):  # type: ignore[misc]  # openvino_genai has no type information
        """Passes each id to ``on_id``; a True answer stops (stop id, max tokens) or cancels."""

        def __init__(self, on_id: Callable[[int], bool], cancelled: Callable[[], bool]) -> None:
            super().__init__()
            self.on_id = on_id
            self.cancelled = cancelled

        def write(self, token: int | list[int]) -> Any:  # a list of ids when the engine emits several; a status
            ids = [token] if isinstance(token, int) else list(token)
            for tid in ids:
                if self.cancelled():
                    return og.StreamingStatus.CANCEL
                if self.on_id(int(tid)):
                    return og.StreamingStatus.STOP
            return og.StreamingStatus.CANCEL if self.cancelled() else og.StreamingStatus.RUNNING

        def end(self) -> None:
            return None

    return IdStreamer


def block_telemetry() -> None:
    """Keep OpenVINO's usage telemetry from running: tokchat sends nothing over the network at run time.

    ``openvino.tools.ovc`` (imported on the way to the GGUF reader) sends a
    Google Analytics event at import, from a ``multiprocessing`` process
    forked off a thread.  Besides the traffic, that fork inherits the engine
    host's stdin lock held by its reader thread and hangs for good, holding the
    engine's answer pipe open.  OpenVINO falls back to its own no-op stub when
    ``openvino_telemetry`` cannot be imported; a ``None`` in ``sys.modules``
    makes that import fail.
    """
    import sys

    if "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]


#: the first reply's stats note where states are on (issue 45): what this engine keeps, in one line
STATE_NOTE = "none (OpenVINO keeps nothing between runs)"


class OpenVINOBackend:
    """One GGUF model in an OpenVINO GenAI ``LLMPipeline``."""

    def __init__(self, inline: bool = False) -> None:
        #: run the engine on the caller's thread (the engine process's main thread) instead of a thread of its own
        self._inline = inline
        self.info = BackendInfo(backend="openvino", device="CPU", model_name="", quantization="", context_size=0)
        #: the openvino_genai.LLMPipeline (a library without type information)
        self._pipe: Any = None
        self._worker: Worker | None = None
        self._history: list[int] = []  # ids the engine's cache last held: prompt + reply
        #: said in the first reply's stats, then "" (states off: nothing to say)
        self._state_note = ""

    def load(self, model_path: Path, options: LoadOptions) -> None:
        block_telemetry()
        try:
            import openvino as ov
            import openvino_genai as og
        except ImportError as exc:
            raise BackendError("OpenVINO backend needs openvino-genai: pip install openvino-genai") from exc
        meta = known_meta(model_path, options.model_meta)
        if meta.format != "gguf":
            raise BackendError("tokchat's OpenVINO backend loads .gguf files; use --backend mlx for MLX directories")
        core = ov.Core()
        device = pick_device(core.available_devices, options.device)
        family = device.split(".")[0]
        properties: dict[str, Any] = {}
        if family in BLOCK_SIZE:
            scheduler = og.SchedulerConfig()
            scheduler.enable_prefix_caching = True
            properties["scheduler_config"] = scheduler
        precision_note = ""
        if family == "CPU" and core.get_property("CPU", "INFERENCE_PRECISION_HINT") == ov.Type.bf16:
            # On a CPU with AMX OpenVINO's bf16 default decoded slower than f32 and answered worse; only prompt
            # evaluation was faster, and a chat feels decode (docs/engine.md, "Figures behind the code's choices")
            properties["INFERENCE_PRECISION_HINT"] = "f32"
            precision_note = F32_NOTE
        self._state_note = STATE_NOTE if options.state_dir is not None else ""
        self._worker = new_worker("openvino", self._inline)
        try:
            self._pipe = self._worker.call(lambda: og.LLMPipeline(str(model_path), device, **properties))
        except RuntimeError as exc:
            self._worker.close()
            self._worker = None
            raise BackendError(explain_load_error(exc, meta.quantization)) from exc
        self._streamer_cls = _streamer_class()
        self._block = BLOCK_SIZE.get(family, 0)
        notes = [f"OpenVINO {og.get_version()} on {device}"
                 + (", prefix caching on" if self._block else ", no prefix cache on this device"), SAMPLING_NOTE]
        if precision_note:
            notes.append(precision_note)
        caveat = gguf_caveat(meta.quantization)
        if caveat:
            notes.append(f"{caveat} ({LOSSY_GGUF[meta.quantization]}): use llama.cpp, or a Q4_0/Q8_0 file")
        self.info = BackendInfo(
            backend="openvino", device=device, model_name=meta.name, quantization=meta.quantization,
            context_size=options.n_ctx or meta.default_ctx(), caveat=caveat, notes=notes,
        )

    def _estimate_evaluated(self, prompt: list[int]) -> int:
        common = common_prefix_length(self._history, prompt)
        if not self._block:
            return len(prompt)
        reusable = min(common, len(prompt) - 1) // self._block * self._block
        return len(prompt) - reusable

    def _config(self, sampling: SamplingParams, max_new: int) -> Any:
        """An ``openvino_genai.GenerationConfig`` (untyped) for one reply."""
        import openvino_genai as og

        cfg = og.GenerationConfig()
        cfg.max_new_tokens = max_new
        # our stop ids end the reply in the streamer; the GGUF's own EOS must not end it first
        cfg.ignore_eos = True
        cfg.repetition_penalty = sampling.repeat_penalty
        if sampling.temperature > 0:
            cfg.do_sample = True
            cfg.temperature = sampling.temperature
            cfg.top_p = sampling.top_p
            cfg.top_k = sampling.top_k
            cfg.min_p = sampling.min_p
            cfg.rng_seed = resolve_seed(sampling)
        else:
            cfg.do_sample = False
        return cfg

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        """``on_progress`` is never called: OpenVINO evaluates the prompt in one call (the module docstring)."""
        if self._pipe is None or self._worker is None:
            raise BackendError("no model loaded")
        if sampling.constraint is not None:
            from backends.constraint import refuse_format

            refuse_format("OpenVINO", "its pipeline exposes no logits to mask")
        n_ctx = self.info.context_size
        prompt = checked_prompt(prompt_ids, n_ctx)
        max_new = min(sampling.max_tokens, n_ctx - len(prompt))
        stops = frozenset(stop_ids)
        cfg = self._config(sampling, max_new)
        stats = GenerationStats()
        stats.state, self._state_note = self._state_note, ""

        def job(emit: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
            import numpy as np
            import openvino as ov
            import openvino_genai as og

            if max_new <= 0:
                return
            stats.prompt_evaluated = self._estimate_evaluated(prompt)
            reply: list[int] = []

            def on_id(tid: int) -> bool:
                reply.append(tid)
                if len(reply) == max_new < sampling.max_tokens and tid not in stops:
                    stats.end("length")  # the context is full: the caller sees no reason of its own
                emit(tid)
                return tid in stops or len(reply) >= max_new

            ids = np.array([prompt], dtype=np.int64)
            inputs = og.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
            try:
                self._pipe.generate(inputs, cfg, self._streamer_cls(on_id, cancelled))
            finally:
                self._history = prompt + reply

        return Generation(self._worker.stream(job), stats, stop_ids=stops, max_tokens=sampling.max_tokens)

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    def close(self) -> None:
        """Drop the pipeline on its own thread and join the thread."""
        worker, self._worker = self._worker, None
        if worker is None:
            return

        def release() -> None:
            self._pipe = None

        worker.close(release)
