"""tokchat's sampling on llama.cpp's logits: llama.cpp's samplers, with the penalty kept in Python.

llama-cpp-python's ``Llama.generate`` builds a fresh chain each call and
never shows it the prompt, so its repetition penalty sees only the reply;
llama-server and llama-cli feed the prompt in first.  tokchat's meaning
(:class:`backends.base.SamplingParams`) is llama-server's, so the backend
keeps the penalty window itself, prompt first.

Per token, on the logits llama.cpp holds for the position (no copy):

1. a constrained reply (:mod:`backends.constraint`) masks them in place:
   refused ids are -inf, so every step after it sees only ids the
   constraint allows;
2. the repetition penalty (:class:`backends.penalty.RepetitionPenalty`) is
   written onto the window's distinct ids only, and put back after the pick.
   llama.cpp's own penalties sampler gives the same logits bit for bit but
   looks every id of the vocabulary up in a hash map on every token (about
   0.6 ms on Qwen2.5's 151,936 ids on a 2.5 GHz Xeon, as long as a decode
   step of a small model takes a tenth of);
3. greedy: the first id of the highest logit (``backends._pick``, in C),
   which is what llama.cpp's greedy sampler picks, without first copying the
   whole vocabulary into llama.cpp's candidate array; otherwise llama.cpp's
   chain (top-k, top-p, min-p, temperature, the seeded draw), built once per
   reply, as llama-server runs it after its penalties.

The logits are reached through ctypes, not NumPy: the engine process does
not import NumPy unless a constraint masks them (or ``backends._pick`` was
not built, when NumPy's ``argmax`` picks).

:func:`llama_chain` builds the chain llama-server runs, penalties included:
the tests' oracle and the bench's "before".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from backends.base import SamplingParams, penalty_window

if TYPE_CHECKING:
    from backends.constraint import ConstrainedReply


def penalty_last_n(sampling: SamplingParams, n_ctx: int) -> int:
    """The penalty window's length for llama.cpp (0: no penalty); ``repeat_last_n`` -1 is the whole context."""
    if sampling.repeat_last_n == 0 or sampling.repeat_penalty == 1.0:
        return 0
    return sampling.repeat_last_n if sampling.repeat_last_n > 0 else n_ctx


def llama_chain(sampling: SamplingParams, seed: int, n_vocab: int, last_n: int = 0) -> Any:
    """A llama.cpp sampler chain for ``sampling``: llama.cpp's penalties sampler over ``last_n`` ids first when
    ``last_n`` > 0 (unfed: the caller accepts the window), then greedy or top-k, top-p, min-p, temperature and
    the draw seeded with ``seed``.  The caller frees it (``llama_sampler_free``)."""
    from backends.llama_lib import llama_bindings

    llama_cpp = llama_bindings()

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())

    def add(sampler: Any) -> None:
        llama_cpp.llama_sampler_chain_add(chain, sampler)

    if last_n > 0:
        add(llama_cpp.llama_sampler_init_penalties(n_vocab, last_n, sampling.repeat_penalty, 0.0, 0.0))
    if sampling.greedy:
        add(llama_cpp.llama_sampler_init_greedy())
    else:
        add(llama_cpp.llama_sampler_init_top_k(sampling.top_k))
        add(llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
        add(llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
        add(llama_cpp.llama_sampler_init_temp(sampling.temperature))
        add(llama_cpp.llama_sampler_init_dist(seed))
    return chain


class LlamaCppSampler:
    """One reply's sampler on a llama.cpp context; :meth:`close` frees its chain."""

    def __init__(self, sampling: SamplingParams, seed: int, n_vocab: int, n_ctx: int,
                 context: Sequence[int], constraint: ConstrainedReply | None = None) -> None:
        import ctypes

        from backends.llama_lib import llama_bindings
        from backends.penalty import RepetitionPenalty

        llama_cpp = llama_bindings()

        self._lib = llama_cpp
        self._void_p = ctypes.c_void_p
        self._cast = ctypes.cast
        #: one position's logits as a ctypes array over llama.cpp's own buffer (no copy)
        self._row = ctypes.c_float * n_vocab
        self._argmax = _argmax()
        #: the reply's constraint: it masks the logits before the pick and takes the id picked
        self.constraint = constraint
        if constraint is not None:  # a think block left free, the ids a continued reply holds taken first
            constraint.follow(context, sampling.generated_ids)
        self._n_vocab = n_vocab
        self.greedy = sampling.greedy
        last_n = penalty_last_n(sampling, n_ctx)
        #: the window's penalty (None: off); the prompt's part of the window first, as llama-server feeds it
        self.penalty = (RepetitionPenalty(last_n, sampling.repeat_penalty, n_vocab,
                                          window=penalty_window(context, sampling)) if last_n else None)
        #: llama.cpp's chain after the penalty (None when greedy: the C argmax picks)
        self.chain = None if self.greedy else llama_chain(sampling, seed, n_vocab)

    def sample(self, ctx: Any, index: int = -1) -> int:
        """The next id from the logits of position ``index`` of the last batch (-1: its last); it joins the window.

        A speculative step samples position after position of one batch and
        stops at the first disagreement, so the window and the random
        generator see exactly the ids the reply keeps.
        """
        constraint, penalty = self.constraint, self.penalty
        if constraint is None and penalty is None and not self.greedy:
            return int(self._lib.llama_sampler_sample(self.chain, ctx, index))
        # the context's own logits for that position: the chain and the argmax read them there
        address: int = self._cast(self._lib.llama_get_logits_ith(ctx, index), self._void_p).value or 0
        logits = self._row.from_address(address)
        if constraint is not None:
            constraint.mask_logits(_numpy_view(logits))
        saved = penalty.apply(logits) if penalty is not None else None
        if self.greedy:
            token = self._argmax(address, self._n_vocab)
        else:
            token = int(self._lib.llama_sampler_sample(self.chain, ctx, index))
        if penalty is not None and saved is not None:
            penalty.restore(logits, saved)
            penalty.accept(token)
        if constraint is not None:
            constraint.advance(token)
        return token

    def close(self) -> None:
        if self.chain is not None:
            self._lib.llama_sampler_free(self.chain)
            self.chain = None


def _argmax() -> Callable[[int, int], int]:
    """The greedy pick over ``n`` float32 logits at an address: ``backends._pick`` (C), else NumPy's argmax."""
    try:
        from backends._pick import argmax_f32  # type: ignore[import-not-found]  # built by setup.py

        return argmax_f32  # type: ignore[no-any-return]
    except ImportError:
        import ctypes

        import numpy as np

        def numpy_argmax(address: int, n: int) -> int:
            return int(np.ctypeslib.as_array((ctypes.c_float * n).from_address(address)).argmax())

        return numpy_argmax


def _numpy_view(logits: Any) -> Any:
    """A NumPy array over the same buffer as the ctypes array ``logits`` (for a constraint's mask)."""
    import numpy as np

    return np.ctypeslib.as_array(logits)
