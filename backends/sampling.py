"""tokchat's sampling chain in NumPy, for engines that hand us the logits (MLX).

It implements exactly the chain documented on
:class:`backends.base.SamplingParams` (llama.cpp's order and formulas), so an
engine whose own sampler means something else (mlx-lm's top-p over
un-renormalized probabilities, its penalty window) still follows tokchat's
settings.  ``tests/backends/test_sampling.py`` checks each step against
llama.cpp's own samplers on the same logits.

:class:`RepetitionPenalty` is llama.cpp's penalties sampler kept incrementally
for one reply and applied to the window's distinct ids only; the llama.cpp
backend applies it on llama.cpp's own logits before its chain draws
(:mod:`backends.llama_sampler`).

Not handled: DRY, XTC, typical-p, mirostat (tokchat does not expose them);
frequency/presence penalties only in :class:`RepetitionPenalty`.
"""
from __future__ import annotations

from collections import deque
from typing import Iterable, Sequence

import numpy as np

from backends.base import SamplingParams, penalty_window, resolve_seed


def apply_repetition_penalty(logits: np.ndarray, window: Sequence[int], penalty: float) -> np.ndarray:
    """llama.cpp's formula on every distinct id of ``window``: positive logits / penalty, others * penalty."""
    if not len(window) or penalty == 1.0:
        return logits
    out = logits.copy()
    ids = np.unique(np.asarray(window, dtype=np.int64))
    ids = ids[(ids >= 0) & (ids < out.shape[0])]
    values = out[ids]
    factor = out.dtype.type(penalty)
    out[ids] = np.where(values <= 0, values * factor, values / factor)
    return out


class RepetitionPenalty:
    """llama.cpp's penalties sampler (``llama_sampler_init_penalties``) for one reply, over the window's ids only.

    llama.cpp's own sampler looks every id of the vocabulary up in its
    window's hash map on every token: 151,936 lookups for Qwen2.5, about
    0.6 ms a token on a 2.5 GHz Xeon, paid by llama-server too.  Only the
    window's distinct ids (at most ``last_n``) can change, so this one reads
    and writes those alone, with llama.cpp's float32 arithmetic in llama.cpp's
    order: a positive logit divided by ``repeat``, any other multiplied, once
    per distinct id; then ``count * frequency + presence`` subtracted.  The
    result is llama.cpp's bit for bit (``tests/backends/test_penalty_window.py``).

    The window is llama.cpp's ring: the last ``last_n`` ids :meth:`accept` saw,
    each id's count beside it.  Ids outside ``[0, n_vocab)`` hold their place
    in the ring but touch no logit, as in llama.cpp.
    """

    def __init__(self, last_n: int, repeat: float, n_vocab: int, *, frequency: float = 0.0, presence: float = 0.0,
                 window: Iterable[int] = ()) -> None:
        if last_n <= 0:
            raise ValueError(f"a penalty window holds at least one id, not {last_n}")
        self.n_vocab = n_vocab
        self._repeat = np.float32(repeat)
        self._frequency = np.float32(frequency)
        self._presence = np.float32(presence)
        self._by_count = frequency != 0.0 or presence != 0.0
        self._ring: deque[int] = deque(maxlen=last_n)
        #: id -> how many times it is in the ring (ids with a count of 0 are removed)
        self._counts: dict[int, int] = {}
        #: ids in the ring that are not in the vocabulary (a logit index would be out of range)
        self._foreign = 0
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
                if not 0 <= old < self.n_vocab:
                    self._foreign -= 1
        if token not in counts:
            counts[token] = 1
            if not 0 <= token < self.n_vocab:
                self._foreign += 1
        else:
            counts[token] += 1
        ring.append(token)

    def apply(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Penalize ``logits`` (float32, one position, written in place); returns what :meth:`restore` puts back."""
        counts = self._counts
        ids = np.fromiter(counts, dtype=np.intp, count=len(counts))
        if self._foreign:
            ids = ids[(ids >= 0) & (ids < self.n_vocab)]
        before = logits[ids]
        after = np.where(before <= 0, before * self._repeat, before / self._repeat)
        if self._by_count:
            times = np.fromiter((counts[int(i)] for i in ids), dtype=np.float32, count=len(ids))
            after -= times * self._frequency + self._presence
        logits[ids] = after
        return ids, before

    @staticmethod
    def restore(logits: np.ndarray, saved: tuple[np.ndarray, np.ndarray]) -> None:
        """Put back the logits :meth:`apply` changed."""
        ids, before = saved
        logits[ids] = before


def filter_candidates(logits: np.ndarray, sampling: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Steps 3 to 6 of the chain: (candidate ids, their logits after temperature), most likely first."""
    order = np.argsort(-logits, kind="stable")  # ids by logit, ties by id
    if sampling.top_k > 0:
        order = order[: sampling.top_k]
    values = logits[order].astype(np.float64)
    if sampling.top_p < 1.0:
        probs = np.exp(values - values[0])
        probs /= probs.sum()
        # the smallest prefix whose probability reaches top_p (at least one id)
        reach = int(np.searchsorted(np.cumsum(probs), sampling.top_p)) + 1
        order, values = order[:reach], values[:reach]
    if sampling.min_p > 0:
        # p >= min_p * p_max  <=>  logit >= max_logit + log(min_p), as llama.cpp compares
        keep = values >= values[0] + np.log(sampling.min_p)
        order, values = order[keep], values[keep]
    return order, values / sampling.temperature


class NumpySampler:
    """One reply's sampler: the chain of :class:`SamplingParams` with a seeded PCG64 generator."""

    def __init__(self, sampling: SamplingParams) -> None:
        self.sampling = sampling
        self.seed = resolve_seed(sampling)
        self._rng = np.random.default_rng(self.seed)

    def pick(self, logits: np.ndarray, context: Sequence[int]) -> int:
        """The next id from the next position's ``logits``; ``context`` is prompt + reply so far."""
        sampling = self.sampling
        logits = apply_repetition_penalty(np.asarray(logits).reshape(-1), penalty_window(context, sampling),
                                          sampling.repeat_penalty)
        if sampling.greedy:
            return int(np.argmax(logits))
        ids, scaled = filter_candidates(logits, sampling)
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        return int(ids[self._rng.choice(len(ids), p=probs)])
