"""A deterministic backend that replays fixed token ids.

Used where pixels or timings must be stable (TUI snapshots, the UI
throughput benchmark) and to inject faults (an exception mid-stream).  The
real-model tests use the real engines; this never stands in for them there.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Collection, Generator, Sequence

from backends.base import (
    BackendError, BackendInfo, Generation, GenerationStats, LoadOptions, ProgressListener, SamplingParams,
    common_prefix_length,
)

#: reply ids for a prompt: a fixed list, or a function of the prompt ids
Script = Sequence[int] | Callable[[Sequence[int]], Sequence[int]]


class ScriptedBackend:
    """Yields a scripted reply, optionally with a delay per token or a fault after N tokens."""

    def __init__(
        self,
        script: Script,
        *,
        delay_s: float = 0.0,
        fail_after: int | None = None,
        context_size: int = 8192,
    ) -> None:
        self.script = script
        self.delay_s = delay_s
        self.fail_after = fail_after
        self.info = BackendInfo(
            backend="scripted", device="CPU", model_name="scripted", quantization="none",
            context_size=context_size,
        )
        self._cancel = threading.Event()
        self._cached: list[int] = []

    def load(self, model_path: Path, options: LoadOptions) -> None:
        if options.n_ctx:
            self.info.context_size = options.n_ctx

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        """The script's reply; it reports no prompt progress (``on_progress`` is never called)."""
        self._cancel.clear()
        stats = GenerationStats(prompt_evaluated=len(prompt_ids) - common_prefix_length(self._cached, prompt_ids))
        return Generation(self._replay(list(prompt_ids), sampling, stop_ids, stats), stats,
                          stop_ids=stop_ids, max_tokens=sampling.max_tokens)

    def _replay(self, prompt_ids: list[int], sampling: SamplingParams, stop_ids: Collection[int],
                stats: GenerationStats) -> Generator[int, None, None]:
        reply = list(self.script(prompt_ids) if callable(self.script) else self.script)
        self._cached = list(prompt_ids)
        for n, token in enumerate(reply[: sampling.max_tokens]):
            if self._cancel.is_set():
                return
            if n == len(reply) - 1:
                stats.end("stop")  # the script's end is the reply's end, as a model's end of text
            if self.fail_after is not None and n >= self.fail_after:
                raise BackendError("scripted fault: the engine stopped mid-reply")
            if self.delay_s:
                time.sleep(self.delay_s)
            self._cached.append(token)
            yield token
            if token in stop_ids:
                return

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self._cached = []
