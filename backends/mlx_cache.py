"""MLX's prompt cache and the ids it holds: fed, cut back, and kept on disk as mlx-lm's prompt-cache file.

:class:`MLXPromptCache` is to :class:`backends.mlx.MLXBackend` what
:class:`backends.llama_engine.LlamaEngine` is to the llama.cpp backend: the
model's keys and values for exactly the ids in :attr:`MLXPromptCache.tokens`.
It offers the four members :class:`backends.state_keeper.StateKeeper` reads
(``tokens``, ``state_bytes``, ``load_state``, ``truncate``), so MLX's states are
found, checked, capped and refused by the same code as llama.cpp's
(:mod:`backends.state_cache`): the longest saved prefix of a prompt is loaded in
a later process and only the rest is evaluated.

The payload of a state file is mlx-lm's own prompt-cache file
(``mlx_lm.models.cache.save_prompt_cache``: a safetensors file of every layer's
keys and values, the cache classes in its metadata, plus ``tokchat_ids``, the
number of ids it holds), written to and read from memory: the state file's
checksums guard it like llama.cpp's.  Before a loaded cache replaces the
model's, its layer count, classes and shapes are checked against the model
(mlx-lm checks nothing); one that does not fit is refused and the prompt is
evaluated.

The key (:func:`mlx_state_key`) is the model's identity (the GGUF file, or the
MLX directory's ``config.json`` and ``*.safetensors``), the MLX and mlx-lm
versions and the device (Metal or CPU: their arithmetic differs, and on the CPU
a GGUF's float16 weights are computed as float32).
"""
from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any, Sequence

from backends.state_cache import StateKey, model_identity
from backends.state_keeper import StateKeeper, keeper_for

#: mlx-lm model modules whose output is exactly ``head(model(ids))``, no extra scaling
_PLAIN_HEAD_MODULES = frozenset({"mlx_lm.models.llama", "mlx_lm.models.qwen2"})
#: the metadata entry of a saved cache that says how many ids it holds
_IDS_KEY = "tokchat_ids"


class _Named(io.BytesIO):
    """Bytes in memory with a file name: ``mx.load`` reads the format off the name's suffix."""

    name = "prompt-cache.safetensors"


