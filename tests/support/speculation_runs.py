"""Speculative replies on the real engine and the checks the speculation tests share."""
from __future__ import annotations
import numpy as np
from backends.base import DraftCounts, GenerationStats, LoadOptions, SamplingParams


IM_END = "<|im_end|>"


def chat(tokenizer, *turns: str) -> list[int]:
    """ChatML ids of user/assistant turns, ending with the assistant's open turn."""
    text = ""
    for i, turn in enumerate(turns):
        role = "user" if i % 2 == 0 else "assistant"
        text += f"<|im_start|>{role}\n{turn}<|im_end|>\n"
    return tokenizer.encode(text + "<|im_start|>assistant\n", special=True)


def run(backend, prompt, sampling, stops):
    return list(backend.generate(prompt, sampling, stops))


def run_with_stats(backend, prompt, sampling, stops) -> tuple[list[int], GenerationStats]:
    """The reply's ids and the engine's facts about that reply."""
    generation = backend.generate(prompt, sampling, stops)
    return list(generation), generation.stats


#: how far apart batched and one-id logits were measured on this model (0.39 at most; bench_speculative reports it)
KERNEL_ROUNDING = 0.5


def assert_same_or_kernel_tie(oracle, prompt: list[int], plain: list[int], fast: list[int],
                              sampling: SamplingParams) -> None:
    """``fast == plain``, or they part at a near-tie that kernel rounding decides (see the module docstring)."""
    if fast == plain:
        return
    i = next((i for i, (a, b) in enumerate(zip(plain, fast)) if a != b), min(len(plain), len(fast)))
    assert i < min(len(plain), len(fast)), "one reply is a cut-short copy of the other"
    context = prompt + plain[:i]

    def next_logits():
        engine = oracle._engine
        engine.truncate(0)
        engine.decode(context)
        pointer = engine._lib.llama_get_logits_ith(engine.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(engine.n_vocab,)).astype(np.float64)

    logits = oracle._worker.call(next_logits)
    for token in set(context[-sampling.repeat_last_n:]) if sampling.repeat_penalty != 1.0 else ():
        value = logits[token]
        logits[token] = value / sampling.repeat_penalty if value > 0 else value * sampling.repeat_penalty
    top2 = set(np.argsort(logits)[-2:].tolist())
    gap = abs(logits[plain[i]] - logits[fast[i]])
    assert {plain[i], fast[i]} == top2 and gap < KERNEL_ROUNDING, (
        f"replies part at id {i} ({plain[i]} vs {fast[i]}), not at a near-tie (gap {gap:.3f})")
