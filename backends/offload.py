"""How many layers go to the GPU, and what they cost there: the arithmetic behind ``--gpu-layers``.

The pinned llama.cpp fits a model to free device memory only in its
``common`` library (``llama-server --fit``), which the C API the engine
uses does not expose.  So tokchat fits it the same way from what it can
read itself: the GGUF's tensor sizes (:mod:`tokenizer.gguf_extents`), the
KV cache the context needs, and each GPU's free VRAM (:mod:`backends.gpu_inventory`).  All
layers go to the GPU when they fit with a margin for llama.cpp's compute
buffers; otherwise as many whole blocks as fit, the rest on the CPU.  Several
GPUs count as their free memory together with a reserve on each: llama.cpp's
default split puts whole layers on every GPU in proportion to its free memory.

After the load, :func:`read_load_report` reads what llama.cpp actually did
from its log (``offloaded 29/29 layers to GPU``, each device's model, KV
and compute buffers), so what tokchat shows is llama.cpp's own account,
not the estimate.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizer.gguf import GGUFFile
    from tokenizer.gguf_extents import TensorExtent

MIB = 1 << 20
#: kept free for llama.cpp's compute buffers, the CUDA context and cuBLAS workspaces
RESERVE_BYTES = 768 * MIB
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class ModelSizes:
    """Bytes of each repeating block, and of the rest (embeddings, output head, norms)."""

    blocks: list[int]
    other: int
    #: bytes of the output head (``output.weight``, or the tied embeddings): the "+1" layer llama.cpp offloads
    output: int

    @property
    def total(self) -> int:
        return sum(self.blocks) + self.other


def model_sizes(path: Path, gguf: GGUFFile | None = None) -> ModelSizes:
    """Per-block tensor bytes from the GGUF's tensor infos; ``gguf`` is its parsed header when already read."""
    from tokenizer.gguf import read_gguf
    from tokenizer.gguf_extents import tensor_extents

    extents, _ = tensor_extents(path, gguf if gguf is not None else read_gguf(path, keys=()))
    blocks: dict[int, int] = {}
    other = output = 0
    names = {e.name for e in extents}
    for e in extents:
        match = _BLOCK.match(e.name)
        if match:
            blocks[int(match.group(1))] = blocks.get(int(match.group(1)), 0) + _nbytes(e)
            continue
        other += _nbytes(e)
        if e.name == "output.weight" or (e.name == "token_embd.weight" and "output.weight" not in names):
            output = _nbytes(e)
    return ModelSizes([blocks[i] for i in sorted(blocks)], other, output)


def _nbytes(extent: TensorExtent) -> int:
    return (extent.end - extent.start) if extent.end is not None else 0


@dataclass(frozen=True)
class OffloadPlan:
    """``n_gpu_layers`` for llama.cpp (-1 = all) and the numbers that chose it."""

    n_gpu_layers: int
    layers_on_gpu: int
    total_layers: int  # blocks + the output layer, as llama.cpp counts them
    need_bytes: int  # VRAM the offloaded part needs (weights + KV cache + reserve)
    free_bytes: int

    @property
    def all_on_gpu(self) -> bool:
        return self.layers_on_gpu == self.total_layers


def plan_offload(sizes: ModelSizes, kv_per_block: int, free_bytes: int, reserve: int = RESERVE_BYTES) -> OffloadPlan:
    """All layers when they fit in ``free_bytes``, else the most whole blocks that do (from the first)."""
    total_layers = len(sizes.blocks) + 1
    everything = sizes.total + kv_per_block * len(sizes.blocks) + reserve
    if everything <= free_bytes:
        return OffloadPlan(-1, total_layers, total_layers, everything, free_bytes)
    used = reserve
    fitted = 0
    for block in sizes.blocks:
        if used + block + kv_per_block > free_bytes:
            break
        used += block + kv_per_block
        fitted += 1
    return OffloadPlan(fitted, fitted, total_layers, used, free_bytes)


@dataclass(frozen=True)
class DraftedPlan:
    """The main model's plan and the draft model's ``n_gpu_layers`` when both share one GPU."""

    main: OffloadPlan
    draft_gpu_layers: int
    #: VRAM the draft model takes (weights + KV cache) when it is wholly on the GPU, else 0
    draft_bytes: int


