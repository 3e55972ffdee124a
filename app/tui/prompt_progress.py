"""The reply's waiting line while a long prompt is evaluated: exact ids done / total, ids/s, time left.

A 25 kB attachment is thousands of prompt ids; on a CPU their evaluation can
take a minute before the first reply id.  The engine reports how far it got
in the running generation's stats (``GenerationStats.progress``, a
:class:`backends.base.PromptProgress`, updated per chunk); this watcher owns a
timer that reads it a few times a second and writes one line into the
reply's stats row until the first reply text arrives or the turn ends.  Esc
still stops the reply at once.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from backends.base import GenerationStats, PromptProgress

#: how often the line is refreshed, in seconds
REFRESH_S = 0.25
#: prompts shorter than this never show the line (they are evaluated in well under a second)
MIN_IDS = 256


def progress_line(progress: PromptProgress, now: float) -> str:
    """``prompt 1,024 / 5,680 ids · 217 ids/s · 21 s left · esc stops``."""
    parts = [f"prompt {progress.done:,} / {progress.total:,} ids"]
    rate = progress.rate(now)
    if rate > 0:
        parts.append(f"{rate:,.0f} ids/s")
    left = progress.seconds_left(now)
    if left is not None:
        parts.append(f"{left:,.0f} s left")
    parts.append("esc stops")
    return " · ".join(parts)


class PromptProgressWatch:
    """Shows the running generation's prompt progress in ``reply`` until ``waiting()`` says the wait is over.

    ``generation()`` is the stats of the generation running now (the session's); the one it
    returns when the watch starts belongs to an earlier reply and is never shown.
    """

    def __init__(self, app: Any, generation: Callable[[], GenerationStats | None], reply: Any,
                 waiting: Callable[[], bool]) -> None:
        self._generation = generation
        self._earlier = generation()
        self._reply = reply
        self._waiting = waiting
        self._timer = app.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        if not self._waiting() or not self._reply.is_mounted:
            self.stop()
            return
        stats = self._generation()
        progress = stats.progress if stats is not None and stats is not self._earlier else None
        if progress is None or progress.total < MIN_IDS or progress.done >= progress.total:
            return
        self._reply.show_waiting(progress_line(progress, time.monotonic()))

    def stop(self) -> None:
        self._timer.stop()
