"""Split a real GGUF the way llama.cpp's converters do, for the split-download tests.

A byte split of a GGUF cannot be loaded; llama.cpp's split format is a set of
valid GGUF files, ``NAME-00001-of-0000N.gguf``, each with ``split.no``,
``split.count`` and ``split.tensors.count``, the first holding all metadata.
The ``gguf`` package (llama.cpp's own gguf-py) writes that format
(``GGUFWriter(split_max_size=...)``, as ``convert_hf_to_gguf.py
--split-max-size`` does); here it copies every key and tensor of the
source, as its ``gguf_new_metadata.py`` script does, into parts.

The parts are cached beside the other test assets (built once, ~100 MB).
"""
from __future__ import annotations

import shutil
from pathlib import Path


def split_gguf(source: Path, out_dir: Path, stem: str, max_part_bytes: int) -> list[Path]:
    """Write ``stem-0000i-of-0000N.gguf`` parts of ``source`` into ``out_dir``; return them in order."""
    import gguf

    reader = gguf.GGUFReader(source)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    writer = gguf.GGUFWriter(tmp / f"{stem}.gguf", arch=arch, endianess=reader.endianess,
                             split_max_size=max_part_bytes)
    alignment = reader.get_field(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    for fld in reader.fields.values():
        if fld.name == gguf.Keys.General.ARCHITECTURE or fld.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        value_type = fld.types[0]
        sub_type = fld.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(fld.name, fld.contents(), value_type, sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                               tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return sorted(out_dir.glob(f"{stem}-*-of-*.gguf"))


def cached_split(source: Path, cache: Path, stem: str, max_part_bytes: int) -> list[Path]:
    """The parts of ``source``, built on first use under ``cache`` (marked done by a ``.ok`` file)."""
    out_dir = cache / f"{stem}.split"
    marker = cache / f".{stem}.split.ok"
    if not marker.exists():
        split_gguf(source, out_dir, stem, max_part_bytes)
        marker.write_text("ok\n")
    return sorted(out_dir.glob(f"{stem}-*-of-*.gguf"))
