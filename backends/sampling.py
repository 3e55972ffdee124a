"""tokchat's sampling chain in NumPy, for engines that hand us the logits (MLX).

It implements exactly the chain documented on
:class:`backends.base.SamplingParams` (llama.cpp's order and formulas), so an
engine whose own sampler means something else (mlx-lm's top-p over
un-renormalized probabilities, its penalty window) still follows tokchat's
settings.  ``tests/backends/test_sampling.py`` checks each step against
llama.cpp's own samplers on the same logits.

llama.cpp's penalties sampler kept incrementally for one reply, applied to
the window's distinct ids only, is :class:`backends.penalty.RepetitionPenalty`
(no NumPy: the llama.cpp backend applies it in the engine's process).

Not handled: DRY, XTC, typical-p, mirostat (tokchat does not expose them);
frequency/presence penalties only in :class:`backends.penalty.RepetitionPenalty`.
"""
from __future__ import annotations

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
