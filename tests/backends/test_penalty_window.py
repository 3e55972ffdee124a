"""The repetition penalty on the window's distinct ids only (issue 49, item 5), against llama.cpp's own sampler.

llama.cpp is the oracle throughout: its penalties sampler
(``llama_sampler_init_penalties``, what llama-server runs) applied with
``llama_sampler_apply`` to the same logits, and, on Qwen2.5-Coder-0.5B, a
reply sampled by llama.cpp's whole chain as llama-server builds it
(penalties, then greedy or top-k, top-p, min-p, temperature and the seeded
draw), the prompt's window accepted first.  tokchat's sampler must give the
same logits bit for bit and the same ids, greedy and seeded, while the chain
llama.cpp runs per token no longer holds the penalties sampler (its
look-up of every vocabulary id in a hash map on every token was the
penalty's cost).
"""
from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
import pytest

from backends.base import LoadOptions, SamplingParams, penalty_window
from backends.llama_sampler import LlamaCppSampler
from backends.penalty import RepetitionPenalty

VOCAB = 500


def llama_penalized(logits: np.ndarray, window: list[int], last_n: int, repeat: float, frequency: float = 0.0,
                    presence: float = 0.0) -> np.ndarray:
    """``logits`` after llama.cpp's penalties sampler that accepted ``window``, in id order."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_penalties(len(logits), last_n, repeat, frequency, presence)
    try:
        for token in window:
            llama_cpp.llama_sampler_accept(sampler, token)
        data = (llama_cpp.llama_token_data * len(logits))(
            *[llama_cpp.llama_token_data(i, float(x), 0.0) for i, x in enumerate(logits)])
        arr = llama_cpp.llama_token_data_array(data=data, size=len(logits), selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
        out = np.empty(len(logits), dtype=np.float32)
        for i in range(arr.size):
            out[data[i].id] = data[i].logit
        return out
    finally:
        llama_cpp.llama_sampler_free(sampler)


def _logits(rng: np.random.Generator) -> np.ndarray:
    logits = (rng.standard_normal(VOCAB) * 4).astype(np.float32)
    logits[rng.integers(0, VOCAB, size=20)] = 0.0  # the <= 0 branch at exactly zero
    return logits


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("last_n,repeat,frequency,presence", [
    (64, 1.05, 0.0, 0.0), (8, 1.3, 0.0, 0.0), (64, 0.8, 0.0, 0.0), (16, 1.1, 0.25, 0.6), (32, 1.0, 0.1, 0.0),
])
def test_penalized_logits_are_llama_cpps_bit_for_bit_as_the_window_slides(seed, last_n, repeat, frequency, presence):
    rng = np.random.default_rng(seed)
    # few distinct ids so they repeat (counts above 1) and the ring evicts ids that are still in it
    stream = [int(t) for t in rng.integers(0, 40, size=3 * last_n)]
    prompt, reply = stream[:last_n // 2 + 3], stream[last_n // 2 + 3:]
    penalty = RepetitionPenalty(last_n, repeat, VOCAB, frequency=frequency, presence=presence, window=prompt)
    seen = list(prompt)
    for token in reply:
        logits = _logits(rng)
        original = logits.copy()
        saved = penalty.apply(logits)
        assert logits.tobytes() == llama_penalized(original, seen, last_n, repeat, frequency, presence).tobytes()
        penalty.restore(logits, saved)
        assert logits.tobytes() == original.tobytes()  # llama.cpp's buffer is left as it was computed
        penalty.accept(token)
        seen.append(token)


def test_ids_outside_the_vocabulary_keep_their_place_in_the_window_and_touch_nothing():
    rng = np.random.default_rng(9)
    window = [3, VOCAB + 7, 5, 3, VOCAB + 7, -1, 9]
    penalty = RepetitionPenalty(4, 1.2, VOCAB, window=window)
    logits = _logits(rng)
    original = logits.copy()
    penalty.apply(logits)
    assert logits.tobytes() == llama_penalized(original, window, 4, 1.2).tobytes()
    penalty.accept(11)  # the ring now holds 3, VOCAB + 7, -1, 9 -> VOCAB + 7, -1, 9, 11
    logits = original.copy()
    penalty.apply(logits)
    assert logits.tobytes() == llama_penalized(original, window + [11], 4, 1.2).tobytes()


# -- the real engine: the same reply as llama.cpp's own chain, with the penalty on ----------------------------

@pytest.fixture(scope="module")
def qwen(qwen_path, tmp_path_factory):
    """The llama.cpp backend on Qwen2.5-Coder-0.5B in this process, plain decoding (one id per step)."""
    from backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend()
    # one thread: on a loaded 2-core machine two spinning threads made a step take seconds
    backend.load(qwen_path, LoadOptions(n_ctx=2048, n_threads=1, speculative="off",
                                        log_path=tmp_path_factory.mktemp("penalty") / "engine.log"))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def prompt(qwen_path) -> list[int]:
    """A chat prompt, in ids from llama.cpp's own tokenizer (a vocabulary-only load)."""
    import llama_cpp

    question = "List the fruits you know, one per line, then list them again in the same order, then once more."
    vocab = llama_cpp.Llama(str(qwen_path), vocab_only=True, verbose=False)
    try:
        text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
        return vocab.tokenize(text.encode(), add_bos=False, special=True)
    finally:
        vocab.close()


