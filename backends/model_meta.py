"""What a backend needs to know about a model file before it loads it.

Read from the GGUF header with tokchat's own reader (no tensor data, no
engine), or from an MLX model directory's ``config.json``.  Used for the
header line (name, quantization), the default context size and for
refusing early, with a clear reason, what an engine cannot load.

A chat reads the header once (when it matches a preset) and hands the
:class:`ModelMeta` on: its ``gguf`` goes to the tokenizer, the whole object
to the backend (``LoadOptions.model_meta``); :func:`known_meta` re-reads only
when the object handed over describes another path.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.base import BackendError
from backends.kv_types import F16, KvType, bytes_per_value

#: GGUF ``general.file_type`` (llama.cpp's ``llama_ftype``) -> name
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}
#: the default context when the user gives none: the training context, capped
DEFAULT_CTX_CAP = 8192


@dataclass
class ModelMeta:
    """Header facts of one model: enough to name it and size its context."""

    path: Path
    format: str  # gguf | mlx
    name: str
    architecture: str
    quantization: str
    context_length: int | None
    #: the raw key/values (GGUF) or config.json (MLX)
    kv: dict[str, Any] = field(default_factory=dict, repr=False)
    #: the parsed GGUF header (a :class:`tokenizer.gguf.GGUFFile`; None for MLX): the tokenizer's input
    gguf: Any = field(default=None, repr=False, compare=False)

    def default_ctx(self) -> int:
        """The model's training context capped at :data:`DEFAULT_CTX_CAP`."""
        return min(self.context_length or DEFAULT_CTX_CAP, DEFAULT_CTX_CAP)


def is_mlx_dir(path: Path) -> bool:
    """An MLX model directory: config.json plus safetensors weights."""
    return path.is_dir() and (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def read_model_meta(path: Path | str) -> ModelMeta:
    """Read a .gguf header or an MLX directory's config; BackendError when it is neither."""
    path = Path(path)
    if not path.exists():
        raise BackendError(f"model not found: {path}")
    if is_mlx_dir(path):
        return _mlx_meta(path)
    if path.is_dir():
        raise BackendError(f"{path} is a directory but not an MLX model (config.json + *.safetensors)")
    from tokenizer.errors import TokenizerError
    from tokenizer.gguf import VOCAB_ARRAYS, read_gguf

    try:
        gguf = read_gguf(path, defer=VOCAB_ARRAYS)  # decoded by the tokenizer's load (GGUFFile.vocab_arrays)
    except TokenizerError as exc:
        raise BackendError(f"{path.name} is not a readable GGUF model: {exc}") from exc
    kv = gguf.kv
    arch = str(kv.get("general.architecture", "unknown"))
    ftype = kv.get("general.file_type")
    quant = FILE_TYPES.get(ftype, f"type {ftype}") if isinstance(ftype, int) else "unknown"
    ctx = kv.get(f"{arch}.context_length")
    return ModelMeta(
        path=path, format="gguf", name=str(kv.get("general.name") or path.stem), architecture=arch,
        quantization=quant, context_length=int(ctx) if isinstance(ctx, int) else None, kv=kv, gguf=gguf,
    )


def known_meta(path: Path | str, meta: ModelMeta | None) -> ModelMeta:
    """``meta`` when it was read from ``path`` (handed over by the caller), else the header read now."""
    if meta is not None and meta.path == Path(path):
        return meta
    return read_model_meta(path)


def header_facts(meta: ModelMeta) -> dict[str, Any]:
    """The header's scalar facts as JSON, for the engine process (:mod:`backends.engine_client`).

    Every backend reads only scalars (name, quantization, context length, block count); sending
    them spares the engine a second parse of the header, whose vocabulary arrays (Qwen's 151,936
    tokens and merges) cost the engine process tens of MiB and tens of milliseconds at start.
    """
    scalars = {k: v for k, v in meta.kv.items() if isinstance(v, (str, int, float, bool))}
    return {"format": meta.format, "name": meta.name, "architecture": meta.architecture,
            "quantization": meta.quantization, "context_length": meta.context_length, "kv": scalars}


def meta_from_facts(path: Path | str, facts: dict[str, Any]) -> ModelMeta:
    """The :class:`ModelMeta` of :func:`header_facts` (no ``gguf``: the engine never tokenizes)."""
    return ModelMeta(path=Path(path), format=facts["format"], name=facts["name"],
                     architecture=facts["architecture"], quantization=facts["quantization"],
                     context_length=facts["context_length"], kv=dict(facts["kv"]))


def _mlx_meta(path: Path) -> ModelMeta:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read {path / 'config.json'}: {exc}") from exc
    q = config.get("quantization") or {}
    quant = f"{q.get('bits')}-bit (group {q.get('group_size')})" if q else str(config.get("torch_dtype", "float"))
    ctx = config.get("max_position_embeddings")
    return ModelMeta(
        path=path, format="mlx", name=path.name, architecture=str(config.get("model_type", "unknown")),
        quantization=quant, context_length=int(ctx) if isinstance(ctx, int) else None, kv=config,
    )


def kv_cache_bytes(meta: ModelMeta, n_ctx: int, kv_type: KvType = F16) -> int | None:
    """The K and V cache of ``n_ctx`` tokens in ``kv_type`` (llama.cpp's default f16), as llama.cpp sizes it
    (None: unknown).

    Per token and layer: ``head_count_kv`` K values of ``key_length`` and V values of ``value_length``;
    the head sizes default to ``embedding_length / head_count``.  Sliding-window layers and
    recurrent models take less; this is the upper figure.
    """
    kv, arch = meta.kv, meta.architecture

    def num(key: str) -> int | None:
        value = kv.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer counts: the largest
            value = max((v for v in value if isinstance(v, int)), default=None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    layers, heads, embd = num("block_count"), num("attention.head_count"), num("embedding_length")
    if not (layers and heads and embd):
        return None
    heads_kv = num("attention.head_count_kv") or heads
    k_len = num("attention.key_length") or embd // heads
    v_len = num("attention.value_length") or embd // heads
    per_token = layers * heads_kv * (k_len * bytes_per_value(kv_type.k) + v_len * bytes_per_value(kv_type.v))
    return int(n_ctx * per_token)


def explain_load_failure(meta: ModelMeta | None, path: Path, n_ctx: int | None) -> str | None:
    """A better line than the engine's "could not load" when the header says why, else None.

    A file cut short (a tensor past its end), which the engine reports only as "could not load".  A
    context too large for this machine is refused before any engine starts (:func:`backends.fit.refusal`).
    """
    if meta is None or meta.format != "gguf" or meta.gguf is None:
        return None
    from tokenizer.gguf_extents import truncation

    return truncation(path, meta.gguf) or None
