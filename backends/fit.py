"""Will it fit?  What a GGUF needs in memory, from its tensor infos, before anything is loaded.

One owner for the arithmetic that ``tokchat fit`` prints, that refuses a
``--ctx`` which cannot fit before an engine starts (:func:`refusal`), and
that sizes a draft model into the GPU offload plan
(:func:`draft_need_bytes`).  Each part is what llama.cpp's own load report
prints (``model buffer``, ``KV buffer``, ``compute buffer``):

* **weights**: the tensors' bytes (the ``CPU_Mapped`` buffer); on a CPU with
  AVX2 and repacking on, llama.cpp also copies its Q4_0/Q4_K/IQ4_NL matrices
  into a repacked buffer (``CPU_REPACK``): counted as well, since both are
  resident;
* **KV cache**: ``n_ctx`` x layers x KV heads x (K + V head sizes) at the
  chosen type's bytes per value (:mod:`backends.kv_types`);
* **compute**: with flash attention (llama.cpp's auto on the CPU) the largest
  graph holds a micro-batch's logits and a few activations:
  ``n_ubatch x (4 x n_vocab + 8 x n_embd)`` bytes, which matched the load
  reports of four real models to the MiB (docs/context.md, "Will it fit").
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from backends import gpu_inventory
from backends.gpu_inventory import GpuInventory
from backends.kv_types import NAMES, F16, KvType, parse_kv_type

#: llama.cpp's default physical batch (the micro-batch its compute graph is sized for)
N_UBATCH = 512
#: ggml types llama.cpp's CPU backend repacks on x86 with AVX2 (Q4_0, Q4_K, IQ4_NL): ggml-cpu/repack.cpp
_REPACKED_TYPES = {2, 12, 20}
#: contexts are offered in steps of this many tokens (llama.cpp pads the context to 256)
CTX_STEP = 256


@dataclass(frozen=True)
class ModelNeed:
    """Bytes one model needs at one context and KV type, by part."""

    name: str
    weights: int
    repacked: int
    kv: int
    compute: int
    #: bytes of KV cache per token (for the largest context that fits)
    kv_per_token: float
    context_length: int | None

    @property
    def total(self) -> int:
        return self.weights + self.repacked + self.kv + self.compute



@dataclass(frozen=True)
class Memory:
    """Free memory now: RAM (MemAvailable) and each GPU's free VRAM."""

    ram: int
    gpus: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.ram + sum(self.gpus)


def available_ram() -> int:
    """Bytes of memory a model could use now: MemAvailable on Linux, else all physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass  # not Linux: the total below
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def free_memory(gpu: bool = True, gpus: GpuInventory | None = None) -> Memory:
    """RAM now, and each NVIDIA GPU's free VRAM where ``gpu``: from ``gpus`` (what detection read) or this
    process's :func:`backends.gpu_inventory.current`."""
    if not gpu:
        return Memory(available_ram())
    return Memory(available_ram(), (gpus or gpu_inventory.current()).free_vram_per_gpu())


