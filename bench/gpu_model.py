"""A GGUF of a real model's shape and vocabulary with random weights, for machines no model file can reach.

The GPU check (``bench/gpu_check.sh``) runs where nothing can be downloaded
and at most 64 MiB travel: no real 1.5B model fits.  This writes one of
Qwen2.5-1.5B-Instruct's exact shape (28 blocks, 1536 wide, 12 query and 2
key/value heads, 8960-wide feed-forward, tied embeddings) with the real Qwen2
vocabulary, merges and chat template taken from a vocab-only GGUF (llama.cpp's
``models/ggml-vocab-qwen2.gguf``), and seeded random F16 weights; the check
then quantizes it with llama.cpp's own ``llama-quantize``.  Speed depends on
the shape and the quantization, not on what the weights learned, so the
timings are those of the real model; the replies are nonsense, but the same
nonsense for every engine that computes the same thing.

    python bench/gpu_model.py --vocab ggml-vocab-qwen2.gguf --out model-f16.gguf [--blocks 28]

Needs numpy and ``gguf`` (llama.cpp's ``gguf-py``, which the check brings
with the sources).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

#: Qwen2.5-1.5B-Instruct's hyper-parameters (its config.json)
QWEN25_15B = {"embd": 1536, "blocks": 28, "heads": 12, "kv_heads": 2, "ff": 8960, "ctx": 32768,
              "rope_base": 1_000_000.0, "eps": 1e-6}
#: Qwen2.5-0.5B-Instruct's (the draft model of the CPU bench's pair)
QWEN25_05B = {"embd": 896, "blocks": 24, "heads": 14, "kv_heads": 2, "ff": 4864, "ctx": 32768,
              "rope_base": 1_000_000.0, "eps": 1e-6}
#: Qwen2.5-7B-Instruct's: a main model whose step its weights dominate on a GPU (its own output matrix)
QWEN25_7B = {"embd": 3584, "blocks": 28, "heads": 28, "kv_heads": 4, "ff": 18944, "ctx": 32768,
             "rope_base": 1_000_000.0, "eps": 1e-6, "untied": True}
SHAPES = {"1.5b": QWEN25_15B, "0.5b": QWEN25_05B, "7b": QWEN25_7B}


def random_matrix(rng: np.random.Generator, rows: int, cols: int, scale: float) -> np.ndarray:
    """(rows, cols) in numpy order: GGUF's ne0 is ``cols``; F16, so the file holds half the bytes."""
    return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float16)