class MLXPromptCache:
    """One model's prompt cache (mlx-lm's ``make_prompt_cache``) and :attr:`tokens`, the ids it holds."""

    def __init__(self, model: Any) -> None:
        self.model = model
        #: mlx-lm's per-layer caches (KVCache for llama and qwen2)
        self.layers: list[Any] = []
        #: exactly the ids whose keys and values the cache holds
        self.tokens: list[int] = []
        self.reset()

    def reset(self) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        self.layers = make_prompt_cache(self.model)
        self.tokens = []

    def truncate(self, keep: int) -> None:
        """Drop the cached ids beyond ``keep`` (a regenerate, an edit, a new conversation, a loaded state cut
        back to the prompt's shared prefix); a cache that cannot be trimmed is emptied."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        extra = len(self.tokens) - keep
        if extra <= 0:
            return
        if keep == 0 or not can_trim_prompt_cache(self.layers):
            self.reset()
            return
        trim_prompt_cache(self.layers, extra)
        del self.tokens[keep:]

    def forward(self, ids: list[int]) -> Any:
        """Feed ``ids`` through the model (extending the cache); logits of the last position."""
        import mlx.core as mx

        model = self.model
        inputs = mx.array(ids)[None]
        if type(model).__module__ in _PLAIN_HEAD_MODULES:
            # the output head only for the last position: on a 49k vocabulary it costs
            # more than all the layers for a multi-id prompt chunk
            hidden = model.model(inputs, cache=self.layers)[:, -1:, :]
            head = model.model.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head
            logits = head(hidden)[:, -1, :]
        else:
            logits = model(inputs, cache=self.layers)[:, -1, :]
        mx.eval(logits)
        self.tokens.extend(ids)
        return logits

    # -- on disk (backends.state_keeper) ---------------------------------------------------------------------
    def state_bytes(self) -> bytes:
        """The cache as mlx-lm's prompt-cache file, in memory; the ids it belongs to are :attr:`tokens`.

        A layer's buffers grow 256 positions at a time (and keep what a trim cut off): only the positions it
        holds are written, so a file is as large as its ids and holds nothing from an earlier conversation."""
        from mlx_lm.models.cache import save_prompt_cache

        buffer = _Named()
        held = [_held_part(layer) for layer in self.layers]
        save_prompt_cache(buffer, held, {_IDS_KEY: str(len(self.tokens))})  # type: ignore[arg-type]  # a file too
        return buffer.getvalue()

    def load_state(self, ids: Sequence[int], data: bytes | bytearray) -> bool:
        """Replace the cache with a saved :meth:`state_bytes` of ``ids``; False (and an empty cache) when mlx-lm
        cannot read it or it does not fit this model (:meth:`_fits`)."""
        import mlx.core as mx
        from mlx_lm.models.cache import load_prompt_cache

        self.reset()
        try:
            loaded: Any = load_prompt_cache(_Named(bytes(data)), return_metadata=True)  # type: ignore[no-untyped-call]
            layers, metadata = loaded
            if metadata.get(_IDS_KEY) != str(len(ids)) or not self._fits(layers, len(ids)):
                return False
            mx.eval([array for layer in layers for array in (layer.keys, layer.values)])  # read now, not later
        # what mx.load and mlx-lm raise on bytes that are not a prompt-cache file: a foreign or damaged payload
        except (RuntimeError, ValueError, KeyError, IndexError, TypeError, AttributeError):
            return False
        self.layers = layers
        self.tokens = [int(t) for t in ids]
        return True

    def _fits(self, layers: list[Any], n_ids: int) -> bool:
        """Whether a loaded cache is one this model makes: as many layers, the same classes, every layer
        holding ``n_ids`` positions, and (where the attention says them) its key/value heads and width."""
        fresh = self.layers
        if len(layers) != len(fresh) or any(type(a) is not type(b) for a, b in zip(layers, fresh)):
            return False
        blocks = getattr(getattr(self.model, "model", None), "layers", None) or [None] * len(layers)
        for layer, block in zip(layers, blocks):
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if getattr(layer, "offset", None) != n_ids or keys is None or values is None:
                return False
            if keys.ndim != 4 or keys.shape[0] != 1 or keys.shape[2] < n_ids or values.shape[:3] != keys.shape[:3]:
                return False
            attention = getattr(block, "self_attn", None)
            heads = getattr(attention, "n_kv_heads", None)
            k_proj = getattr(attention, "k_proj", None)
            if heads is not None and k_proj is not None:
                if keys.shape[1] != heads or keys.shape[3] * heads != k_proj.weight.shape[0]:
                    return False
        return True


def _held_part(layer: Any) -> Any:
    """``layer`` with its key/value buffers cut to the positions it holds (a shallow copy; the same layer when
    there is nothing to cut or it is not a plain key/value cache)."""
    keys, offset = getattr(layer, "keys", None), getattr(layer, "offset", None)
    if keys is None or not isinstance(offset, int) or keys.shape[2] <= offset:
        return layer
    held = copy.copy(layer)
    held.keys = layer.keys[..., :offset, :]
    held.values = layer.values[..., :offset, :]
    return held


def mlx_build_key() -> str:
    """The MLX and mlx-lm versions: what computes the keys and values, and what writes their file."""
    import mlx.core as mx
    import mlx_lm

    return f"mlx {getattr(mx, '__version__', '?')} mlx-lm {getattr(mlx_lm, '__version__', '?')}"


def mlx_state_key(model_path: Path, device: str) -> StateKey:
    """The key of states MLX makes for this model on ``device`` ("Metal" or "CPU")."""
    return StateKey(model_identity(model_path), mlx_build_key(), f"engine=mlx device={device}")


def open_mlx_keeper(options: Any, model_path: Path, device: str, model_name: str) -> StateKeeper | None:
    """The loaded MLX model's keeper (``options``: its LoadOptions); None with ``--no-state``."""
    return keeper_for(options, Path(model_path), lambda: mlx_state_key(Path(model_path), device), model_name,
                      engine="MLX")
