"""Build an mlx-lm model from a GGUF file, keeping its quantized weights quantized.

``mlx.core.load`` reads GGUF tensors of type Q4_0, Q4_1 and Q8_0 as MLX
affine-quantized triples (``weight`` packed in uint32, ``scales``,
``biases``, group size 32) and F16/F32 as plain arrays; every other type
(the K-quants, IQ types) fails.  This module maps llama.cpp's tensor names
onto mlx-lm's ``llama`` / ``qwen2`` modules, quantizes exactly the layers
that arrive quantized (bits read off the packed shapes) and loads.

Why ``rope_traditional`` for llama: llama.cpp's converter permutes the Q/K
rows of llama-architecture weights so its "normal" (adjacent-pair) RoPE
applies; MLX calls that layout traditional.  qwen2 weights are not
permuted and use the NeoX (split-half) RoPE, MLX's default.

Not handled: other architectures, llama-3 style frequency scaling
(``rope_freqs.weight``), K-quants.
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from backends.base import BackendError
from backends.model_meta import ModelMeta

if TYPE_CHECKING:
    import mlx.nn

#: quantizations (general.file_type) whose tensors mx.load keeps or reads as floats
MLX_GGUF_TYPES = frozenset({"F32", "F16", "Q4_0", "Q4_1", "Q8_0"})
SUPPORTED_ARCHS = ("llama", "qwen2")
GROUP_SIZE = 32  # every GGUF block type mx.load understands has 32 weights per block

#: llama.cpp's per-block tensor name -> mlx-lm module path inside a layer
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def check_supported(meta: ModelMeta) -> None:
    """Refuse early, with the reason, what this loader cannot build."""
    if meta.architecture not in SUPPORTED_ARCHS:
        raise BackendError(
            f"tokchat's MLX GGUF loader builds {' and '.join(SUPPORTED_ARCHS)} models; "
            f"this is {meta.architecture}: use llama.cpp, or an MLX model directory"
        )
    if meta.quantization not in MLX_GGUF_TYPES:
        raise BackendError(
            f"MLX reads GGUF weights only as {', '.join(sorted(MLX_GGUF_TYPES))}; this file is "
            f"{meta.quantization}: use llama.cpp, or convert the model with mlx_lm.convert"
        )


def map_name(gguf_name: str) -> str:
    """``blk.3.attn_q.scales`` -> ``model.layers.3.self_attn.q_proj.scales``."""
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _BLOCK_NAMES:
        return f"model.layers.{parts[1]}.{_BLOCK_NAMES[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP_NAMES:
        return f"{_TOP_NAMES[parts[0]]}.{parts[1]}"
    raise BackendError(f"unexpected tensor {gguf_name!r} in the GGUF file: tokchat's MLX loader cannot place it")


def _model_args(meta: ModelMeta, weights: dict[str, Any]) -> tuple[ModuleType, Any]:
    """The mlx-lm model module for ``meta``'s architecture and its ``ModelArgs`` (a class of that module)."""
    arch = meta.architecture
    kv = meta.kv

    def need(key: str) -> Any:
        value = kv.get(f"{arch}.{key}")
        if value is None:
            raise BackendError(f"the GGUF file lacks {arch}.{key}: it cannot be rebuilt in MLX")
        return value

    heads = int(need("attention.head_count"))
    hidden = int(need("embedding_length"))
    common: dict[str, Any] = dict(
        model_type=arch,
        hidden_size=hidden,
        num_hidden_layers=int(need("block_count")),
        intermediate_size=int(need("feed_forward_length")),
        num_attention_heads=heads,
        num_key_value_heads=int(kv.get(f"{arch}.attention.head_count_kv", heads)),
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        vocab_size=int(weights["model.embed_tokens.weight"].shape[0]),
        rope_theta=float(kv.get(f"{arch}.rope.freq_base", 10000.0)),
        max_position_embeddings=int(kv.get(f"{arch}.context_length", 4096)),
        tie_word_embeddings="lm_head.weight" not in weights,
    )
    if arch == "llama":
        from mlx_lm.models import llama

        head_dim = kv.get("llama.attention.key_length")
        return llama, llama.ModelArgs(rope_traditional=True, head_dim=int(head_dim) if head_dim else None, **common)
    from mlx_lm.models import qwen2

    return qwen2, qwen2.ModelArgs(rope_traditional=False, **common)


def load_gguf_model(meta: ModelMeta) -> mlx.nn.Module:
    """The mlx-lm model for ``meta.path``, quantized layers kept quantized."""
    import mlx.core as mx
    import mlx.nn as nn

    check_supported(meta)
    try:
        raw = mx.load(str(meta.path))
    except (RuntimeError, ValueError) as exc:
        raise BackendError(f"MLX could not read {meta.path.name} ({meta.quantization}): {exc}") from exc
    assert isinstance(raw, dict)  # a .gguf file without return_metadata: name -> array
    if "rope_freqs.weight" in raw:
        raise BackendError("this GGUF uses llama-3 RoPE frequency scaling, which tokchat's MLX loader does not build")
    weights = {map_name(name): array for name, array in raw.items()}
    if not mx.metal.is_available():
        # CPU kernels for float16 are many times slower than float32 (measured: docs/engine.md, "Figures
        # behind the code's choices")
        weights = {k: v.astype(mx.float32) if v.dtype == mx.float16 else v for k, v in weights.items()}
    module, args = _model_args(meta, weights)
    model: mlx.nn.Module = module.Model(args)

    def quantized(path: str, layer: Any) -> bool | dict[str, int]:
        scales = weights.get(f"{path}.scales")
        if scales is None:
            return False
        # a uint32 word packs 32/bits weights: words per row / groups per row = bits
        bits = weights[f"{path}.weight"].shape[-1] * 32 // (scales.shape[-1] * GROUP_SIZE)
        return {"group_size": GROUP_SIZE, "bits": bits}

    nn.quantize(model, class_predicate=quantized)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise BackendError(f"the GGUF tensors do not fit the {meta.architecture} model built from its header: {exc}") from exc
    mx.eval(model.parameters())
    return model