def model_need(path: Path, meta: Any, n_ctx: int, kv_type: KvType = F16, *, repack: bool = True,
               cpu_repacks: bool | None = None) -> ModelNeed:
    """What ``path`` (its header ``meta``, a :class:`backends.model_meta.ModelMeta`) needs at ``n_ctx``."""
    from backends.model_meta import kv_cache_bytes

    weights, quantized_mats, n_embd, n_vocab = _tensor_facts(Path(path), meta)
    if cpu_repacks is None:
        cpu_repacks = _cpu_has_avx2()
    repacked = quantized_mats if repack and cpu_repacks else 0
    per_1024 = kv_cache_bytes(meta, 1024, kv_type) or 0
    compute = N_UBATCH * (n_vocab * 4 + n_embd * 8)
    if kv_type != F16:
        # flash attention reads a quantized cache through an f16 copy of a layer's K and V; below about half the
        # logits buffer it reuses that space (Qwen2.5-0.5B q8_0: 302 MiB from 4,096 to 262,144 ids), above it
        # grows the buffer (620 MiB at 600,064 ids; SmolLM2 268 MiB at 262,144): within 4% of the totals
        layers = meta.kv.get(f"{meta.architecture}.block_count")
        f16_layer = (kv_cache_bytes(meta, n_ctx, F16) or 0) // layers if isinstance(layers, int) and layers else 0
        compute += max(0, f16_layer - compute // 2)
    return ModelNeed(name=Path(path).name, weights=weights, repacked=repacked,
                     kv=int(per_1024 * n_ctx / 1024), compute=compute, kv_per_token=per_1024 / 1024,
                     context_length=meta.context_length)


@functools.lru_cache(maxsize=16)
def _scan(path: str, stamp: tuple[int, int], gguf: Any) -> tuple[int, int, int, int]:
    from tokenizer.gguf import read_gguf
    from tokenizer.gguf_extents import tensor_extents

    gguf = gguf.value
    extents, _ = tensor_extents(path, gguf if gguf is not None else read_gguf(path, keys=()))
    weights = sum((e.end - e.start) for e in extents if e.end is not None)
    repackable = sum((e.end - e.start) for e in extents
                     if e.end is not None and e.ggml_type in _REPACKED_TYPES and len(e.dims) == 2
                     and e.dims[1] % 8 == 0 and e.name != "token_embd.weight")
    by_name = {e.name: e for e in extents}
    head = by_name.get("output.weight") or by_name.get("token_embd.weight")
    n_embd, n_vocab = (head.dims[0], head.dims[1]) if head is not None and len(head.dims) == 2 else (0, 0)
    return weights, repackable, n_embd, n_vocab


def _tensor_facts(path: Path, meta: Any) -> tuple[int, int, int, int]:
    """(tensor bytes, bytes llama.cpp's CPU backend repacks, n_embd, n_vocab), scanned once per file version."""
    st = path.stat()
    return _scan(str(path), (st.st_size, st.st_mtime_ns), _Unhashed(meta.gguf))


class _Unhashed:
    """The parsed header rides along the cache key without taking part in it."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Unhashed)


def largest_context(need_at: Callable[[int], int], free: int, limit: int = 1 << 24) -> int:
    """The largest context (a multiple of :data:`CTX_STEP`, at most ``limit``) whose total need,
    ``need_at(n_ctx)`` bytes, fits in ``free``: a bisection, since the compute buffer is not linear."""
    low, high = 0, limit // CTX_STEP
    while low < high:
        mid = (low + high + 1) // 2
        if need_at(mid * CTX_STEP) <= free:
            low = mid
        else:
            high = mid - 1
    return low * CTX_STEP


def need_at(path: Path, meta: Any, kv_type: KvType, *, draft: tuple[Path, Any] | None = None,
            repack: bool = True) -> Callable[[int], int]:
    """``n_ctx -> bytes`` for the model and its draft model (for :func:`largest_context`)."""
    def total(n_ctx: int) -> int:
        main = model_need(path, meta, n_ctx, kv_type, repack=repack).total
        return main + (model_need(draft[0], draft[1], n_ctx, kv_type, repack=repack).total if draft else 0)

    return total


def _cpu_has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return " avx2" in line
    except OSError:
        return False
    return False


def gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if abs(n) >= 1e8 else f"{n / 1e6:,.0f} MB"


def refusal(path: Path, meta: Any, n_ctx: int, kv_type: KvType, memory: Memory, *,
            draft: tuple[Path, Any] | None = None, repack: bool = True) -> str | None:
    """One line refusing ``--ctx n_ctx`` when the model, its KV cache and compute buffers (and a draft
    model's) need more than RAM and every GPU hold together; None when it fits (or cannot be told)."""
    try:
        main = model_need(path, meta, n_ctx, kv_type, repack=repack)
        helper = model_need(draft[0], draft[1], n_ctx, kv_type, repack=repack) if draft else None
    except (OSError, ValueError):
        return None  # a header that cannot be read is the load's to report
    need = main.total + (helper.total if helper else 0)
    if not memory.total or need <= memory.total or main.kv_per_token <= 0:
        return None
    where = f"RAM {gb(memory.ram)}" + "".join(f" + GPU{i} {gb(g)}" for i, g in enumerate(memory.gpus))
    fits = largest_context(need_at(path, meta, kv_type, draft=draft, repack=repack), memory.total)
    others = [f"--kv-type {name} {largest_context(need_at(path, meta, parse_kv_type(name), draft=draft, repack=repack), memory.total):,}"
              for name in NAMES if parse_kv_type(name) != kv_type]
    draft_part = f" + draft model {gb(helper.total)}" if helper else ""
    trained = main.context_length or "?"
    advice = (f"lower --ctx to {fits:,} or less" if fits > 0 else
              "the weights alone do not fit: pick a smaller quantization or model")
    return (f"--ctx {n_ctx} needs a KV cache of about {gb(main.kv)} for {main.name} ({kv_type}); with the weights "
            f"{gb(main.weights + main.repacked)} and compute {gb(main.compute)}{draft_part} that is {gb(need)}, and "
            f"this machine has {gb(memory.total)} free ({where}): {advice} (largest with "
            f"{', '.join(others)}; the model was trained on {trained} tokens)")


def default_offload(path: Path, meta: Any, n_ctx: int, kv_type: KvType, free: int | Sequence[int],
                    draft: Path | None = None) -> Any:
    """The default GPU offload for ``path`` with ``free`` bytes of VRAM (or each GPU's free bytes: planned
    as their sum, less llama.cpp's reserve on each, as its default split spreads whole layers over them): a
    :class:`backends.offload.DraftedPlan` where a readable ``draft`` model is placed first, else an
    :class:`backends.offload.OffloadPlan`; None where the header cannot tell, or there is no GPU (llama.cpp's
    own "all layers" then).  The load (``backends.llama_cpp``) and ``tokchat fit`` both ask this."""
    from backends.base import BackendError
    from backends.model_meta import known_meta, kv_cache_bytes
    from backends.offload import RESERVE_BYTES, model_sizes, plan_offload, plan_offload_with_draft

    each = [free] if isinstance(free, int) else list(free)
    if not each:
        return None
    total, reserve = sum(each), RESERVE_BYTES * len(each)  # llama.cpp's compute buffers and context on each GPU
    kv = kv_cache_bytes(meta, n_ctx, kv_type)
    blocks = meta.kv.get(f"{meta.architecture}.block_count")
    if kv is None or not isinstance(blocks, int) or blocks <= 0:
        return None
    try:
        sizes = model_sizes(path, meta.gguf)  # the header the load already parsed, where it did
    except (OSError, ValueError):
        return None
    if draft is not None:
        try:
            draft_meta = known_meta(draft, None)
            draft_sizes = model_sizes(draft, draft_meta.gguf)
            draft_kv = kv_cache_bytes(draft_meta, n_ctx, kv_type)
        except (BackendError, OSError, ValueError):
            draft_kv = None  # its load reports what is wrong with it
        if draft_kv is not None and draft_sizes.blocks:
            return plan_offload_with_draft(sizes, kv // blocks, total, draft_sizes,
                                           draft_kv // len(draft_sizes.blocks), reserve)
    return plan_offload(sizes, kv // blocks, total, reserve)
