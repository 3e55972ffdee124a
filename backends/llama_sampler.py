"""tokchat's sampling chain built from llama.cpp's own samplers.

llama-cpp-python's ``Llama.generate`` builds a fresh chain each call and
never shows it the prompt, so its repetition penalty sees only the reply;
llama-server and llama-cli feed the prompt in first.  tokchat's meaning
(:class:`backends.base.SamplingParams`) is llama-server's, so the backend
builds the chain here and feeds it the penalty window itself.

A constrained reply (:mod:`backends.constraint`) masks the logits llama.cpp
holds for the position before the chain reads them: refused ids are -inf,
so every sampler after it (penalty, greedy, top-k, the draw) sees only ids
the constraint allows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from backends.base import SamplingParams, penalty_window

if TYPE_CHECKING:
    from backends.constraint import ConstrainedReply


class LlamaCppSampler:
    """A llama.cpp sampler chain for one reply; :meth:`close` frees it."""

    def __init__(self, sampling: SamplingParams, seed: int, n_vocab: int, n_ctx: int,
                 context: Sequence[int], constraint: ConstrainedReply | None = None) -> None:
        import llama_cpp

        self._lib = llama_cpp
        #: the reply's constraint: it masks the logits before the chain picks and takes the id picked
        self.constraint = constraint
        if constraint is not None:  # a think block left free, the ids a continued reply holds taken first
            constraint.follow(context, sampling.generated_ids)
        self._n_vocab = n_vocab
        self.chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = lambda sampler: llama_cpp.llama_sampler_chain_add(self.chain, sampler)  # noqa: E731
        window = penalty_window(context, sampling)
        if window:
            last_n = sampling.repeat_last_n if sampling.repeat_last_n > 0 else n_ctx
            add(llama_cpp.llama_sampler_init_penalties(n_vocab, last_n, sampling.repeat_penalty, 0.0, 0.0))
        if sampling.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            add(llama_cpp.llama_sampler_init_top_k(sampling.top_k))
            add(llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
            add(llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(sampling.temperature))
            add(llama_cpp.llama_sampler_init_dist(seed))
        # the prompt's part of the window, as llama-server accepts the prompt before sampling
        for token in window:
            llama_cpp.llama_sampler_accept(self.chain, int(token))

    def sample(self, ctx, index: int = -1) -> int:
        """The next id from the logits of position ``index`` of the last batch (-1: its last); the chain records it.

        A speculative step samples position after position of one batch and
        stops at the first disagreement, so the chain (its penalty window, its
        random generator) sees exactly the ids the reply keeps.
        """
        constraint = self.constraint
        if constraint is None:
            return int(self._lib.llama_sampler_sample(self.chain, ctx, index))
        import numpy as np

        # the context's own logits for that position, masked in place: the chain then reads them
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(ctx, index), shape=(self._n_vocab,))
        constraint.mask_logits(logits)
        token = int(self._lib.llama_sampler_sample(self.chain, ctx, index))
        constraint.advance(token)
        return token

    def close(self) -> None:
        if self.chain is not None:
            self._lib.llama_sampler_free(self.chain)
            self.chain = None
