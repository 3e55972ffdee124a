"""llama.cpp's repetition penalty for one reply, on the window's distinct ids only, in plain Python.

Plain Python (no NumPy) because it runs in the engine's process, beside
llama.cpp's logits: NumPy's import was 46 ms and 15 MiB of a one-shot
reply's engine (docs/engine.md, "Figures behind the code's choices"), and
at most ``last_n`` logits change, so a loop over them costs tens of
microseconds a token.
"""
from __future__ import annotations

import struct
from collections import deque
from typing import Any, Iterable

_F32 = struct.Struct("<f")


def f32(value: float) -> float:
    """``value`` rounded to float32 (to nearest, ties to even), as llama.cpp's float arithmetic leaves it."""
    rounded: float = _F32.unpack(_F32.pack(value))[0]
    return rounded


class RepetitionPenalty:
    """llama.cpp's penalties sampler (``llama_sampler_init_penalties``) for one reply, over the window's ids only.

    llama.cpp's own sampler looks every id of the vocabulary up in its
    window's hash map on every token: 151,936 lookups for Qwen2.5, about
    0.6 ms a token on a 2.5 GHz Xeon, paid by llama-server too.  Only the
    window's distinct ids (at most ``last_n``) can change, so this one reads
    and writes those alone, with llama.cpp's float32 arithmetic in llama.cpp's
    order: a positive logit divided by ``repeat``, any other multiplied, once
    per distinct id; then ``count * frequency + presence`` subtracted.  The
    result is llama.cpp's bit for bit (``tests/backends/test_penalty_window.py``):
    each step is computed in double precision from float32 operands and
    rounded to float32, which for one +, -, * or / gives the float32 result
    exactly (binary64 holds more than twice binary32's precision).

    The window is llama.cpp's ring: the last ``last_n`` ids :meth:`accept` saw,
    each id's count beside it.  Ids outside ``[0, n_vocab)`` hold their place
    in the ring but touch no logit, as in llama.cpp.
    """

    def __init__(self, last_n: int, repeat: float, n_vocab: int, *, frequency: float = 0.0, presence: float = 0.0,
                 window: Iterable[int] = ()) -> None:
        if last_n <= 0:
            raise ValueError(f"a penalty window holds at least one id, not {last_n}")
        self.n_vocab = n_vocab
        self._repeat = f32(repeat)
        self._frequency = f32(frequency)
        self._presence = f32(presence)
        self._by_count = frequency != 0.0 or presence != 0.0
        self._ring: deque[int] = deque(maxlen=last_n)
        #: id -> how many times it is in the ring (ids with a count of 0 are removed)
        self._counts: dict[int, int] = {}
        for token in window:
            self.accept(int(token))

    def accept(self, token: int) -> None:
        """``token`` joins the window; the oldest id leaves a full one."""
        ring, counts = self._ring, self._counts
        if len(ring) == ring.maxlen:
            old = ring[0]
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        counts[token] = counts.get(token, 0) + 1
        ring.append(token)

    def apply(self, logits: Any) -> list[tuple[int, float]]:
        """Penalize ``logits`` in place (one position's float32 values: a ctypes array over llama.cpp's buffer,
        or a NumPy float32 array); returns what :meth:`restore` puts back."""
        n_vocab, repeat = self.n_vocab, self._repeat
        saved = [(i, float(logits[i])) for i in self._counts if 0 <= i < n_vocab]
        if not self._by_count:
            for i, before in saved:
                logits[i] = before * repeat if before <= 0 else before / repeat
            return saved
        counts, frequency, presence = self._counts, self._frequency, self._presence
        for i, before in saved:
            after = f32(before * repeat if before <= 0 else before / repeat)
            logits[i] = after - f32(f32(counts[i] * frequency) + presence)
        return saved

    @staticmethod
    def restore(logits: Any, saved: list[tuple[int, float]]) -> None:
        """Put back the logits :meth:`apply` changed."""
        for i, before in saved:
            logits[i] = before
