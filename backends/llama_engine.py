"""llama.cpp's C API, held directly: one model, one context, one sequence, the ids it caches.

``llama_cpp.Llama`` decides things tokchat must decide itself: it turns
flash attention off unless asked (llama.cpp's own default, and
``llama-server``'s, is *auto*), it gives no way to turn weight repacking
off (``use_extra_bufts``, the switch around llama.cpp's AMX fault), it
halves the thread count, and it computes logits for one position per
batch only.  So the llama.cpp backend holds the C objects through this
small class instead: the model and context parameters are llama.cpp's
defaults unless a field below says otherwise, exactly as ``llama-server``
builds them.

Shape of the state: ``tokens`` is the list of ids whose keys and values
the context holds, position ``i`` holding ``tokens[i]`` (one sequence, id 0).
:meth:`truncate` drops positions from the cache and the list together, so the
two never disagree.

Not handled: several sequences, embeddings, LoRA.  :meth:`state_bytes` and :meth:`load_state` hand the
cache to and from :mod:`backends.state_cache` (one sequence's state, not the whole context's).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import llama_cpp


class LlamaEngineError(RuntimeError):
    """llama.cpp refused to load the model, make a context or evaluate a batch."""


@dataclass(frozen=True)
class EngineParams:
    """What tokchat sets on llama.cpp's default parameters (everything else stays llama.cpp's default)."""

    n_ctx: int
    n_threads: int
    n_gpu_layers: int = 0
    #: llama.cpp's ``--flash-attn``: "auto" (its default), "on" or "off"
    flash_attn: str = "auto"
    #: weight repacking into extra buffer types (CPU_REPACK, AMX); off = ``--no-repack``
    repack: bool = True
    #: ids per ``llama_decode`` call (llama.cpp's default logical batch is 2048, physical 512)
    n_batch: int = 512
    #: the K and V cache's ggml types (llama.h's numbers; 1 = F16, llama.cpp's default)
    type_k: int = 1
    type_v: int = 1


_FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


def _decode_failure(code: int, n_ids: int, on_gpu: bool) -> str:
    """Why ``llama_decode`` refused a batch, in words; on a GPU a fatal error is mostly its memory."""
    if code == 1:
        return "(no room left in the context)"
    if code < -1 and on_gpu:
        return (f"of {n_ids} ids (llama_decode returned {code}: the GPU is most likely out of memory; a smaller "
                "--ctx or fewer --gpu-layers leaves it more)")
    return f"(llama_decode returned {code})"


class LlamaEngine:
    """One loaded GGUF; see the module docstring.  Not thread-safe: one thread uses it."""

    def __init__(self, model_path: Path, params: EngineParams) -> None:
        from backends.llama_lib import llama_bindings

        llama_cpp = llama_bindings()

        self._lib = llama_cpp
        self.params = params
        self.tokens: list[int] = []
        #: ids ``llama_decode`` evaluated since the last :meth:`reset_count` (measured, not inferred)
        self.evaluated = 0
        self._model = None
        self._ctx = None
        self._batch = None
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = params.n_gpu_layers
        mparams.use_extra_bufts = params.repack
        model = llama_cpp.llama_model_load_from_file(str(model_path).encode("utf-8"), mparams)
        if not model:
            raise LlamaEngineError(f"llama.cpp could not load the model {Path(model_path).name}")
        self._model = model
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = params.n_ctx
        cparams.n_batch = params.n_batch
        cparams.n_ubatch = min(params.n_batch, cparams.n_ubatch)
        cparams.n_threads = params.n_threads
        cparams.n_threads_batch = params.n_threads
        cparams.flash_attn_type = _FLASH_ATTN[params.flash_attn]
        cparams.type_k = params.type_k
        cparams.type_v = params.type_v
        cparams.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            self.close()
            raise LlamaEngineError(
                f"llama.cpp could not create a context of {params.n_ctx} tokens (out of memory?)"
            )
        self._ctx = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))

    @property
    def ctx(self) -> llama_cpp.llama_context_p | None:
        """The ``llama_context *`` (for llama.cpp's samplers)."""
        return self._ctx

    def n_ctx(self) -> int:
        return int(self._lib.llama_n_ctx(self._ctx))

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` cached positions, drop the rest from the cache."""
        if n < len(self.tokens):
            if not self._lib.llama_memory_seq_rm(self._memory, -1, n, -1):
                # a cache that cannot drop a tail (recurrent models) is cleared whole
                self._lib.llama_memory_clear(self._memory, True)
                n = 0
            del self.tokens[n:]

    def decode(self, ids: Sequence[int], logits: str = "last") -> None:
        """Evaluate ``ids`` after the cached ones, ``n_batch`` at a time.

        ``logits``: "last" computes the next-id logits of the last position
        only; "all" of every position of ``ids`` (at most ``n_batch`` of them:
        a speculative draft is verified in one batch), read with index
        ``i`` = position within ``ids``.
        """
        lib, batch = self._lib, self._batch
        assert batch is not None, "decode() after close()"
        n_batch = self.params.n_batch
        if logits == "all" and len(ids) > n_batch:
            raise LlamaEngineError(f"at most {n_batch} ids get logits in one batch")
        for start in range(0, len(ids), n_batch):
            chunk = ids[start:start + n_batch]
            base = len(self.tokens)
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = int(token)
                batch.pos[i] = base + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = logits == "all"
            batch.logits[len(chunk) - 1] = True
            code = lib.llama_decode(self._ctx, batch)
            if code != 0:
                # a failed batch leaves the cache uncertain: start from nothing next time
                lib.llama_memory_clear(self._memory, True)
                self.tokens.clear()
                raise LlamaEngineError("llama.cpp could not evaluate the batch " + _decode_failure(
                    code, len(chunk), self.params.n_gpu_layers != 0))
            self.tokens.extend(int(t) for t in chunk)
            self.evaluated += len(chunk)

    def top_choice(self) -> tuple[int, float]:
        """The most likely id after the last evaluated position, and its probability (softmax of the logits).

        A draft model stops drafting when its own top choice is doubtful
        (:mod:`backends.draft_model`); the argmax is what a greedy chain picks.
        """
        import numpy as np

        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, -1), shape=(self.n_vocab,))
        best = int(logits.argmax())
        return best, 1.0 / float(np.exp(logits - logits[best]).sum())

    def state_bytes(self) -> bytearray:
        """The cached positions' keys and values (sequence 0), as llama.cpp serialises them, for
        :mod:`backends.state_cache`; the ids they belong to are :attr:`tokens`."""
        import ctypes

        lib = self._lib
        size = lib.llama_state_seq_get_size(self._ctx, 0)
        data = bytearray(size)
        written = lib.llama_state_seq_get_data(self._ctx, (ctypes.c_uint8 * size).from_buffer(data), size, 0)
        del data[written:]
        return data

    def load_state(self, ids: Sequence[int], data: bytearray) -> bool:
        """Replace the cache with a saved :meth:`state_bytes` of ``ids``; False (and an empty cache) if llama.cpp
        refuses it.  The caller checked the bytes (:mod:`backends.state_cache`): llama.cpp checks only their
        shape (layers, heads, the V layout), not that they are whole."""
        import ctypes

        lib = self._lib
        lib.llama_memory_clear(self._memory, True)
        self.tokens = []
        if not data:
            return False
        read = lib.llama_state_seq_set_data(self._ctx, (ctypes.c_uint8 * len(data)).from_buffer(data), len(data), 0)
        if read == 0:
            lib.llama_memory_clear(self._memory, True)
            return False
        self.tokens = [int(t) for t in ids]
        return True

    def close(self) -> None:
        lib = self._lib
        if self._batch is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            lib.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            lib.llama_model_free(self._model)
            self._model = None
        self.tokens = []