def llama_cpp_reply(backend, prompt: list[int], sampling: SamplingParams, n: int) -> list[int]:
    """``n`` ids sampled by llama.cpp's chain as llama-server builds it, the prompt's window accepted first.

    The prompt is evaluated as the backend evaluates a prompt it holds but
    its last id (that id alone), so both sample from the same logits.
    """
    import llama_cpp

    def job() -> list[int]:
        engine = backend._engine
        engine.truncate(0)
        engine.decode(prompt[:-1])
        engine.decode(prompt[-1:])
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = lambda sampler: llama_cpp.llama_sampler_chain_add(chain, sampler)  # noqa: E731
        add(llama_cpp.llama_sampler_init_penalties(engine.n_vocab, sampling.repeat_last_n, sampling.repeat_penalty,
                                                   0.0, 0.0))
        if sampling.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            add(llama_cpp.llama_sampler_init_top_k(sampling.top_k))
            add(llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
            add(llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(sampling.temperature))
            add(llama_cpp.llama_sampler_init_dist(sampling.seed))
        try:
            for token in penalty_window(prompt, sampling):
                llama_cpp.llama_sampler_accept(chain, token)
            ids = [int(llama_cpp.llama_sampler_sample(chain, engine.ctx, -1))]
            while len(ids) < n:
                engine.decode(ids[-1:])
                ids.append(int(llama_cpp.llama_sampler_sample(chain, engine.ctx, -1)))
            return ids
        finally:
            llama_cpp.llama_sampler_free(chain)

    return backend._worker.call(job)


@pytest.mark.slow
@pytest.mark.parametrize("sampling,decides", [
    (SamplingParams(temperature=0, repeat_penalty=1.05, repeat_last_n=64), False),  # the Qwen preset, greedy
    (SamplingParams(temperature=0, repeat_penalty=1.3, repeat_last_n=16), True),
    (SamplingParams(temperature=0.8, top_k=20, top_p=0.8, min_p=0.0, repeat_penalty=1.05, seed=7), False),
    (SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.3, repeat_last_n=16, seed=3),
     True),
], ids=["greedy-preset", "greedy-1.3", "t0.8-preset", "t0.8-1.3"])
def test_reply_is_llama_cpps_own_chains_id_for_id(qwen, prompt, sampling, decides):
    n = 24
    expected = llama_cpp_reply(qwen, prompt, sampling, n)
    assert list(qwen.generate(prompt, replace(sampling, max_tokens=n), set())) == expected
    if decides:  # the penalty decided something: without it llama.cpp's chain gives another reply
        assert llama_cpp_reply(qwen, prompt, replace(sampling, repeat_penalty=1.0), n) != expected


def chain_names(chain) -> list[str]:
    import llama_cpp

    if chain is None:
        return []
    return [llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain, i)).decode()
            for i in range(llama_cpp.llama_sampler_chain_n(chain))]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_chain_llama_cpp_runs_per_token_holds_no_full_vocabulary_penalty(temperature):
    sampling = SamplingParams(temperature=temperature, repeat_penalty=1.05, repeat_last_n=64, seed=1)
    sampler = LlamaCppSampler(sampling, 1, 151936, 2048, list(range(100)))
    try:
        assert "penalties" not in chain_names(sampler.chain)
        assert sampler.penalty is not None  # the penalty is kept, on the window's ids only
        if temperature == 0:
            assert sampler.chain is None  # greedy: NumPy's argmax, no candidate array of the whole vocabulary
        else:
            assert chain_names(sampler.chain) == ["top-k", "top-p", "min-p", "temp", "dist"]
    finally:
        sampler.close()
