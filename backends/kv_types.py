"""The KV cache's element types: what ``--kv-type`` accepts, what each costs per value, what llama.cpp calls it.

llama.cpp stores K and V in any of its block types (``--cache-type-k/-v``,
Ollama's ``OLLAMA_KV_CACHE_TYPE``).  tokchat offers the three that matter on a
small machine: ``f16`` (llama.cpp's default), ``q8_0`` (34 bytes per 32
values: 0.53x the memory) and ``q4_0`` (18 bytes per 32: 0.28x).  One owner
for the arithmetic: the offload plan, ``tokchat fit``, ``doctor`` and the load
notes all size the cache through :func:`bytes_per_value`.

A quantized V cache needs flash attention in llama.cpp (its V is read
transposed without it, which only F16/F32 allow): :func:`needs_flash_attn`.
"""
from __future__ import annotations

from dataclasses import dataclass

#: name -> (ggml type id as llama.h numbers it, bytes per block, values per block)
_TYPES: dict[str, tuple[int, int, int]] = {"f16": (1, 2, 1), "q8_0": (8, 34, 32), "q4_0": (2, 18, 32)}
NAMES: tuple[str, ...] = tuple(_TYPES)


class KvTypeError(ValueError):
    """A ``--kv-type`` that names no type tokchat offers."""


@dataclass(frozen=True)
class KvType:
    """The K and the V cache's element types (the same unless given as ``K/V``)."""

    k: str = "f16"
    v: str = "f16"

    def __str__(self) -> str:
        return self.k if self.k == self.v else f"{self.k}/{self.v}"

    @property
    def ggml_k(self) -> int:
        return _TYPES[self.k][0]

    @property
    def ggml_v(self) -> int:
        return _TYPES[self.v][0]

    @property
    def needs_flash_attn(self) -> bool:
        return self.v != "f16"

    def bytes_per_token_value(self) -> float:
        """Bytes of one K value plus one V value (the cache holds as many of each)."""
        return bytes_per_value(self.k) + bytes_per_value(self.v)


F16 = KvType()


def bytes_per_value(name: str) -> float:
    _, block_bytes, block_values = _TYPES[name]
    return block_bytes / block_values


def parse_kv_type(text: str | None) -> KvType:
    """``"q8_0"`` -> both q8_0; ``"q8_0/f16"`` -> K q8_0, V f16; None or "" -> f16."""
    if not text:
        return F16
    parts = [p.strip().lower() for p in text.split("/")]
    if len(parts) > 2 or any(p not in _TYPES for p in parts):
        raise KvTypeError(f"--kv-type {text!r}: use one of {', '.join(NAMES)}, or K/V such as q8_0/f16")
    return KvType(parts[0], parts[-1])