def write_model(vocab: Path, out: Path, blocks: int | None = None, seed: int = 0, *, shape_name: str = "1.5b",
                silent_from: int | None = None, peak: float = 1.0) -> None:
    """``silent_from``: blocks from that index on write nothing into the residual stream (zero output and
    down projections) yet cost their full compute, so a model of the first blocks alone predicts exactly
    what this one does (:func:`keep_blocks`); ``peak`` scales the final norm so that the next id is as
    certain as a trained model's on text it copies (random weights alone give a flat distribution, and a
    draft model stops drafting below llama-server's and tokchat's 0.75 floor)."""
    import gguf

    base = SHAPES[shape_name]
    blocks = base["blocks"] if blocks is None else blocks
    shape = dict(base, blocks=blocks)
    source = gguf.GGUFReader(str(vocab))
    n_vocab = len(source.fields["tokenizer.ggml.tokens"].data)
    writer = gguf.GGUFWriter(str(out), "qwen2")
    silent = "" if silent_from is None else f", blocks {silent_from}+ silent"
    writer.add_name(f"Qwen2.5-{shape_name.upper()} shape, random weights (seed {seed}, {blocks} blocks{silent})")
    writer.add_context_length(shape["ctx"])
    writer.add_embedding_length(shape["embd"])
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(shape["ff"])
    writer.add_head_count(shape["heads"])
    writer.add_head_count_kv(shape["kv_heads"])
    writer.add_rope_freq_base(shape["rope_base"])
    writer.add_layer_norm_rms_eps(shape["eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            _copy_field(writer, key, field)
    rng = np.random.default_rng(seed)
    embd, ff = shape["embd"], shape["ff"]
    head_dim = embd // shape["heads"]
    kv = head_dim * shape["kv_heads"]
    ones = np.ones(embd, dtype=np.float32)
    writer.add_tensor("token_embd.weight", random_matrix(rng, n_vocab, embd, 0.05))
    if shape.get("untied"):
        writer.add_tensor("output.weight", random_matrix(rng, n_vocab, embd, 0.05))
    writer.add_tensor("output_norm.weight", ones * peak)
    for b in range(blocks):
        p = f"blk.{b}."
        quiet = silent_from is not None and b >= silent_from
        writer.add_tensor(p + "attn_norm.weight", ones)
        writer.add_tensor(p + "attn_q.weight", random_matrix(rng, embd, embd, 0.02))
        writer.add_tensor(p + "attn_q.bias", rng.standard_normal(embd, dtype=np.float32) * 0.02)
        writer.add_tensor(p + "attn_k.weight", random_matrix(rng, kv, embd, 0.02))
        writer.add_tensor(p + "attn_k.bias", rng.standard_normal(kv, dtype=np.float32) * 0.02)
        writer.add_tensor(p + "attn_v.weight", random_matrix(rng, kv, embd, 0.02))
        writer.add_tensor(p + "attn_v.bias", rng.standard_normal(kv, dtype=np.float32) * 0.02)
        writer.add_tensor(p + "attn_output.weight", random_matrix(rng, embd, embd, 0.0 if quiet else 0.02))
        writer.add_tensor(p + "ffn_norm.weight", ones)
        writer.add_tensor(p + "ffn_gate.weight", random_matrix(rng, ff, embd, 0.02))
        writer.add_tensor(p + "ffn_up.weight", random_matrix(rng, ff, embd, 0.02))
        writer.add_tensor(p + "ffn_down.weight", random_matrix(rng, embd, ff, 0.0 if quiet else 0.02))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def keep_blocks(source: Path, out: Path, keep: int) -> None:
    """The first ``keep`` blocks of a (quantized) GGUF, byte for byte, as a model of its own.

    Made from a model written with ``silent_from <= keep``, it predicts exactly what the whole model predicts
    (the same quantized weights, the dropped blocks added nothing) at a fraction of the cost: a draft model
    that agrees with the main model as the real 0.5B agrees with the real 1.5B on copied code (the CPU bench
    kept 278 of 278 drafted ids there), at the cost of a real draft model.
    """
    import gguf

    reader = gguf.GGUFReader(str(source))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = gguf.GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == f"{arch}.block_count":
            value = keep
        elif field.name == "general.name":
            value = f"{value}, first {keep} blocks"
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    kept = [t for t in reader.tensors
            if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < keep]
    for tensor in kept:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                               tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def _copy_field(writer, key: str, field) -> None:
    import gguf

    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        item = field.types[1]
        if item == gguf.GGUFValueType.STRING:
            values = [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
            writer.add_array(key, values)
        else:
            writer.add_array(key, [field.parts[i][0].item() for i in field.data])
    elif kind == gguf.GGUFValueType.STRING:
        writer.add_string(key, bytes(field.parts[field.data[0]]).decode("utf-8"))
    else:
        value = field.parts[field.data[0]][0].item()
        writer.add_key_value(key, value, kind)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, help="a vocab-only GGUF (tokenizer.* keys)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    parser.add_argument("--blocks", type=int, help="default: the shape's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--silent-from", type=int, help="blocks from this index on add nothing (see keep_blocks)")
    parser.add_argument("--peak", type=float, default=1.0, help="scale of the final norm (peaked next-id odds)")
    parser.add_argument("--keep-blocks", type=int, help="with --source: write its first N blocks as a model")
    parser.add_argument("--source", type=Path, help="a GGUF to cut (--keep-blocks)")
    args = parser.parse_args()
    if args.keep_blocks is not None:
        if args.source is None:
            parser.error("--keep-blocks needs --source")
        keep_blocks(args.source, args.out, args.keep_blocks)
    else:
        if args.vocab is None:
            parser.error("--vocab is needed to write a model")
        write_model(args.vocab, args.out, args.blocks, args.seed, shape_name=args.shape,
                    silent_from=args.silent_from, peak=args.peak)
    print(f"{args.out}: {args.out.stat().st_size / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