def plan_offload_with_draft(sizes: ModelSizes, kv_per_block: int, free_bytes: int, draft: ModelSizes,
                            draft_kv_per_block: int, reserve: int = RESERVE_BYTES) -> DraftedPlan:
    """The draft model first, whole (it runs several times per step: a draft split across devices costs more
    than it saves), then the main model's layers in what is left; a draft that does not fit whole stays on the
    CPU.  Together they never plan more than ``free_bytes``: the plan used to leave the draft model out."""
    draft_bytes = draft.total + draft_kv_per_block * len(draft.blocks)
    if draft_bytes + reserve > free_bytes:
        return DraftedPlan(plan_offload(sizes, kv_per_block, free_bytes, reserve), 0, 0)
    main = plan_offload(sizes, kv_per_block, free_bytes - draft_bytes, reserve)
    return DraftedPlan(main, -1, draft_bytes)


@dataclass
class LoadReport:
    """What llama.cpp's log says it did at load: layers offloaded and each buffer's size in MiB."""

    offloaded: int | None = None
    total: int | None = None
    #: (device, kind) -> MiB, e.g. ("CUDA0", "model"), ("CUDA0", "KV"), ("CPU_Mapped", "model")
    buffers: dict[tuple[str, str], float] = field(default_factory=dict)

    def total_mib(self, kind: str) -> float:
        """Every device's ``kind`` buffers together (host memory included)."""
        return sum(v for (_, k), v in self.buffers.items() if k == kind)

    def gpu_mib(self, kind: str) -> float:
        return sum(v for (dev, k), v in self.buffers.items()
                   if k == kind and not dev.upper().startswith("CPU") and not dev.endswith("_Host"))

    def summary(self) -> str:
        """``29/29 layers on the GPU · VRAM 934 MiB model + 112 MiB KV cache + 300 MiB compute``."""
        if not self.offloaded:
            return ""
        text = f"{self.offloaded}/{self.total} layers on the GPU"
        model, kv, compute = self.gpu_mib("model"), self.gpu_mib("KV"), self.gpu_mib("compute")
        if model:
            text += f" · VRAM {model:.0f} MiB model + {kv:.0f} MiB KV cache + {compute:.0f} MiB compute"
        return text


_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size =\s*([\d.]+) MiB")


def read_load_report(log_text: str) -> LoadReport:
    """The last load's report in a llama.cpp log (later loads in the same log override earlier ones)."""
    report = LoadReport()
    for line in log_text.splitlines():
        if (m := _OFFLOADED.search(line)):
            report = LoadReport(int(m.group(1)), int(m.group(2)))
        elif (m := _BUFFER.search(line)):
            key = (m.group(1), m.group(2))
            report.buffers[key] = report.buffers.get(key, 0.0) + float(m.group(3))
    return report


def ran_out_of_memory(log: str) -> bool:
    """Whether a llama.cpp log says an allocation failed (cudaMalloc, the CUDA pool's cuMemCreate, a buffer)."""
    low = log.lower()
    return "out of memory" in low or "failed to allocate" in low or "cudamalloc failed" in low


def out_of_memory_message(model_name: str, plan: OffloadPlan | None, n_ctx: int, what: str) -> str:
    """One line: what did not fit, the numbers, and a setting that would."""
    if plan is None:
        return (f"the GPU ran out of memory {what} ({model_name}, context {n_ctx}); try a smaller --ctx, "
                "or --gpu-layers with fewer layers than the model has")
    fewer = max(0, plan.layers_on_gpu // 2 if plan.layers_on_gpu else 0)
    return (f"the GPU ran out of memory {what} ({model_name}: {plan.layers_on_gpu}/{plan.total_layers} layers and "
            f"a {n_ctx}-token KV cache need about {plan.need_bytes / MIB:.0f} MiB, {plan.free_bytes / MIB:.0f} MiB "
            f"were free); try --ctx {max(512, n_ctx // 2)} or --gpu-layers {fewer}")
