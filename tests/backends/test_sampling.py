"""tokchat's sampling chain: the NumPy version (MLX) against llama.cpp's own samplers on the same logits.

llama.cpp is the oracle: :func:`backends.llama_sampler.llama_chain` builds
llama-server's chain from llama.cpp's samplers, penalties included, and ``llama_sampler_apply`` shows
what survives each setting.  The NumPy chain must keep the same ids with the
same logits, and pick the same id when greedy.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from backends.base import SamplingParams, penalty_window, resolve_seed
from backends.llama_sampler import llama_chain, penalty_last_n
from backends.sampling import NumpySampler, apply_repetition_penalty, filter_candidates

VOCAB = 300


def llama_apply(sampling: SamplingParams, logits: np.ndarray, context: list[int]) -> tuple[dict[int, float], int]:
    """What llama.cpp's chain leaves of ``logits``: id -> logit, and the id it selected."""
    import llama_cpp

    chain = llama_chain(sampling, seed=1, n_vocab=len(logits), last_n=penalty_last_n(sampling, 4096))
    try:
        for token in penalty_window(context, sampling):
            llama_cpp.llama_sampler_accept(chain, token)
        data = (llama_cpp.llama_token_data * len(logits))(
            *[llama_cpp.llama_token_data(i, float(x), 0.0) for i, x in enumerate(logits)])
        arr = llama_cpp.llama_token_data_array(data=data, size=len(logits), selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        kept = {int(data[i].id): float(data[i].logit) for i in range(arr.size)}
        return kept, int(data[arr.selected].id)
    finally:
        llama_cpp.llama_sampler_free(chain)


def _case(seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(VOCAB) * 3).astype(np.float32)
    context = [int(t) for t in rng.integers(0, VOCAB, size=150)]
    return logits, context


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("last_n", [64, 8, -1])
def test_greedy_with_penalty_picks_what_llama_cpp_picks(seed, last_n):
    logits, context = _case(seed)
    # make the penalty decide: the best ids are in the window
    logits[context[-1]] += 6
    logits[context[0]] += 6.2
    sampling = SamplingParams(temperature=0, repeat_penalty=1.3, repeat_last_n=last_n)
    kept, selected = llama_apply(sampling, logits, context)
    penalized = apply_repetition_penalty(logits, penalty_window(context, sampling), 1.3)
    assert np.array_equal(penalized, np.array([kept[i] for i in range(VOCAB)], dtype=np.float32))
    assert NumpySampler(sampling).pick(logits, context) == selected


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("top_k,top_p,min_p", [(40, 0.95, 0.05), (0, 0.9, 0.0), (5, 1.0, 0.0), (0, 1.0, 0.2),
                                               (100, 0.5, 0.1)])
def test_filters_keep_what_llama_cpp_keeps(seed, top_k, top_p, min_p):
    logits, context = _case(seed)
    sampling = SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=1.1)
    kept, selected = llama_apply(sampling, logits, context)
    penalized = apply_repetition_penalty(logits, penalty_window(context, sampling), 1.1)
    ids, scaled = filter_candidates(penalized, sampling)
    assert set(int(i) for i in ids) == set(kept)
    assert selected in kept
    assert np.allclose(scaled, [kept[int(i)] for i in ids], rtol=1e-5)


def test_penalty_window_is_the_end_of_prompt_and_reply():
    sampling = SamplingParams(repeat_last_n=3, repeat_penalty=1.2)
    assert list(penalty_window([1, 2, 3, 4, 5], sampling)) == [3, 4, 5]
    assert list(penalty_window([1, 2], sampling)) == [1, 2]
    assert not penalty_window([1, 2, 3], SamplingParams(repeat_penalty=1.0))
    assert not penalty_window([1, 2, 3], SamplingParams(repeat_last_n=0))
    assert list(penalty_window([1, 2, 3], SamplingParams(repeat_last_n=-1))) == [1, 2, 3]


def test_seeded_numpy_sampler_repeats_and_seeds_wrap_at_32_bits():
    logits, context = _case(3)
    sampling = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=11)
    first = [NumpySampler(sampling).pick(logits, context) for _ in range(3)]
    assert len(set(first)) == 1
    one = NumpySampler(sampling)
    draws = [one.pick(logits, context) for _ in range(20)]
    assert len(set(draws)) > 1  # one generator, many draws: a real distribution
    assert resolve_seed(SamplingParams(seed=11 + 2**32)) == 11
    assert resolve_seed(SamplingParams(seed=-1)) == 2**32 - 1
