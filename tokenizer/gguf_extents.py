"""Do a GGUF's tensors lie inside the file?  A download cut short says "no".

:mod:`tokenizer.gguf` reads the header and key/values and stops where the tensor infos
start (``GGUFFile.kv_end``).  This module reads on from there, the tensor infos only
(GGUF v2/v3: name, dimensions, ggml type, offset into the data section), and compares
each tensor's end with the file's size: llama.cpp refuses such a file with only
"failed to load model", and ``tokchat info`` read nothing past the tokenizer.

Sizes come from ggml's block layout (:data:`GGML_BLOCKS`); a type not in the table is
checked by its start only.  Not handled: the other parts of a split GGUF (each part
is checked when it is the file given), tensor data itself.

It sits beside :mod:`tokenizer.gguf`, which owns the GGUF layout, below the backends
(:func:`backends.model_meta.explain_load_failure`) and ``tokchat info`` that use it.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: ggml type id -> (elements per block, bytes per block), from ggml's type traits
GGML_BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110),
    22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
    29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
}
#: more dimensions than any ggml tensor has (GGML_MAX_DIMS is 4): a header that says so is broken
_MAX_DIMS = 8


class ExtentError(ValueError):
    """The tensor infos themselves run past the end of the file, or make no sense."""


@dataclass(frozen=True)
class TensorExtent:
    """Where one tensor's data lies in the file: ``[start, end)``; ``end`` is None for an unknown type."""

    name: str
    start: int
    end: int | None
    #: ggml's type number (llama.h's GGML_TYPE_*) and the dimensions, ne0 first (the offload plan and
    #: ``tokchat fit`` size llama.cpp's repacked copies from them)
    ggml_type: int = -1
    dims: tuple[int, ...] = ()


def tensor_extents(path: Path | str, gguf: Any) -> tuple[list[TensorExtent], int]:
    """Every tensor's extent in ``path`` and the file's size; ``gguf`` is its parsed header."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _read_infos(buf, size, gguf), size


def _read_infos(buf: Any, size: int, gguf: Any) -> list[TensorExtent]:
    off = gguf.kv_end
    infos: list[tuple[str, int, int | None, int, tuple[int, ...]]] = []  # (name, data offset, bytes, type, dims)

    def take(n: int, what: str) -> int:
        nonlocal off
        if off + n > size:
            raise ExtentError(f"the tensor infos end at byte {size} while reading {what}: the file is cut short")
        start, off = off, off + n
        return start

    for i in range(gguf.tensor_count):
        (length,) = struct.unpack_from("<Q", buf, take(8, f"tensor #{i}'s name"))
        name = bytes(buf[take(length, f"tensor #{i}'s name"):off]).decode("utf-8", "replace")
        (n_dims,) = struct.unpack_from("<I", buf, take(4, f"{name}'s dimensions"))
        if n_dims > _MAX_DIMS:
            raise ExtentError(f"tensor {name!r} has {n_dims} dimensions: the header is damaged")
        dims = struct.unpack_from(f"<{n_dims}Q", buf, take(8 * n_dims, f"{name}'s dimensions"))
        (ggml_type,) = struct.unpack_from("<I", buf, take(4, f"{name}'s type"))
        (offset,) = struct.unpack_from("<Q", buf, take(8, f"{name}'s offset"))
        elements = 1
        for d in dims:
            elements *= d
        block = GGML_BLOCKS.get(ggml_type)
        nbytes = elements // block[0] * block[1] if block else None
        infos.append((name, offset, nbytes, ggml_type, tuple(dims)))
    alignment = gguf.kv.get("general.alignment", 32)
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
    data_start = (off + alignment - 1) // alignment * alignment
    return [TensorExtent(name, data_start + offset, None if n is None else data_start + offset + n, kind, dims)
            for name, offset, n, kind, dims in infos]


def truncation(path: Path | str, gguf: Any) -> str | None:
    """One line when a tensor of ``path`` lies (partly) outside the file, else None."""
    try:
        extents, size = tensor_extents(path, gguf)
    except ExtentError as exc:
        return f"{Path(path).name} is damaged or cut short: {exc}"
    outside = [t for t in extents if (t.end if t.end is not None else t.start + 1) > size]
    if not outside:
        return None
    first = min(outside, key=lambda t: t.start)
    need = max(t.end if t.end is not None else t.start for t in extents)
    return (f"{Path(path).name} is cut short: it has {size:,} bytes but its tensors need {need:,} "
            f"({len(outside)} of {len(extents)} tensors lie past the end, from {first.name!r}); "
            "download it again")
