"""An MLX model directory from a GGUF: mlx-lm's own save of the model tokchat builds from the file.

The directory holds what ``mlx_lm.utils.load_model`` reads (``config.json``
with the per-layer quantization, ``model.safetensors``), written by mlx-lm's
``save_model``/``save_config`` from the model :mod:`backends.mlx_gguf` builds
(quantized layers stay quantized, bit for bit), plus the GGUF's tokenizer as
``tokenizer.json``/``tokenizer_config.json`` (:mod:`tokenizer.export_json`),
so ``tokchat --model DIR`` chats with the same ids as the GGUF.

The config keeps ``rope_traditional`` true for llama: the GGUF's Q/K rows are
in llama.cpp's permuted layout (see :mod:`backends.mlx_gguf`).
"""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from backends.model_meta import read_model_meta


def export_mlx_dir(gguf_path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> Path:
    """Write the MLX model directory for ``gguf_path`` into ``directory``; returns it.

    Run it on the thread that will not use MLX again, or call
    :func:`backends.mlx.clear_thread_streams` after it (MLX streams are per thread).
    """
    from mlx_lm.utils import save_config, save_model

    from backends.mlx_gguf import GROUP_SIZE, load_gguf_model
    from tokenizer.export_json import export_tokenizer

    meta = read_model_meta(Path(gguf_path))
    model = load_gguf_model(meta)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    quantization: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": 4}
    for path, module in model.named_modules():
        # a layer quantized differently (a Q8_0 embedding in a Q4_1 file) gets its own entry, as mlx-lm reads it
        if getattr(module, "bits", 4) != 4:
            quantization[path] = {"group_size": module.group_size, "bits": module.bits}
    config = {**asdict(model.args), "quantization": quantization}
    save_model(target, model)
    save_config(config, target / "config.json")
    export_tokenizer(gguf_path, target)
    return target
